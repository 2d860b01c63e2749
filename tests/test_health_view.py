"""What the pages show of a run's health (lab/views/live/health.py) and a resumed chain
(lab/views/compare/chain.py).

The view functions on records shaped like the registry's, then the pages
themselves (AppTest) on a run folder written as a supervisor writes one: a
stalled run's banner, device strip and stacks on Live with its "Dump stacks
now" button, the Home badge, and the Resume button of a stopped run with a
checkpoint, which starts nothing for a run without one. No process is
started here; the real runs are tests/test_health_runs.py.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
from streamlit.testing.v1 import AppTest

from lab.events.columns import Series
from lab.runfolder import now_iso, write_json_atomic
from lab.views.compare import chain
from lab.views.live import health

REPO = Path(__file__).resolve().parent.parent
STALLED = {
    "key": "stalled",
    "message": "No new step for 70 s",
    "fix": "Read the saved stacks",
    "since": now_iso(),
    "evidence": {
        "idle_s": 70.0,
        "threshold_s": 60.0,
        "last_step": 12,
        "step": 12,
        "stacks": ["stacks/rank0-20260101-000000.txt", "stacks/rank1-20260101-000000.txt"],
        "stack_notes": ["torchrun (pid 9): py-spy is not installed"],
        "devices": [
            {"gpu": 0, "util_pct": 0.0, "mem_used_mib": 38912.0},
            {"gpu": 1, "util_pct": 0.0, "mem_used_mib": 1024.0},
        ],
    },
}


def rec(**kw) -> SimpleNamespace:
    base = dict(run_id="r1", health=[], restarts=[], resumed_from=None, resumed_by=[])
    base.update(kw)
    return SimpleNamespace(**base)


def test_banner_says_what_when_and_the_evidence_in_words():
    (box,) = health.banner(rec(health=[STALLED]))
    assert (
        box["title"] == "Stalled"
        and box["fix"] == "Read the saved stacks"
        and box["since"].endswith("UTC")
    )
    lines = box["lines"]
    assert (
        lines[0]
        == "Devices at that moment: GPU 0: util 0%, memory 38.0 GiB; GPU 1: util 0%, memory 1.0 GiB"
    )
    assert "stacks/rank1-20260101-000000.txt" in lines[1]
    assert lines[2] == "Not taken: torchrun (pid 9): py-spy is not installed"
    assert "idle_s 70.0" in lines[3] and "devices" not in lines[3]
    assert health.badge(rec(health=[STALLED, {"key": "nan_loss"}])) == "Stalled, Loss is NaN"
    assert health.badge(rec()) == "" and health.banner(rec()) == []


def test_stack_files_are_the_newest_dump_in_rank_order(tmp_path):
    assert health.stack_files(tmp_path) == (None, [])
    d = tmp_path / "stacks"
    d.mkdir()
    for name in (
        "rank0-20260101-000000.txt",
        "rank10-20260101-000100.txt",
        "rank2-20260101-000100.txt",
        "rank2-20260101-000100-2.txt",
        "torchrun-20260101-000100.txt",
        "notes.txt",
    ):
        (d / name).write_text("x")
    at, files = health.stack_files(tmp_path)
    assert at == "20260101-000100"
    assert [(who, p.name) for who, p in files] == [
        ("rank2", "rank2-20260101-000100.txt"),
        ("rank2", "rank2-20260101-000100-2.txt"),
        ("rank10", "rank10-20260101-000100.txt"),
        ("torchrun", "torchrun-20260101-000100.txt"),
    ]


def test_restart_and_link_lines():
    r = rec(
        restarts=[
            {
                "attempt": 1,
                "rank": 1,
                "exit_code": -9,
                "cause": "local rank 1 was killed by SIGKILL",
            }
        ],
        resumed_from="r0",
        resumed_by=["r2", "r3"],
    )
    assert health.restart_lines(r) == ["Restart 1: local rank 1 was killed by SIGKILL"]
    assert health.link_lines(r) == ["Resumed from r0 (its last checkpoint).", "Resumed by r2, r3."]


def _s(steps, values) -> Series:
    steps = np.asarray(steps)
    return Series(steps, steps.astype(float) * 10, np.asarray(values, dtype=float))


def test_a_chain_is_found_back_and_joined_at_the_successors_first_step():
    a, b, c = rec(run_id="a"), rec(run_id="b", resumed_from="a"), rec(run_id="c", resumed_from="b")
    by_id = {r.run_id: r for r in (a, b, c)}
    assert [r.run_id for r in chain.ancestors(c, by_id)] == ["a", "b"]
    assert chain.ancestors(a, by_id) == []
    loop = {"x": rec(run_id="x", resumed_from="y"), "y": rec(run_id="y", resumed_from="x")}
    # a loop is cut, not followed forever
    assert [r.run_id for r in chain.ancestors(loop["x"], loop)] == ["y"]
    old = {"train/loss": _s([10, 20, 30, 40], [4, 3, 2, 1]), "sys/cpu_pct": _s([0, 1], [50, 60])}
    new = {"train/loss": _s([25, 35], [2.5, 1.5]), "sys/cpu_pct": _s([0, 1, 2], [70, 80, 90])}
    j = chain.joined([old, new])
    # the old run's points after the resume left out
    assert j["train/loss"].step.tolist() == [10, 20, 25, 35]
    assert j["train/loss"].value.tolist() == [4, 3, 2.5, 1.5]
    assert j["sys/cpu_pct"].value.tolist() == [70, 80, 90]  # samples are per run: the newest run's


# ---- the pages --------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_gpu_box(cpu_only):
    import streamlit as st

    st.cache_data.clear()
    yield
    st.cache_data.clear()


def _run_folder(root: Path, run_id: str, state: str, **status) -> Path:
    d = root / run_id
    d.mkdir()
    write_json_atomic(
        d / "run.json",
        {
            "run_id": run_id,
            "name": "",
            "config": {"mode": "ddp", "gpus": [], "nproc": 2},
            "argv": [],
            "env": {},
            "created_at": now_iso(),
            "kind": "trainer",
        },
    )
    me = psutil.Process()
    write_json_atomic(
        d / "status.json",
        dict(
            state=state,
            supervisor_pid=me.pid,
            supervisor_ct=me.create_time(),
            started_at=now_iso(),
            **status,
        ),
    )
    return d


def test_live_shows_the_stalled_banner_stacks_and_dump_button_and_home_the_badge(runs_dir):
    d = _run_folder(
        runs_dir,
        "20260101-000000-ddp-stalled",
        "running",
        health=[STALLED],
        restarts=[
            {
                "attempt": 1,
                "rank": 1,
                "exit_code": -9,
                "cause": "local rank 1 was killed by SIGKILL",
            }
        ],
    )
    (d / "stacks").mkdir()
    (d / "stacks" / "rank1-20260101-000000.txt").write_text(
        '# rank 1\n  File "x.py", line 3 in block_forever\n'
    )
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=30)
    at.run()
    assert not at.exception, at.exception
    assert any("⚠️ Stalled" in p.proto.text for p in at.get("progress")), "the Home list's badge"
    at.switch_page("pages/2_Live.py")
    at.run()
    assert not at.exception, at.exception
    # Markdown escapes out
    banner = [e.value.replace("\\", "") for e in at.error if "**Stalled**" in e.value]
    assert (
        banner
        and "GPU 0: util 0%, memory 38.0 GiB" in banner[0]
        and "Read the saved stacks" in banner[0]
    )
    assert any("block_forever" in c.value for c in at.code)
    assert any(b.label == "Dump stacks now" for b in at.button)
    assert "Restart 1: local rank 1 was killed by SIGKILL" in [c.value for c in at.caption]
    at.button(key="live_stacks").click()
    at.run()
    assert (d / "stacks.request").is_file()  # the supervisor's to answer


def test_resume_button_only_where_there_is_a_checkpoint(runs_dir):
    done = _run_folder(runs_dir, "20260101-000000-ddp-nockpt", "stopped")
    at = AppTest.from_file(str(REPO / "pages" / "2_Live.py"), default_timeout=30)
    at.query_params["run"] = done.name
    at.run()
    assert not at.exception, at.exception
    assert not any(b.label == "Resume" for b in at.button)  # no checkpoint: nothing to resume from
    (done / "checkpoints").mkdir()
    (done / "checkpoints" / "last.pt").write_bytes(b"not read here")
    at.run()
    assert any(b.label == "Resume" for b in at.button)


def test_compare_joins_a_resumed_run_to_the_run_it_continues(runs_dir):
    """A recorded sample run and a run resumed from it (its own loss at later steps): the toggle
    draws one curve."""
    import base64
    import json
    import shutil
    import time

    from lab.engine.scalars import ScalarWriter
    from lab.events import LogdirReader
    from lab.runfolder import SAMPLE_RUNS

    src = next(p for p in sorted(SAMPLE_RUNS.iterdir()) if "-single-" in p.name)
    old, new = "20260101-000000-single-old-0001", "20260101-000100-single-new-0002"
    for run_id, parent in ((old, None), (new, old)):
        shutil.copytree(src, runs_dir / run_id)
        run = json.loads((runs_dir / run_id / "run.json").read_text())
        write_json_atomic(
            runs_dir / run_id / "run.json", dict(run, run_id=run_id, resumed_from=parent)
        )
    reader = LogdirReader(runs_dir / old / "tb")
    reader.refresh()
    old_steps = [int(x) for n in reader.run_names() for x in reader.scalars(n)["train/loss"].step]
    shutil.rmtree(runs_dir / new / "tb")
    # the resumed run logged two windows after the old run's last step
    w = ScalarWriter(runs_dir / new / "tb")
    for k, step in enumerate((max(old_steps) + 10, max(old_steps) + 20)):
        w.add({"train/loss": 0.5 - k / 10}, step, time.time())
    w.close()

    def points(x) -> int:  # plotly may send an array as base64 with its dtype
        return (
            len(base64.b64decode(x["bdata"])) // np.dtype(x["dtype"]).itemsize
            if isinstance(x, dict)
            else len(x)
        )

    def loss_x(at) -> list[int]:
        specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
        return [
            points(t["x"])
            for s in specs
            for t in s["data"]
            if "train/loss" in json.dumps(s.get("layout", {}))
        ]

    at = AppTest.from_file(str(REPO / "pages" / "3_Compare.py"), default_timeout=30).run()
    at.multiselect(key="cmp_runs").set_value(
        [k for k in at.multiselect(key="cmp_runs").options if new in k]
    ).run()
    assert not at.exception, at.exception
    assert loss_x(at) == [2]
    at.toggle(key="cmp_join").set_value(True).run()
    assert not at.exception, at.exception
    assert loss_x(at) == [len(old_steps) + 2]  # one curve: the old run's points, then the new
