"""A user's own script run by the lab for real, through ``python -m lab launch --script``.

Real processes on the CPU: the two scripts of examples/ (written as users
write them, knowing nothing of the lab) in a fresh working directory each,
the DDP one as two gloo ranks under torchrun (and again sharding itself with
FSDP2, ``--fsdp``, in the same ddp placement); a torchrun-ready script that
raises in rank 1; and scripts refused by their own argparse. They are
launched at once and waited for together. Each must end in the right state;
the examples' ``events_dirs`` must hold exactly the folder their plain
``SummaryWriter()`` chose, and the loss read back from it through
``lab.events`` must be the loss the script printed, point for point. The
failures must be diagnosed as the rank and the line that caused them. Stop
of a running user DDP script must leave no process of it alive (psutil).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.cli import run_lab
from tests.helpers.script_runs import EXAMPLES, PRINTED, SHORT, check_curves

pytestmark = [pytest.mark.proc, pytest.mark.slow]
ONE_THREAD_CPU = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}  # every lab command here
RAISE_IN_RANK1 = '''"""A torchrun-ready script whose rank 1 fails, written as a user writes one."""
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("rank 1 cannot read its shard of the data")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def launch(runs_dir: Path, *args: str) -> str:
    r = run_lab(runs_dir, "launch", "--json", *args, **ONE_THREAD_CPU)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kind"] == "script"
    return out["run_id"]


def status(runs_dir: Path, run_id: str) -> dict:
    r = run_lab(runs_dir, "status", run_id, "--json", **ONE_THREAD_CPU)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_final(runs_dir: Path, run_ids: list[str], timeout_s: float = 240) -> dict[str, dict]:
    from lab.engine import registry
    from lab.engine.launch import launcher

    for rid in run_ids:
        launcher.wait(rid, runs_dir, timeout_s)
    return {rid: registry.get_run(rid, runs_dir).to_json() for rid in run_ids}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every finished case launched at once: {case: (status JSON, its working directory, run
    folder)}."""
    root = tmp_path_factory.mktemp("scripts")
    runs_dir = root / "runs"
    names = ("ddp", "fsdp", "single", "rank1", "badarg", "ddp-badarg")
    cwd = {name: root / name for name in names}
    for d in cwd.values():
        d.mkdir()
    (cwd["rank1"] / "train.py").write_text(RAISE_IN_RANK1)
    ids = {
        "ddp": launch(
            runs_dir,
            "--script",
            str(EXAMPLES / "ddp_digits.py"),
            "--mode",
            "ddp",
            "--nproc",
            "2",
            "--cwd",
            str(cwd["ddp"]),
            "--",
            *SHORT,
        ),
        # a script that shards itself with FSDP2 runs in ddp placement: torchrun, one per device
        "fsdp": launch(
            runs_dir,
            "--script",
            str(EXAMPLES / "ddp_digits.py"),
            "--mode",
            "ddp",
            "--nproc",
            "2",
            "--cwd",
            str(cwd["fsdp"]),
            "--",
            *SHORT,
            "--fsdp",
        ),
        "single": launch(
            runs_dir,
            "--script",
            str(EXAMPLES / "dp_digits.py"),
            "--mode",
            "single",
            "--cwd",
            str(cwd["single"]),
            "--total-steps",
            "5",
            "--",
            *SHORT,
        ),
        "rank1": launch(
            runs_dir, "--script", str(cwd["rank1"] / "train.py"), "--mode", "ddp", "--nproc", "2"
        ),
        "badarg": launch(
            runs_dir,
            "--script",
            str(EXAMPLES / "dp_digits.py"),
            "--cwd",
            str(cwd["badarg"]),
            "--",
            "--epochs",
            "zero",
        ),
        "ddp-badarg": launch(
            runs_dir,
            "--script",
            str(EXAMPLES / "ddp_digits.py"),
            "--mode",
            "ddp",
            "--nproc",
            "2",
            "--cwd",
            str(cwd["ddp-badarg"]),
            "--",
            "--batch-size",
            "many",
        ),
    }
    final = wait_final(runs_dir, list(ids.values()))
    yield {name: (status(runs_dir, rid), cwd[name], runs_dir / rid) for name, rid in ids.items()}
    assert {r["state"] for r in final.values()} <= {"succeeded", "failed"}


def test_ddp_example_under_torchrun_succeeds_and_its_curves_are_linked(runs):
    st, cwd, run_dir = runs["ddp"]
    assert st["state"] == "succeeded" and st["kind"] == "script" and st["mode"] == "ddp", st[
        "diagnosis"
    ]
    check_curves(st, cwd, run_dir, "[default0]:")
    # per-rank logs (--tee)
    assert {0, 1} <= {int(p.name) for p in (run_dir / "logs").glob("*/attempt_*/*")}
    # device samples, as for the trainer
    assert list((run_dir / "sys").glob("events.out.tfevents.*"))
    run = json.loads((run_dir / "run.json").read_text())
    assert run["kind"] == "script" and run["cwd"] == str(cwd) and run["port"]


def test_a_script_sharding_itself_with_fsdp_runs_in_ddp_placement_and_learns_as_ddp(runs):
    """The example with --fsdp (fully_shard per conv layer, then the root) under the lab's
    torchrun: it succeeds, its curves are linked, and with the same seed and sampler its printed
    losses are the DDP run's (sharding changes where the parameters live, not the arithmetic)."""
    st, cwd, run_dir = runs["fsdp"]
    assert st["state"] == "succeeded" and st["kind"] == "script" and st["mode"] == "ddp", st[
        "diagnosis"
    ]
    check_curves(st, cwd, run_dir, "[default0]:")
    logs = {name: (runs[name][2] / "stdout.log").read_text() for name in ("ddp", "fsdp")}
    losses = {name: {int(s): float(v) for s, v in PRINTED.findall(t)} for name, t in logs.items()}
    assert sorted(losses["fsdp"]) == sorted(losses["ddp"]) == [1, 2, 3, 4, 5]
    for step, value in losses["ddp"].items():
        assert losses["fsdp"][step] == pytest.approx(value, rel=1e-4), step


def test_single_example_succeeds_and_its_curves_are_linked(runs):
    st, cwd, run_dir = runs["single"]
    assert st["state"] == "succeeded" and st["mode"] == "single", st["diagnosis"]
    check_curves(st, cwd, run_dir, "")
    # no progress.json from a script: its newest event step, out of --total-steps 5
    step = json.loads((run_dir / "status.json").read_text())["script_step"]
    assert step > 0 and st["progress"] == {"step": step, "total_steps": 5}
    env = json.loads((run_dir / "run.json").read_text())["env"]
    assert env["LAB_RUN_DIR"] == str(run_dir) and env["TENSORBOARD_LOGDIR"] == str(run_dir / "tb")
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["TORCHELASTIC_ERROR_FILE"] == str(
        run_dir / "error.json"
    )


def test_a_rank_that_raises_is_named_with_its_own_exception(runs):
    st, _cwd, _run_dir = runs["rank1"]
    d = st["diagnosis"]
    assert st["state"] == "failed" and d["rank"] == 1, d
    assert (
        "Rank 1" in d["cause"]
        and "ValueError: rank 1 cannot read its shard of the data" in d["cause"]
    ), d
    assert st["events_dirs"] == []  # it wrote none


@pytest.mark.parametrize(
    "case,line",
    [
        ("badarg", "dp_digits.py: error: argument --epochs: invalid int value: 'zero'"),
        ("ddp-badarg", "ddp_digits.py: error: argument --batch-size: invalid int value: 'many'"),
    ],
)
def test_a_script_refusing_its_arguments_fails_with_argparses_line(runs, case, line):
    st, cwd, _run_dir = runs[case]
    d = st["diagnosis"]
    assert st["state"] == "failed" and d["key"] == "bad_input" and d["excerpt"] == line, d
    assert d["cause"] == f"The script refused its arguments: {line}"
    assert not (cwd / "runs").exists()


def _alive(run_dir: Path) -> list[psutil.Process]:
    """Every live process started for the run: its environment names the run folder."""
    out = []
    for p in psutil.process_iter(["environ"]):
        try:
            if (p.info.get("environ") or {}).get("LAB_RUN_DIR") == str(
                run_dir
            ) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def test_stop_of_a_running_user_ddp_script_leaves_no_process(tmp_path):
    runs_dir = tmp_path / "runs"
    rid = launch(
        runs_dir,
        "--script",
        str(EXAMPLES / "ddp_digits.py"),
        "--mode",
        "ddp",
        "--nproc",
        "2",
        "--cwd",
        str(tmp_path),
        "--",
        "--epochs",
        "1000",
        "--log-every",
        "1",
    )
    run_dir, log = runs_dir / rid, runs_dir / rid / "stdout.log"
    try:
        deadline = time.monotonic() + 120
        while "[default0]:epoch 0 step 2 " not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "the ranks never started training"
            time.sleep(0.3)
        workers = _alive(run_dir)
        assert len(workers) >= 3  # torchrun and its two ranks
        r = run_lab(runs_dir, "stop", rid, **ONE_THREAD_CPU)
        assert r.returncode == 0 and r.stdout.strip() == f"{rid} stopped", r.stdout + r.stderr
    finally:  # a failed check must not leave a run of 1000 epochs behind
        run_lab(runs_dir, "stop", rid, **ONE_THREAD_CPU)
    gone, left = psutil.wait_procs(workers, timeout=10)
    assert left == [] and _alive(run_dir) == []
    st = status(runs_dir, rid)
    assert (
        st["state"] == "stopped"
        and st["events_dirs"]
        and st["events_dirs"][0].startswith(str(tmp_path / "runs"))
    )
