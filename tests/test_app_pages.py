"""AppTest of the home, Launch, Live and Logs pages on a "fresh clone": the
runs folder (LAB_RUNS_DIR) is an empty tmp folder, so the pages fall back to
the shipped sample runs, and the machine has no GPU: every test is pinned to
one (``cpu_only``), even on a GPU box or in the fake-GPU mode, except those
that fake GPUs themselves. Pages are reached the way a user reaches them:
from app.py, then switch_page."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_data" / "runs"


@pytest.fixture(autouse=True)
def _no_gpu_box(cpu_only):
    """Every test starts on a machine without GPUs; the Launch page's cached snapshot is dropped
    around it."""
    import streamlit as st

    st.cache_data.clear()
    yield
    st.cache_data.clear()


def _require_samples() -> None:
    """The shipped sample runs: a fresh clone's Live and Logs pages show them, so their loss is a
    failure."""
    assert any(SAMPLES.glob("*/summary.json")), (
        f"{SAMPLES} lost its recorded runs: scripts/record_sample_runs.py"
    )


def _texts(at: AppTest, kind: str) -> list[str]:
    return [e.value for e in getattr(at, kind)]


def _app(page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=30)
    at.run()
    assert not at.exception, at.exception
    if page:
        at.switch_page(page)
        at.run()
    return at


def test_home_loads_with_cpu_strip_and_empty_runs(runs_dir):
    at = _app()
    assert at.title[0].value == "Parallel Training Lab"
    assert any("No runs yet" in t for t in _texts(at, "info"))
    assert any(str(runs_dir) in c for c in _texts(at, "caption"))  # where runs live
    assert any(b.label == "Compare modes" for b in at.button)
    assert len(at.get("progress")) >= 2  # the device strip: utilisation and memory bars
    assert not list(runs_dir.iterdir())


@pytest.mark.parametrize(
    "page", ["pages/1_Launch.py", "pages/2_Live.py", "pages/3_Compare.py", "pages/4_Logs.py"]
)
def test_every_page_loads_on_a_fresh_clone(runs_dir, page):
    assert (REPO / page).is_file(), f"{page} is missing"  # a deleted page is a defect, not a skip
    at = _app(page)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert not list(runs_dir.iterdir())  # loading a page starts nothing


def test_launch_shows_command_and_cpu_note(runs_dir):
    at = _app("pages/1_Launch.py")
    assert any("runs use the CPU" in t for t in _texts(at, "info"))
    code = "\n".join(c.value for c in at.code)
    assert "training.train" in code and "--epochs 10" in code and "CUDA_VISIBLE_DEVICES=''" in code
    at.radio(key="launch_mode").set_value("ddp").run()
    code = at.code[0].value
    # chosen free at launch, not 29500
    assert "--nproc-per-node 2" in code and "--master-port '<port>'" in code


def test_launch_draws_every_field_of_the_table(runs_dir):
    """The page is a loop over lab.engine.launch.form.FIELDS: each field has its widget, label
    and key."""
    from lab.engine.launch.form import FIELDS

    at = _app("pages/1_Launch.py")
    drawn = {
        w.key: w
        for kind in ("radio", "selectbox", "number_input", "checkbox", "text_input", "text_area")
        for w in getattr(at, kind)
    }
    # no GPU here: no GPU boxes
    missing = [f.name for f in FIELDS if f.kind != "gpus" and f.key not in drawn]
    assert missing == []
    assert all(drawn[f.key].label == f.label for f in FIELDS if f.key in drawn)
    assert drawn["launch_nproc"].disabled and drawn["launch_folder"].disabled  # single mode, digits
    at.selectbox(key="launch_dataset_kind").set_value("imagefolder").run()
    assert not at.text_input(key="launch_folder").disabled
    assert any("no image folder given" in e for e in _texts(at, "error"))


def test_launch_refuses_batch_zero_and_starts_nothing(runs_dir):
    at = _app("pages/1_Launch.py")
    at.number_input(key="launch_batch").set_value(0)
    at.run()
    at.button(key="launch_go").click()
    at.run()
    assert not at.exception
    errors = _texts(at, "error")
    assert any("batch size 0 is not a positive whole number" in e for e in errors), errors
    assert any("Not launched" in e for e in errors)
    assert not at.success
    assert not list(runs_dir.iterdir())


def test_launch_profile_steps_reach_the_command_or_name_the_fix(runs_dir):
    at = _app("pages/1_Launch.py")
    assert at.text_input(key="launch_profile").value == ""  # off by default
    assert "--profile-steps" not in at.code[0].value
    at.text_input(key="launch_profile").set_value("20:25").run()
    assert "--profile-steps 20:25" in at.code[0].value
    at.text_input(key="launch_profile").set_value("25:20").run()
    assert any("B must be greater than A" in e for e in _texts(at, "error"))
    assert not list(runs_dir.iterdir())


def test_launch_refuses_batch_that_does_not_split(runs_dir):
    at = _app("pages/1_Launch.py")
    at.radio(key="launch_mode").set_value("ddp")
    at.run()
    at.number_input(key="launch_nproc").set_value(3)
    at.run()
    at.button(key="launch_go").click()
    at.run()
    errors = _texts(at, "error")
    assert any("batch 64 does not split over 3 processes: use 63 or 66" in e for e in errors), (
        errors
    )
    assert not list(runs_dir.iterdir())


def test_logs_typed_path_that_does_not_exist(runs_dir, tmp_path):
    at = _app("pages/4_Logs.py")
    at.radio(key="logs_source").set_value("a folder I type")
    at.run()
    at.text_input(key="logs_path").set_value(str(tmp_path / "no" / "such" / "dir"))
    at.run()
    assert not at.exception
    errors = _texts(at, "error")
    assert len(errors) == 1 and "does not exist" in errors[0]


def test_logs_bad_regex_is_a_message(runs_dir):
    _require_samples()
    at = _app("pages/4_Logs.py")
    at.text_input(key="logs_tag_re").set_value("loss(")
    at.run()
    assert not at.exception
    assert any("not a valid regular expression" in e for e in _texts(at, "error"))


def test_logs_on_sample_runs_draws_charts(runs_dir):
    _require_samples()
    at = _app("pages/4_Logs.py")
    assert not at.error
    assert len(at.get("plotly_chart")) >= 1
    at.text_input(key="logs_tag_re").set_value("^train/loss$")
    at.run()
    assert len(at.get("plotly_chart")) == 1


def test_live_falls_back_to_sample_runs(runs_dir):
    _require_samples()
    at = _app("pages/2_Live.py")
    assert any("sample runs" in t for t in _texts(at, "info"))
    assert at.selectbox(key="live_run").value
    # loss, accuracy, throughput, gradient norm; CPU and RSS of its processes
    assert len(at.get("plotly_chart")) == 6
    assert not [b for b in at.button if b.label == "Stop"]  # sample runs are finished
    dp = [o for o in at.selectbox(key="live_run").options if "-dp-" in o]
    assert dp, at.selectbox(key="live_run").options  # the shipped DP samples (one per repeat)
    # it ran on the CPU, so it fell back to one device: the page says so
    at.selectbox(key="live_run").set_value(dp[0]).run()
    assert not at.exception
    assert any("ran as single" in w.value for w in at.warning)
    assert any("No GPU samples" in c.value for c in at.caption)  # its device charts show the CPU


def _launch_and_wait(
    runs_dir, config, until=("succeeded", "failed", "stopped", "lost"), timeout_s=90
):
    from lab.engine.launch import launcher
    from lab.engine.registry import get_run

    run_id = launcher.launch(config, runs_dir)
    deadline = time.monotonic() + timeout_s
    while get_run(run_id, runs_dir).state not in until:
        assert time.monotonic() < deadline, f"{run_id} never reached {until}"
        time.sleep(0.3)
    return run_id


@pytest.mark.proc
def test_live_shows_the_diagnosis_of_a_failed_run(runs_dir, tmp_path):
    from lab.engine.spec.run import RunConfig

    empty = tmp_path / "no-images"
    empty.mkdir()
    # A real run that fails: an image folder without images (the trainer exits 2).
    run_id = _launch_and_wait(
        runs_dir, RunConfig(dataset=f"imagefolder:{empty}", checkpoint="none")
    )
    at = _app("pages/2_Live.py")
    assert not at.exception
    assert at.selectbox(key="live_run").value == run_id
    assert at.markdown and any("### failed" == m.value for m in at.markdown)
    errors = _texts(at, "error")
    assert any("Why it failed" in e and "no-images" in e for e in errors), errors
    assert any("no images" in c.value for c in at.code)  # the log tail holds the trainer's message


@pytest.mark.proc
def test_live_stop_button_stops_a_running_run(runs_dir):
    from lab.engine.registry import get_run
    from lab.engine.spec.run import RunConfig

    run_id = _launch_and_wait(
        runs_dir, RunConfig(epochs=500, checkpoint="none"), until=("running",)
    )
    at = _app("pages/2_Live.py")
    assert at.selectbox(key="live_run").value == run_id  # the newest running run is the default
    at.button(key="live_stop").click()
    at.run(timeout=30)
    assert not at.exception
    assert get_run(run_id, runs_dir).state == "stopped"
    assert any("### stopped" == m.value for m in at.markdown)


@pytest.mark.proc
@pytest.mark.parametrize("scaling", ["strong", "weak"])
def test_home_compare_modes_launches_one_sweep_and_stops_it(runs_dir, scaling):
    import json

    from lab.engine.registry import list_runs
    from tests.e2e_helpers import processes_mentioning

    at = _app()
    assert at.radio(key="home_scaling").value == "strong"  # today's behaviour unless asked
    at.radio(key="home_scaling").set_value(scaling)
    # 3 repeats by default, the fewest that give a verdict (verdict.one_run_each); one here
    assert at.number_input(key="home_repeats").value == 3
    at.number_input(key="home_repeats").set_value(1)
    at.button(key="home_compare").click()
    at.run(timeout=60)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("Sweep" in s.value for s in at.success)
    runs = list_runs(runs_dir)
    assert sorted(r.mode for r in runs) == ["ddp", "dp", "single"]
    assert len({r.sweep_id for r in runs}) == 1
    metas = {r.mode: json.loads((runs_dir / r.run_id / "run.json").read_text()) for r in runs}
    configs = [m["config"] for m in metas.values()]
    for key in ("model", "dataset", "seed", "epochs"):
        assert len({c[key] for c in configs}) == 1, key  # same model, data, seed
    assert {m["scaling"] for m in metas.values()} == {scaling}
    batches = {mode: m["config"]["batch_size"] for mode, m in metas.items()}
    # strong: one global batch; weak: one batch per device (no GPU here: DP is one device, DDP two
    # processes)
    assert batches == (
        {"single": 64, "dp": 64, "ddp": 64}
        if scaling == "strong"
        else {"single": 64, "dp": 64, "ddp": 128}
    )
    at.button(key="home_stop_sweep").click()
    at.run(timeout=60)
    assert not at.exception
    assert {r.state for r in list_runs(runs_dir)} == {"stopped"}
    deadline = time.monotonic() + 15
    while processes_mentioning(str(runs_dir)) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not processes_mentioning(str(runs_dir))


def test_pages_with_two_gpus_faked(runs_dir, monkeypatch):
    # FAKE: NVIDIA GPUs are faked (tests/fake_nvml.py in place of pynvml); nothing else is.
    import streamlit as st

    from lab.engine.devices import nvml as devices
    from tests.fake_nvml import FakeGpu, FakeNvml

    monkeypatch.setattr(
        devices,
        "pynvml",
        FakeNvml([FakeGpu(uuid="GPU-0", util=87), FakeGpu(uuid="GPU-1", util=12)]),
    )
    st.cache_data.clear()  # the Launch page caches the device snapshot for a few seconds
    try:
        at = _app()
        labels = [m.value for m in at.markdown]
        assert (
            "**GPU 0 · NVIDIA H100 80GB HBM3**" in labels
            and "**GPU 1 · NVIDIA H100 80GB HBM3**" in labels
        )
        # the links between them, like nvidia-smi topo -m (the fake's default: across the sockets)
        frames = [d.value for d in at.dataframe]
        topo = next(f for f in frames if list(f.columns) == ["GPU", "GPU 0", "GPU 1"])
        assert topo.to_dict("records") == [
            {"GPU": "GPU 0", "GPU 0": "X", "GPU 1": "SYS"},
            {"GPU": "GPU 1", "GPU 0": "SYS", "GPU 1": "X"},
        ]
        at.switch_page("pages/1_Launch.py")
        at.run()
        assert not at.exception
        assert at.checkbox(key="launch_gpu_0").value and not at.checkbox(key="launch_gpu_1").value
        at.radio(key="launch_mode").set_value("dp")
        at.checkbox(key="launch_gpu_1").check()
        at.number_input(key="launch_batch").set_value(63)
        at.run()
        errors = _texts(at, "error")
        assert any("batch 63 does not split over 2 GPUs: use 62 or 64" in e for e in errors), errors
        at.number_input(key="launch_batch").set_value(64)
        at.run()
        assert not at.error
        assert "CUDA_VISIBLE_DEVICES=GPU-0,GPU-1" in at.code[0].value  # by UUID, not NVML's index
        at.radio(key="launch_mode").set_value("ddp")
        at.run()
        assert not at.error
        assert "--nproc-per-node 2" in at.code[0].value  # one process per chosen GPU
    finally:
        st.cache_data.clear()


def test_launch_two_nodes_shows_the_other_nodes_command(runs_dir):
    at = _app("pages/1_Launch.py")
    at.radio(key="launch_mode").set_value("ddp")
    at.number_input(key="launch_nnodes").set_value(2)
    at.run()
    assert any("needs a rendezvous endpoint" in e for e in _texts(at, "error"))
    at.text_input(key="launch_endpoint").set_value("127.0.0.1:29400")
    at.run()
    assert not at.error and not at.exception
    codes = [c.value for c in at.code]
    assert len(codes) == 2  # this node, then node 1
    assert "--node-rank 0" in codes[0] and "--node-rank 1" in codes[1]
    assert all("--rdzv-endpoint 127.0.0.1:29400" in c for c in codes)
    assert not list(runs_dir.iterdir())


@pytest.mark.proc
@pytest.mark.timeout(300)  # a sweep of three runs started, then stopped
def test_launch_compares_the_modes_of_the_forms_own_config(runs_dir):
    import json

    from lab.engine.launch import launcher
    from lab.engine.registry import list_runs

    at = _app("pages/1_Launch.py")
    at.selectbox(key="launch_model").set_value("resnet18")  # not the default: the form's config
    for key, value in (("launch_max_steps", 3), ("launch_log_every", 1), ("launch_batch", 32)):
        at.number_input(key=key).set_value(value)
    at.selectbox(key="launch_checkpoint").set_value("none")
    at.multiselect(key="launch_cmp_modes").set_value(["single", "ddp"])
    at.multiselect(key="launch_cmp_counts").set_value([1, 2])
    at.run()
    at.button(key="launch_cmp_go").click()
    at.run(timeout=60)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("Sweep" in s.value for s in at.success)
    runs = sorted(list_runs(runs_dir), key=lambda r: r.run_id)
    assert len({r.sweep_id for r in runs}) == 1 and len(runs) == 3
    configs = [json.loads((runs_dir / r.run_id / "run.json").read_text())["config"] for r in runs]
    assert sorted((c["mode"], c["nproc"]) for c in configs) == [
        ("ddp", 1),
        ("ddp", 2),
        ("single", 1),
    ]
    assert {(c["model"], c["max_steps"], c["batch_size"]) for c in configs} == {("resnet18", 3, 32)}
    # the runs themselves, and Compare drawing their scaling view, are the browser's test
    # (tests/test_e2e_sweep.py): here they are stopped, and leave nothing behind
    from tests.helpers.engine_runs import alive_of, wait_for

    for r in runs:
        assert launcher.stop(r.run_id, runs_dir, grace_s=2) in ("stopped", "succeeded"), r.run_id
    for r in runs:
        wait_for(lambda d=runs_dir / r.run_id: alive_of(d) == [], 20, "no process of it left")


@pytest.mark.proc
def test_launch_varies_an_option_across_the_sweep_or_names_the_fix(runs_dir):
    import json

    from lab.engine.launch import launcher
    from lab.engine.registry import list_runs

    at = _app("pages/1_Launch.py")
    at.multiselect(key="launch_cmp_modes").set_value(["single"])
    at.text_area(key="launch_cmp_vary").set_value("precison=fp32,bf16")  # misspelt
    at.run()
    at.button(key="launch_cmp_go").click()
    at.run(timeout=60)
    assert any("is no option a sweep can vary" in e.value for e in at.error), at.error
    assert not list_runs(runs_dir)  # nothing started
    at.text_area(key="launch_cmp_vary").set_value("precision=fp32,bf16\n")
    at.run()
    at.button(key="launch_cmp_go").click()
    at.run(timeout=60)
    assert not at.exception and any("Sweep" in s.value for s in at.success)
    runs = sorted(list_runs(runs_dir), key=lambda r: r.run_id)
    varied = [json.loads((runs_dir / r.run_id / "run.json").read_text())["varied"] for r in runs]
    assert sorted(v["precision"] for v in varied) == ["bf16", "fp32"]
    for r in runs:  # the values are the point here, not the training
        launcher.stop(r.run_id, runs_dir)


@pytest.mark.proc
def test_home_link_check_shows_the_gloo_table(runs_dir):
    at = _app()
    at.number_input(key="home_link_max_mib").set_value(0.01)  # 1 KiB and 4 KiB: seconds
    at.button(key="home_linkcheck").click()
    at.run(timeout=120)
    assert not at.exception, at.exception
    assert not _texts(at, "error")
    assert any("gloo, 2 ranks on the CPU" in c for c in _texts(at, "caption"))
    tables = [d.value for d in at.dataframe if "busbw (GB/s)" in d.value.columns]
    assert len(tables) == 1
    table = tables[0]
    assert list(table.columns) == [
        "bytes",
        "time_ms",
        "slowest rank (ms)",
        "algbw (GB/s)",
        "busbw (GB/s)",
    ]
    assert list(table["bytes"]) == [1024, 4096] and (table["busbw (GB/s)"] > 0).all()
    assert len(list((runs_dir / "linkchecks").glob("*.json"))) == 1
