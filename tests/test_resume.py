"""Starting again, without running anything: resume's refusals and links
(lab/engine/launch/resume.py, the registry's ``resumed_by``), the new options' checks
(lab/engine/launch/trainer_options.py) and how they reach the command
(lab/engine/launch/launcher.py), and ``python -m lab resume|stacks`` refusing in one line
(lab/cli/resume.py).

Run folders are written here as a launcher and supervisor write them; the
real resume and restart are in tests/test_health_runs.py.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from lab import cli
from lab.engine import registry
from lab.engine.launch.backends import build_command
from lab.engine.launch.config import problems
from lab.engine.launch.resume import ResumeError, resumable, resume, resumed_config
from lab.engine.spec.run import RunConfig
from lab.runfolder import now_iso, write_json_atomic


def folder(
    root: Path,
    run_id: str,
    state: str,
    kind: str = "trainer",
    ckpt: bool = True,
    resumed_from: str | None = None,
    live: bool = False,
) -> Path:
    d = root / run_id
    d.mkdir()
    write_json_atomic(
        d / "run.json",
        {
            "run_id": run_id,
            "kind": kind,
            "created_at": now_iso(),
            "config": {"mode": "single", "gpus": [], "epochs": 3, "lr": 0.1},
            "resumed_from": resumed_from,
        },
    )
    st = {"state": state, "resumed_from": resumed_from}
    if live:
        me = psutil.Process()
        st.update(supervisor_pid=me.pid, supervisor_ct=me.create_time())
    write_json_atomic(d / "status.json", st)
    if ckpt:
        (d / "checkpoints").mkdir()
        (d / "checkpoints" / "last.pt").write_bytes(b"x")
    return d


def test_only_a_failed_stopped_or_lost_trainer_run_with_a_checkpoint_resumes(runs_dir):
    ok = folder(runs_dir, "ok", "stopped")
    for run_id, kw, words in [
        ("live", dict(state="running", live=True), "stop it first"),
        ("done", dict(state="succeeded"), "only a failed, stopped or lost run"),
        ("mine", dict(state="failed", kind="script"), "your own script"),
        ("bare", dict(state="failed", ckpt=False), "saved no checkpoint"),
    ]:
        folder(runs_dir, run_id, **kw)
        why = resumable(registry.get_run(run_id, runs_dir))
        assert why and words in why, (run_id, why)
        with pytest.raises(ResumeError, match=words):
            resume(run_id, runs_dir)
    assert resumable(registry.get_run("ok", runs_dir)) is None
    cfg = resumed_config(registry.get_run("ok", runs_dir))
    assert cfg.resume == str(ok / "checkpoints" / "last.pt") and cfg.epochs == 3 and cfg.lr == 0.1
    # none started
    assert list(runs_dir.iterdir()) and not any(p.name.startswith("2") for p in runs_dir.iterdir())


def test_resumed_by_is_computed_on_read_both_ways(runs_dir):
    folder(runs_dir, "a", "failed")
    folder(runs_dir, "b", "stopped", resumed_from="a")
    folder(runs_dir, "c", "succeeded", resumed_from="b")
    by_id = {r.run_id: r for r in registry.list_runs(runs_dir)}
    assert (by_id["a"].resumed_by, by_id["b"].resumed_by, by_id["c"].resumed_by) == (
        ["b"],
        ["c"],
        [],
    )
    assert by_id["c"].resumed_from == "b" and by_id["a"].resumed_from is None
    assert registry.get_run("a", runs_dir).resumed_by == ["b"]  # one run read alone says it too
    assert set(registry.get_run("b", runs_dir).to_json()) >= {
        "health",
        "restarts",
        "resumed_from",
        "resumed_by",
    }


def test_the_new_options_are_checked_and_name_the_fix(tmp_path):
    def fields(**kw) -> dict[str, str]:
        return {e.field: e.message for e in problems(RunConfig(**kw), 0)}

    assert "use mode ddp" in fields(max_restarts=1)["max_restarts"]
    assert fields(mode="ddp", nproc=2, max_restarts=1) == {}
    assert "0 to 100" in fields(mode="ddp", nproc=2, max_restarts=-1)["max_restarts"]
    assert "no checkpoint at" in fields(resume=str(tmp_path / "x.pt"))["resume"]
    sharded = tmp_path / "last.dcp"  # an fsdp run's: taken whole, refused while a save is cut
    sharded.mkdir()
    (sharded / ".metadata").write_bytes(b"x")
    assert "last.dcp folder" in fields(resume=str(sharded))["resume"]
    (sharded / "trainer.json").write_text("{}")
    assert "resume" not in fields(resume=str(sharded))
    assert "automatic" in fields(stall_after=-1)["stall_after"]
    assert "60000" in fields(data_delay_ms=-5)["data_delay_ms"]
    ckpt = tmp_path / "last.pt"
    ckpt.write_bytes(b"x")
    assert fields(resume=str(ckpt), stall_after=30, data_delay_ms=20, stop_on_nan=True) == {}


def test_the_options_reach_the_trainer_and_torchrun(tmp_path):
    argv, _ = build_command(
        RunConfig(mode="ddp", nproc=2, max_restarts=2, stop_on_nan=True, data_delay_ms=20),
        tmp_path,
        29500,
        base_env={},
        uuids={},
    )
    tr = argv.index("training.train")
    # torchrun's
    assert argv[argv.index("--max-restarts") + 1] == "2" and argv.index("--max-restarts") < tr
    assert argv[argv.index("--resume") + 1] == "auto"  # a restart resumes from the last checkpoint
    assert "--stop-on-nan" in argv and argv[argv.index("--data-delay-ms") + 1] == "20.0"
    argv, _ = build_command(RunConfig(resume="/x/last.pt"), tmp_path, 0, base_env={}, uuids={})
    assert argv[argv.index("--resume") + 1] == "/x/last.pt" and "--max-restarts" not in argv
    argv, _ = build_command(RunConfig(), tmp_path, 0, base_env={}, uuids={})
    assert "--resume" not in argv and "--stop-on-nan" not in argv and "--data-delay-ms" not in argv


def test_cli_resume_and_stacks_refuse_in_one_line(runs_dir, capsys):
    folder(runs_dir, "done", "succeeded")
    assert cli.main(["resume", "done"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run done is succeeded") and err.count("\n") == 1
    assert cli.main(["resume", "nope"]) == 2 and "no run 'nope'" in capsys.readouterr().err
    folder(runs_dir, "gone", "stopped")
    assert cli.main(["stacks", "gone"]) == 2  # an ended run has no ranks to ask
    assert "only a running run has stacks" in capsys.readouterr().err
    assert not (runs_dir / "gone" / "stacks.request").exists()
    # "running", but no supervisor of its own answers
    folder(runs_dir, "mute", "running", live=True)
    assert cli.main(["stacks", "mute", "--wait", "0.3"]) == 2
    assert "did not answer" in capsys.readouterr().err
