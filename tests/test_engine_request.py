"""lab/engine/launch/form.py and request.py: the launch form's table, form/CLI values to a
RunConfig and back, the preview."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from lab.engine.launch import form, knobs, models, request
from lab.engine.launch.config import problems
from lab.engine.launch.trainer_options import CHECKPOINTS
from lab.engine.spec.modes import MODES
from lab.engine.spec.run import RunConfig, trainer_fields
from lab.runfolder import REPO_ROOT


def test_the_form_has_one_widget_per_config_field():
    names = [f.name for f in form.FIELDS]
    assert sorted(names) == sorted([f.name for f in trainer_fields()] + [form.FOLDER])
    for attr in ("key", "label"):
        values = [getattr(f, attr) for f in form.FIELDS]
        assert len(set(values)) == len(values), f"two widgets share a {attr}"
    by = form.BY_NAME
    assert (by["mode"].choices(), by["model"].choices(), by["checkpoint"].choices()) == (
        MODES,
        models.names(),
        CHECKPOINTS,
    )
    assert by["model"].choices()[0] == "tinycnn" and {"resnet50", "vit_b_16"} <= set(
        by["model"].choices()
    )
    assert by["mode"].shown("ddp").startswith("ddp —") and by["model"].shown("tinycnn") == "tinycnn"
    assert by["epochs"].label == "Epochs"  # the browser test finds it by this label
    for f in form.FIELDS:  # every select's options are values the config accepts
        for option in f.choices():
            if f.name != "dataset":  # fp16 needs a GPU: every option is tried with one
                mode = knobs.ONLY_IN.get(f.name, "single")  # a mode's own option: in that mode
                c = RunConfig(**{"mode": mode, f.name: option, "gpus": (0,), "nproc": 1})
                assert not [e for e in problems(c, 1) if e.field == f.name], option


def test_defaults_follow_the_mode_and_the_machine():
    assert request.run_config({}, 0) == (RunConfig(), [])
    gpus = {m: request.run_config({"mode": m}, 4)[0] for m in MODES}
    assert [(c.gpus, c.nproc) for c in gpus.values()] == [
        ((0,), 1),
        ((0, 1, 2, 3), 1),
        ((0, 1, 2, 3), 4),
        ((0, 1, 2, 3), 4),
    ]
    cpu_ddp = request.run_config({"mode": "ddp", "gpus": None, "nproc": None}, 0)[0]
    assert (cpu_ddp.gpus, cpu_ddp.nproc) == ((), 2)
    assert request.run_config({"mode": "ddp", "gpus": "cpu"}, 4)[0].gpus == ()
    two = request.run_config({"mode": "ddp", "gpus": "0, 2"}, 4)[0]
    assert (two.gpus, two.nproc) == ((0, 2), 2)
    # given: kept, for problems() to refuse
    assert request.run_config({"mode": "dp", "nproc": 3}, 0)[0].nproc == 3


def test_text_values_are_read_and_unreadable_ones_reported_beside_the_config():
    cfg, errors = request.run_config(
        {
            "gpus": "0,x",
            "epochs": 3,
            "tags": "a, b  a",
            "name": " mine ",
            "rdzv_endpoint": " h:1 ",
            "extra_env": "# a comment\nA = 1\n\nB=x=y\nbroken",
            "dataset": "imagefolder",
            form.FOLDER: " /data ",
        },
        2,
    )
    assert [(e.field, e.message) for e in errors] == [
        ("gpus", "'0,x' is not a list of GPU numbers: use e.g. 0,1, or cpu for none"),
        ("extra_env", "'broken' is not KEY=VALUE: use e.g. NCCL_DEBUG=INFO"),
    ]
    # unreadable: the default; the rest kept
    assert (cfg.gpus, cfg.extra_env, cfg.epochs) == ((0,), {}, 3)
    assert (cfg.tags, cfg.name, cfg.rdzv_endpoint, cfg.dataset) == (
        ("a", "b"),
        "mine",
        "h:1",
        "imagefolder:/data",
    )
    cfg, errors = request.run_config(
        {"extra_env": ["A=1", "B=x=y"], "tags": ["a b", "c"], "gpus": (1,)}, 2
    )
    assert (
        errors == []
        and cfg.extra_env == {"A": "1", "B": "x=y"}
        and cfg.tags == ("a b", "c")
        and cfg.gpus == (1,)
    )
    # the folder only counts with the imagefolder kind; a bare kind is left for problems() to name
    assert (
        request.run_config({"dataset": "synthetic", form.FOLDER: "/x"}, 0)[0].dataset == "synthetic"
    )
    assert request.run_config({"dataset": "imagefolder"}, 0)[0].dataset == "imagefolder"
    # as typed, trimmed
    assert request.run_config({"profile_steps": " 20:25 "}, 0)[0].profile_steps == "20:25"


@pytest.mark.parametrize(
    "cfg,gpu_count",
    [
        (RunConfig(), 0),
        (
            RunConfig(
                mode="ddp",
                nproc=3,
                tags=("a", "b"),
                extra_env={"X": "1", "Y": "a=b"},
                amp=True,
                lr=0.1,
            ),
            0,
        ),
        (
            RunConfig(
                mode="dp", gpus=(1, 2), dataset="imagefolder:/data/x", name="n", checkpoint="none"
            ),
            4,
        ),
        (
            RunConfig(
                mode="ddp", gpus=(0, 1), nproc=2, nnodes=2, node_rank=1, rdzv_endpoint="h:29400"
            ),
            2,
        ),
        (RunConfig(profile_steps="20:25"), 0),
        (RunConfig(gpus=(0,), memory_snapshot=5), 1),
    ],
)
def test_form_values_give_the_config_back(cfg, gpu_count):
    values = request.form_values(cfg)
    shown = {}
    for f in form.FIELDS:  # as the page reads its widgets: a disabled one gives None
        shown[f.name] = values[f.name] if f.enabled(shown) else None
    assert request.run_config(shown, gpu_count) == (cfg, [])


def test_preview_has_placeholders_and_only_the_changed_environment(monkeypatch, tmp_path):
    # already what the launcher sets: not shown
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("OMP_NUM_THREADS", "99")  # different: shown
    snap = SimpleNamespace(gpus=(), cpu=SimpleNamespace(cores=2))
    p = request.preview(RunConfig(mode="ddp", nproc=2), snap, tmp_path)
    assert p.argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert p.argv[p.argv.index("--master-port") + 1] == request.PORT_PLACEHOLDER
    assert p.argv[p.argv.index("--log-dir") + 1] == str(
        tmp_path / request.RUN_ID_PLACEHOLDER / "logs"
    )
    assert (
        "CUDA_DEVICE_ORDER" not in p.env
        and p.env["OMP_NUM_THREADS"] == "1"
        and p.env["CUDA_VISIBLE_DEVICES"] == ""
    )
    assert (
        p.cwd == str(REPO_ROOT)
        and p.other_nodes == []
        and any("gloo" in line for line in p.preflight)
    )
    two = request.preview(
        RunConfig(mode="ddp", nproc=1, nnodes=2, rdzv_endpoint="h:29400"), snap, tmp_path
    )
    assert len(two.other_nodes) == 1 and "--node-rank" in two.other_nodes[0]
    # several nodes meet at the rendezvous endpoint instead
    assert request.PORT_PLACEHOLDER not in two.argv


def test_a_memory_snapshot_reaches_the_trainer_on_a_gpu_and_is_refused_without_one():
    gpu = RunConfig(gpus=(0,), memory_snapshot=5)
    assert form.trainer_flags(gpu)[-2:] == ["--memory-snapshot", "5"]
    assert "--memory-snapshot" not in form.trainer_flags(RunConfig(gpus=(0,)))
    assert problems(gpu, 1) == []
    cpu = [(e.field, str(e)) for e in problems(RunConfig(gpus=(), memory_snapshot=5), 0)]
    assert len(cpu) == 1 and cpu[0][0] == "memory_snapshot" and "no GPU" in cpu[0][1]
    assert "\n" not in cpu[0][1]
    slurm = RunConfig(backend="slurm", gpus=(), gpus_per_node=2, memory_snapshot=5)
    assert not [e for e in problems(slurm, 0) if e.field == "memory_snapshot"]
    too_many = problems(RunConfig(gpus=(0,), memory_snapshot=-1), 1)
    assert [e.field for e in too_many] == ["memory_snapshot"]
