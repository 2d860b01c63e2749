"""lab/engine/launch/config.py, lab/engine/launch/launcher.py's commands and
lab/engine/preflight/checks.py: RunConfig validation, the exact commands built for each mode,
preflight lines."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from lab.engine.launch.backends import build_command
from lab.engine.launch.commands import other_node_commands
from lab.engine.launch.config import problems, validate
from lab.engine.preflight.checks import preflight
from lab.engine.spec.run import ConfigError, RunConfig
from lab.engine.sweep.plan import compare_modes_configs, scaled
from lab.runfolder import REPO_ROOT

RUN = Path("/runs/r1")
TRAIN = ["-m", "training.train"]


def _tail(mode: str, dev: str = "cpu", **kw) -> list[str]:
    d = dict(
        model="tinycnn",
        dataset="digits",
        epochs="3",  # RunConfig default: long enough for a 90% interval
        max_steps="0",
        batch_size="64",
        lr="0.05",
        workers="0",
        seed="0",
        log_dir=str(RUN),
        log_every="10",
        val_every="0",
        image_size="32",
        checkpoint="last",
        grad_norm_warn="0.0",
        device=dev,
    )
    d.update(kw)
    out = ["--mode", mode]
    for k, v in d.items():
        out += [f"--{k.replace('_', '-')}", v]
    return out


def test_single_cpu_command_and_env_exactly():
    argv, env = build_command(
        RunConfig(), RUN, 0, base_env={"PATH": "/bin", "PYTHONPATH": "/x"}, cores=8
    )
    assert argv == [sys.executable] + TRAIN + _tail("single")
    assert env == {
        "PATH": "/bin",
        "CUDA_VISIBLE_DEVICES": "",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "OMP_NUM_THREADS": "8",
        "PYTHONUNBUFFERED": "1",
        "TORCHELASTIC_ERROR_FILE": "/runs/r1/error.json",
        "PYTHONPATH": f"{REPO_ROOT}:/x",
    }


def test_dp_on_gpus_with_user_text_kept_as_one_argv_item():
    c = RunConfig(
        mode="dp",
        gpus=(2, 3),
        amp=True,
        dataset="imagefolder:/data/my images; rm -rf ~",
        extra_env={"NCCL_DEBUG": "INFO"},
        lr=0.1,
    )
    argv, env = build_command(c, RUN, 0, base_env={}, cores=4, uuids={2: "GPU-c", 3: "GPU-d"})
    assert argv == [sys.executable] + TRAIN + _tail(
        "dp", "cuda", dataset="imagefolder:/data/my images; rm -rf ~", lr="0.1"
    ) + ["--amp"]
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-c,GPU-d" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["NCCL_DEBUG"] == "INFO" and env["OMP_NUM_THREADS"] == "4"
    # GPU 3's UUID could not be read
    _, env = build_command(c, RUN, 0, base_env={}, uuids={2: "GPU-c"})
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-c,3"


def test_ddp_single_node_command():
    c = RunConfig(mode="ddp", nproc=2, batch_size=32, extra_env={"OMP_NUM_THREADS": "1"})
    argv, env = build_command(c, RUN, 41234, base_env={}, cores=2)
    assert argv == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--nnodes",
        "1",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        "41234",
        "--log-dir",
        "/runs/r1/logs",
        "--tee",
        "3",
    ] + TRAIN + _tail("ddp", batch_size="32")
    assert env["OMP_NUM_THREADS"] == "1"  # extra_env overrides the default
    _, env = build_command(RunConfig(mode="ddp", nproc=2), RUN, 1, base_env={}, cores=2)
    assert env["OMP_NUM_THREADS"] == "1"  # default: cores // processes
    _, env = build_command(RunConfig(mode="ddp", nproc=4), RUN, 1, base_env={}, cores=2)
    assert env["OMP_NUM_THREADS"] == "1"  # never 0


def test_multi_node_commands():
    c = RunConfig(
        mode="ddp", nproc=1, nnodes=3, node_rank=0, rdzv_endpoint="10.0.0.1:29400", batch_size=60
    )
    argv, _ = build_command(c, RUN, 0, base_env={})
    rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.1:29400", "--rdzv-id", "r1"]
    head = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "--nnodes", "3"]
    tail = ["--log-dir", "/runs/r1/logs", "--tee", "3"] + TRAIN + _tail("ddp", batch_size="60")
    assert argv == head + ["--node-rank", "0"] + rdzv + tail
    gpu_env = ["env", "CUDA_VISIBLE_DEVICES=", "CUDA_DEVICE_ORDER=PCI_BUS_ID"]
    assert other_node_commands(c, RUN) == [
        gpu_env + head + ["--node-rank", str(r)] + rdzv + tail for r in (1, 2)
    ]
    assert other_node_commands(RunConfig(mode="ddp", nproc=2), RUN) == []
    # on GPUs: the same GPUs by index (the other machine's UUIDs are not ours), and the user's
    # variables
    g = RunConfig(
        mode="ddp",
        gpus=(0, 1),
        nproc=2,
        nnodes=2,
        rdzv_endpoint="h:1",
        extra_env={"NCCL_DEBUG": "INFO"},
    )
    other = other_node_commands(g, RUN)[0]
    assert other[:4] == [
        "env",
        "CUDA_VISIBLE_DEVICES=0,1",
        "CUDA_DEVICE_ORDER=PCI_BUS_ID",
        "NCCL_DEBUG=INFO",
    ]
    assert other[4:7] == [sys.executable, "-m", "torch.distributed.run"]
    assert other[other.index("--node-rank") + 1] == "1"


@pytest.mark.parametrize(
    "cfg,gpus,field,text",
    [
        (
            RunConfig(mode="dp", gpus=(0, 1, 2, 3), batch_size=66),
            4,
            "batch_size",
            "batch 66 does not split over 4 GPUs: use 64 or 68",
        ),
        (
            RunConfig(mode="ddp", nproc=2, batch_size=33),
            0,
            "batch_size",
            "batch 33 does not split over 2 processes: use 32 or 34",
        ),
        (RunConfig(mode="ddp", nproc=4, batch_size=2), 0, "batch_size", "use 4"),
        (RunConfig(mode="ddp", nproc=0), 0, "nproc", "use nproc 1 or more"),
        (RunConfig(mode="ddp", gpus=(0, 1), nproc=1), 2, "nproc", "so use nproc 2"),
        (RunConfig(mode="dp", nproc=2), 0, "nproc", "dp on the CPU runs in one process"),
        (
            RunConfig(mode="single", gpus=(0,)),
            0,
            "gpus",
            "GPU 0 does not exist: this machine has no GPUs",
        ),
        (RunConfig(mode="single", gpus=(0, 1)), 2, "gpus", "pick one GPU or use dp/ddp"),
        (RunConfig(mode="dp", gpus=(1, 1)), 2, "gpus", "repeats a GPU"),
        (RunConfig(name="my run/../x"), 0, "name", "use letters, digits"),
        (RunConfig(model="vgg"), 0, "model", "did you mean vgg19 or vgg16 or vgg13?"),
        (RunConfig(model="ResNet18"), 0, "model", "did you mean resnet18?"),
        (
            RunConfig(model="nosuchnet"),
            0,
            "model",
            "use tinycnn or a name of torchvision.models.list_models(",
        ),
        (
            RunConfig(model="vit_b_16"),
            0,
            "image_size",
            "vit_b_16 takes 224x224 images only, image size 32 given: use image size 224",
        ),
        (
            RunConfig(model="inception_v3", image_size=64),
            0,
            "image_size",
            "needs images of at least 75x75",
        ),
        (RunConfig(dataset="mnist"), 0, "dataset", "use digits, synthetic or imagefolder:PATH"),
        (RunConfig(dataset="imagefolder:/no/such/folder"), 0, "dataset", "does not exist"),
        (
            RunConfig(dataset="imagefolder: "),
            0,
            "dataset",
            "no image folder given",
        ),  # not "." quietly
        (RunConfig(extra_env={"BAD-KEY": "1"}), 0, "extra_env", "is not a variable name"),
        (
            RunConfig(extra_env={"CUDA_VISIBLE_DEVICES": "1"}),
            0,
            "extra_env",
            "choose GPUs with gpus",
        ),
        (
            RunConfig(extra_env={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}),
            0,
            "extra_env",
            "set by the launcher (GPUs by UUID)",
        ),
        (
            RunConfig(mode="dp", gpus=(1, 2)),
            (0, 1, 3),
            "gpus",
            "GPU 2 cannot be used: the GPUs NVML can read here are 0, 1, 3",
        ),
        (RunConfig(mode="single", gpus=(2,)), (0, 1, 3), "gpus", "pick among them"),
        (
            RunConfig(mode="ddp", nproc=1, nnodes=2),
            0,
            "rdzv_endpoint",
            "needs a rendezvous endpoint",
        ),
        (
            RunConfig(mode="ddp", nproc=1, nnodes=2, rdzv_endpoint="nohost"),
            0,
            "rdzv_endpoint",
            "is not host:port",
        ),
        (
            RunConfig(mode="ddp", nproc=1, nnodes=2, node_rank=2, rdzv_endpoint="h:1"),
            0,
            "node_rank",
            "outside 0..1",
        ),
        (
            RunConfig(mode="single", nnodes=2, rdzv_endpoint="h:1"),
            0,
            "mode",
            "several nodes need mode ddp",
        ),
        (RunConfig(mode="zero3"), 0, "mode", "use single, dp, ddp, fsdp"),
        (RunConfig(mode="fsdp", nnodes=1, nproc=1, precision="fp16"), 0, "precision", "bf16"),
        (RunConfig(mode="fsdp", nproc=2, fsdp_cpu_offload=True), 0, "fsdp_cpu_offload", "GPUs"),
        (
            RunConfig(mode="ddp", nproc=2, reshard_after_forward="off"),
            0,
            "reshard_after_forward",
            "an option of FSDP (sharded), and mode ddp has none: use mode fsdp",
        ),
        (RunConfig(mode="fsdp", nproc=2, sync_bn=True), 0, "sync_bn", "use mode ddp"),
        (RunConfig(compile="yes"), 0, "compile", "use on or off"),
        (
            RunConfig(mode="fsdp", nproc=3, batch_size=64),
            0,
            "batch_size",
            "does not split over 3 processes",
        ),
        (RunConfig(lr=0), 0, "lr", "must be above 0"),
        (RunConfig(image_size=2), 0, "image_size", "outside 4..1024"),
        (RunConfig(checkpoint="best"), 0, "checkpoint", "use last or none"),
        (
            RunConfig(profile_steps="20-25"),
            0,
            "profile_steps",
            "not A:B in whole steps: e.g. 20:25",
        ),
        (
            RunConfig(profile_steps="0:5"),
            0,
            "profile_steps",
            "steps count from 1: start at 1 or later, e.g. 1:5",
        ),
        (
            RunConfig(profile_steps="5:5"),
            0,
            "profile_steps",
            "B must be greater than A (the window is steps A to B-1), e.g. 5:10",
        ),
        (
            RunConfig(max_steps=8, profile_steps="5:11"),
            0,
            "profile_steps",
            "stops after max_steps 8: end the window by 9",
        ),
    ],
)
def test_bad_configs_name_the_fix(cfg, gpus, field, text):
    errs = problems(cfg, gpus)
    assert errs and errs[0].field == field, errs
    assert text in errs[0].message
    with pytest.raises(ConfigError) as e:
        validate(cfg, gpus)
    assert e.value.field == field


def test_profile_steps_reach_the_trainer_only_when_asked():
    assert "--profile-steps" not in build_command(RunConfig(), RUN, 0, base_env={})[0]
    argv, _ = build_command(
        RunConfig(mode="ddp", nproc=2, profile_steps="20:25"), RUN, 1, base_env={}
    )
    assert argv[-2:] == ["--profile-steps", "20:25"]
    assert problems(RunConfig(max_steps=9, profile_steps="5:10"), 0) == []  # steps 5-9 of 9: fits


def test_problems_lists_all_and_good_configs_pass(tmp_path):
    errs = problems(RunConfig(model="x", dataset="y", name="a b", epochs=0), 0)
    assert {e.field for e in errs} == {"model", "dataset", "name", "epochs"}
    # DP on the CPU falls back: no split
    assert problems(RunConfig(mode="dp", batch_size=66), 0) == []
    assert problems(RunConfig(mode="ddp", nproc=2, dataset=f"imagefolder:{tmp_path}"), 0) == []
    assert problems(RunConfig(mode="ddp", gpus=(0, 1, 2, 3), nproc=4, batch_size=64), 4) == []
    # readable, not contiguous
    assert problems(RunConfig(mode="ddp", gpus=(0, 3), nproc=2), (0, 1, 3)) == []


def test_every_torchvision_classification_model_is_a_model():
    import torchvision.models as tvm

    from lab.engine.launch import models

    own = ("tinycnn", "tinyresnet", "tinyvit", "tinymobilenet", "tinyconvnext")
    assert models.names() == (*own, *tvm.list_models(module=tvm))
    for name in ("resnet50", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny"):
        assert problems(RunConfig(model=name), 0) == [], name
    assert problems(RunConfig(model="vit_b_16", image_size=224, batch_size=2), 0) == []
    assert problems(RunConfig(model="swin_t", image_size=224), 0) == []
    # a bad size is reported once, as the size's own problem, not again as the model's
    assert [e.field for e in problems(RunConfig(model="vit_b_16", image_size=2), 0)] == [
        "image_size"
    ]


def test_compare_modes_configs_share_everything_but_the_mode():
    base = RunConfig(model="resnet18", dataset="synthetic", seed=7, batch_size=64, name="cmp")
    cpu = compare_modes_configs(base, 0)
    assert [(c.mode, c.gpus, c.nproc) for c in cpu] == [
        ("single", (), 1),
        ("dp", (), 1),
        ("ddp", (), 2),
    ]
    gpu = compare_modes_configs(base, 4)
    assert [(c.mode, c.gpus, c.nproc) for c in gpu] == [
        ("single", (0,), 1),
        ("dp", (0, 1, 2, 3), 1),
        ("ddp", (0, 1, 2, 3), 4),
    ]
    for c in cpu + gpu:
        assert (c.model, c.dataset, c.seed, c.batch_size) == ("resnet18", "synthetic", 7, 64)
        assert problems(c, 4 if c.gpus else 0) == []
    assert [c.name for c in cpu] == ["cmp-single", "cmp-dp", "cmp-ddp"]
    assert compare_modes_configs(base, 4, "strong") == gpu  # strong is the default


def test_weak_scaling_keeps_the_batch_per_device():
    base = RunConfig(batch_size=32, name="w")
    cpu = compare_modes_configs(base, 0, "weak")  # DP on the CPU is one device: its batch stays
    assert [(c.mode, c.batch_size, c.batch_size // c.world_size) for c in cpu] == [
        ("single", 32, 32),
        ("dp", 32, 32),
        ("ddp", 64, 32),
    ]
    gpu = compare_modes_configs(base, 4, "weak")
    assert [(c.mode, c.batch_size) for c in gpu] == [("single", 32), ("dp", 128), ("ddp", 128)]
    two_nodes = scaled(
        RunConfig(mode="ddp", nproc=2, nnodes=2, rdzv_endpoint="h:1", batch_size=8), "weak"
    )
    assert two_nodes.batch_size == 32  # every rank of every node
    with pytest.raises(ConfigError) as e:
        compare_modes_configs(base, 0, "medium")
    assert (
        e.value.field == "scaling" and "use strong (same global batch) or weak" in e.value.message
    )
    # GPUs 0 and 2 would not open: the readable ones are used
    holes = compare_modes_configs(base, (1, 3))
    assert [(c.mode, c.gpus, c.nproc) for c in holes] == [
        ("single", (1,), 1),
        ("dp", (1, 3), 1),
        ("ddp", (1, 3), 2),
    ]


def _snap(gpus=()):
    return SimpleNamespace(
        gpus=tuple(SimpleNamespace(index=i, name="H100", processes=()) for i in gpus),
        cpu=SimpleNamespace(cores=2),
    )


def test_preflight_names_the_traps():
    text = "\n".join(preflight(RunConfig(mode="dp"), _snap()))
    assert "falls back to one device" in text and "the CPU (2 cores)" in text
    text = "\n".join(preflight(RunConfig(mode="dp", gpus=(2, 3)), _snap(range(4))))
    assert "(32 each)" in text and "GPU 2 (the first) holds more memory" in text
    assert (
        "CUDA_VISIBLE_DEVICES names GPU 2, 3 by UUID and renumbers them: the trainer sees cuda:0, "
        "cuda:1" in text
    )
    text = "\n".join(preflight(RunConfig(mode="ddp", nproc=2), _snap()))
    assert "uses gloo" in text and "32 samples per process" in text and "free port" in text
    text = "\n".join(preflight(RunConfig(mode="ddp", gpus=(0, 1), nproc=2), _snap(range(2))))
    assert "backend nccl" in text and "renumbers" not in text
    text = "\n".join(
        preflight(RunConfig(mode="ddp", nproc=1, nnodes=2, rdzv_endpoint="h:29400"), _snap())
    )
    assert "c10d at h:29400" in text


def test_config_round_trips_through_json():
    import json

    c = RunConfig(mode="ddp", gpus=(0, 1), nproc=2, tags=("a",), extra_env={"X": "1"})
    assert RunConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
