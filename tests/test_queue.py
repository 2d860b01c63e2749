"""The queue of a runs folder (lab/engine/queue), with real processes on the CPU and GPU placement
against the fake NVML (four fake GPUs in the CLIs and supervisors the tests start).

The runs are a user's script that naps and prints when it started and ended (``NAP {...}``): the
intervals it prints are what "side by side" and "waits" are checked against. The lock is taken by a
real process that is then SIGKILLed. Every test ends with no process of its runs alive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.engine import procs
from lab.engine.queue import book
from lab.engine.queue.lock import locked
from lab.runfolder import REPO_ROOT, read_json
from lab.views.live.queue import waiting_rows

FOUR_GPUS = {"LAB_NVML_MODULE": "tests.fake_nvml", "LAB_TEST_FAKE_GPUS": "4"}
# waits for its gate file (at most a minute), naps a little, says when it ran
NAP = """import json, os, sys, time
t0 = time.time()
while not os.path.exists(sys.argv[1]) and time.time() - t0 < 60:
    time.sleep(0.05)
time.sleep(0.3)
print("NAP " + json.dumps({"start": t0, "end": time.time()}), flush=True)
"""


CPU_BOX = {"LAB_NVML_MODULE": "tests.fake_nvml", "LAB_TEST_FAKE_GPUS": "none"}


def _env(runs_dir: Path, machine: dict = FOUR_GPUS) -> dict:
    return dict(os.environ, LAB_RUNS_DIR=str(runs_dir), OMP_NUM_THREADS="1", **machine)


def lab(
    runs_dir: Path, *args: str, timeout: float = 120, machine: dict = FOUR_GPUS
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=REPO_ROOT,
        env=_env(runs_dir, machine),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def gate(runs_dir: Path, name: str) -> Path:
    return runs_dir.parent / f"gate-{name}"


def open_gate(runs_dir: Path, name: str) -> None:
    gate(runs_dir, name).touch()


def nap_args(runs_dir: Path, name: str, *flags: str) -> list[str]:
    script = runs_dir.parent / "nap.py"
    script.write_text(NAP)
    return ["launch", "--script", str(script), "--json", *flags, "--", str(gate(runs_dir, name))]


def launch(runs_dir: Path, name: str, *flags: str) -> str:
    r = lab(runs_dir, *nap_args(runs_dir, name, *flags))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["run_id"]


def status(runs_dir: Path, run_id: str) -> dict:
    return read_json(runs_dir / run_id / "status.json") or {}


def wait_final(runs_dir: Path, ids: list[str], timeout_s: float = 120) -> list[str]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        states = [status(runs_dir, r).get("state") for r in ids]
        if all(s in ("succeeded", "failed", "stopped") for s in states):
            return states
        time.sleep(0.2)
    raise AssertionError(f"runs not final after {timeout_s} s: {states}")


def span(runs_dir: Path, run_id: str) -> tuple[float, float]:
    """(start, end) the nap printed."""
    line = (runs_dir / run_id / "stdout.log").read_text().split("NAP ")[-1]
    d = json.loads(line.splitlines()[0])
    return d["start"], d["end"]


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.fixture
def box(runs_dir):
    """The runs folder; afterwards no supervisor or command of its runs may be alive (a
    supervisor exits a moment after writing its run's final state)."""
    yield runs_dir
    recorded = []
    for d in runs_dir.iterdir():
        st = read_json(d / "status.json") or {}
        recorded += [
            [st.get("supervisor_pid"), st.get("supervisor_ct")],
            [st.get("pid"), st.get("pid_ct")],
        ]
    procs.wait_until(lambda: not any(procs.alive(p, ct) for p, ct in recorded), 15, 0.1)
    left = [p for p, ct in recorded if procs.alive(p, ct)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], "processes left behind"


# ---- the rule and the lock -----------------------------------------------


def entry(i: str, devices: list[str], state: str = book.WAITING, exclusive: bool = False) -> dict:
    return {"id": i, "runs": [i], "devices": devices, "exclusive": exclusive, "state": state}


def test_who_waits_for_whom():
    run0 = entry("a", ["gpu0"], book.RUNNING)
    entries = [
        run0,
        entry("b", ["gpu1"]),
        entry("c", ["gpu0"]),
        entry("x", ["cpu"], exclusive=True),
    ]
    entries += [entry("d", ["gpu1"]), entry("e", ["cpu"])]
    assert book.blockers(entries, "b") == []  # disjoint GPUs: side by side
    assert [e["id"] for e in book.blockers(entries, "c")] == ["a"]
    assert [e["id"] for e in book.blockers(entries, "x")] == ["a", "b", "c"]  # waits for all
    assert [e["id"] for e in book.blockers(entries, "d")] == ["b", "x"]  # nothing overtakes x
    assert [e["id"] for e in book.blockers(entries, "e")] == ["x"]  # the CPU is shared
    assert [book.position(entries, i) for i in "abcxde"] == [0, 1, 2, 3, 4, 5]


@pytest.mark.serial
@pytest.mark.proc
def test_a_killed_holder_does_not_keep_the_lock(tmp_path):
    path = tmp_path / "lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from lab.engine.queue.lock import locked\n"
            f"with locked(Path({str(path)!r})):\n print('held', flush=True); time.sleep(60)",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(TimeoutError, match="stayed held"):
            with locked(path, timeout_s=0.5):
                pass
    finally:
        holder.kill()
        holder.wait()
    t = time.monotonic()
    with locked(path, timeout_s=5):
        assert time.monotonic() - t < 1.0


# ---- real runs -------------------------------------------------------------


def wait_state(runs_dir: Path, run_id: str, state: str, timeout_s: float = 60) -> None:
    assert procs.wait_until(lambda: status(runs_dir, run_id).get("state") == state, timeout_s, 0.1)


@pytest.mark.proc
@pytest.mark.slow
def test_disjoint_gpus_run_side_by_side_a_shared_one_waits_exclusive_waits_for_all(box):
    a = launch(box, "a", "--gpus", "0")
    b = launch(box, "b", "--gpus", "1")
    c = launch(box, "c", "--gpus", "0")
    x = launch(box, "x", "--exclusive")  # on the CPU, asking for the machine
    for name in "cx":
        open_gate(box, name)
    wait_state(box, a, "running")
    wait_state(box, b, "running")  # side by side
    q = json.loads(lab(box, "status", c, "--json").stdout)
    assert q["state"] == "queued" and q["queue"] == {"position": 1, "waiting_for": [a]}
    q = json.loads(lab(box, "status", x, "--json").stdout)["queue"]
    assert q["position"] == 2 and set(q["waiting_for"]) == {a, b, c}
    open_gate(box, "a")
    wait_state(box, c, "succeeded")
    assert status(box, x)["state"] == "queued"  # b still runs
    open_gate(box, "b")
    assert wait_final(box, [a, b, c, x]) == ["succeeded"] * 4
    sa, sb, sc, sx = (span(box, r) for r in (a, b, c, x))
    assert overlap(sa, sb) and sc[0] >= sa[1] and sx[0] >= max(sa[1], sb[1], sc[1])
    # a supervisor leaves the queue a moment after writing its run's final state (on a loaded
    # machine, after wait_final has read it)
    procs.wait_until(lambda: book.read(box) == [], 15, 0.1)
    assert book.read(box) == []


@pytest.mark.proc
@pytest.mark.slow
def test_eight_launches_at_once_never_share_a_device(box):
    open_gate(box, "go")
    ps = [
        subprocess.Popen(
            [sys.executable, "-m", "lab", *nap_args(box, "go", "--gpus", str(i % 2))],
            cwd=REPO_ROOT,
            env=_env(box),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    outs = [p.communicate(timeout=120) for p in ps]
    assert [p.returncode for p in ps] == [0] * 8, [e for _, e in outs]
    ids = [json.loads(o)["run_id"] for o, _ in outs]
    assert wait_final(box, ids, 240) == ["succeeded"] * 8
    for gpu in (0, 1):
        spans = sorted(span(box, r) for i, r in enumerate(ids) if i % 2 == gpu)
        assert all(s[1] <= t[0] for s, t in zip(spans, spans[1:])), spans


@pytest.mark.proc
@pytest.mark.slow
def test_stop_of_a_queued_run_and_a_killed_supervisor(box):
    a = launch(box, "a", "--gpus", "0")
    b = launch(box, "b", "--gpus", "0")
    c = launch(box, "c", "--gpus", "0")
    open_gate(box, "c")
    r = lab(box, "stop", b)
    assert r.returncode == 0 and r.stdout.split() == [b, "stopped"], r.stderr
    assert not (box / b / "stdout.log").exists()  # never started
    assert [e["id"] for e in book.read(box)] == [a, c]
    r = lab(box, "queue", "--first", b)
    assert r.returncode == 2 and "is not waiting" in r.stderr
    # the running run's watcher dies: its command still holds GPU 0 until it ends
    wait_state(box, a, "running")
    os.kill(status(box, a)["supervisor_pid"], signal.SIGKILL)
    time.sleep(1.0)
    assert status(box, c)["state"] == "queued"
    open_gate(box, "a")
    cmd = status(box, a)
    assert procs.wait_until(lambda: not procs.alive(cmd["pid"], cmd["pid_ct"]), 30)
    assert wait_final(box, [c]) == ["succeeded"]
    assert span(box, c)[0] >= span(box, a)[1] - 0.3


@pytest.mark.proc
@pytest.mark.slow
def test_queue_first_moves_a_run_ahead(box):
    a = launch(box, "a", "--gpus", "0")
    b = launch(box, "b", "--gpus", "0")
    c = launch(box, "c", "--gpus", "0")
    r = lab(box, "queue", "--first", c)
    assert r.returncode == 0, r.stderr
    rows = json.loads(lab(box, "queue", "--json").stdout)
    assert [(e["id"], e["position"]) for e in rows] == [(a, 0), (c, 1), (b, 2)]
    home = waiting_rows(box)  # the table Home shows
    assert [(r["#"], r["run or sweep"], r["waiting for"]) for r in home] == [
        (1, c, a),
        (2, b, f"{a}, {c}"),
    ]
    for name in "abc":
        open_gate(box, name)
    assert wait_final(box, [a, b, c]) == ["succeeded"] * 3
    assert span(box, a)[1] <= span(box, c)[0] and span(box, c)[1] <= span(box, b)[0]


@pytest.mark.proc
@pytest.mark.slow
def test_a_second_sweep_queues_behind_the_first_whole(box):
    """Two sweeps of two runs each: the second waits for the whole first, whose runs go one after
    another. The queue holds runs, whatever they run: the runs are a script's that waits for its
    gate (the first run holds it closed, so the second sweep is surely queued behind it), not the
    trainer (8 processes importing torch, one after another, were none here)."""
    script = box.parent / "nap.py"
    script.write_text(NAP)
    sweep = ["sweep", "--script", str(script), "--modes", "single", "--repeats", "2", "--json"]
    sweep += ["--", str(gate(box, "s"))]
    r1 = lab(box, *sweep, machine=CPU_BOX)
    assert r1.returncode == 0, r1.stderr
    out1 = json.loads(r1.stdout)
    r2 = lab(box, *sweep, machine=CPU_BOX)
    assert r2.returncode == 0, r2.stderr
    out2 = json.loads(r2.stdout)
    assert len(out1["run_ids"]) == len(out2["run_ids"]) == 2
    q = json.loads(lab(box, "status", out2["run_ids"][0], "--json").stdout)
    assert q["state"] == "queued" and q["queue"]["waiting_for"] == [out1["sweep_id"]]
    open_gate(box, "s")
    ids = out1["run_ids"] + out2["run_ids"]
    assert wait_final(box, ids, 300) == ["succeeded"] * 4
    sts = [status(box, r) for r in ids]
    assert min(s["started_at"] for s in sts[2:]) >= max(s["ended_at"] for s in sts[:2])
    assert sts[1]["started_at"] >= sts[0]["ended_at"]  # one after another within the sweep


@pytest.mark.proc
@pytest.mark.slow
def test_the_queue_outlives_every_watcher(box):
    a = launch(box, "a", "--gpus", "0")
    b = launch(box, "b", "--gpus", "0")
    wait_state(box, a, "running")
    assert status(box, b)["state"] == "queued"
    dead = [status(box, r)["supervisor_pid"] for r in (a, b)]
    for pid in dead:  # the dashboard is not running; every watcher dies (the OOM killer)
        os.kill(pid, signal.SIGKILL)
    assert procs.wait_until(lambda: not any(procs.alive(p) for p in dead), 10)
    r = lab(box, "status", "--json")  # the next command notices: a adopted, b given a supervisor
    assert r.returncode == 0, r.stderr
    st = status(box, b)
    assert st.get("requeued") is True and st["state"] == "queued", st
    assert procs.wait_until(
        lambda: procs.alive(
            status(box, b).get("supervisor_pid"), status(box, b).get("supervisor_ct")
        ),
        15,
    )
    open_gate(box, "b")
    time.sleep(1.0)
    assert status(box, b)["state"] == "queued"  # still behind a, whose command holds GPU 0
    open_gate(box, "a")
    assert wait_final(box, [b]) == ["succeeded"]
    assert span(box, b)[0] >= span(box, a)[1] - 0.3  # it started once a's command had ended
    assert lab(box, "status").returncode == 0  # requeues nothing twice, starts nothing more
    procs.wait_until(lambda: book.read(box) == [], 15, 0.1)  # b's supervisor leaves the queue
    assert [e["id"] for e in book.read(box)] == []


@pytest.mark.serial
@pytest.mark.proc
@pytest.mark.slow
def test_wait_for_idle_waits_while_others_busy_the_cpu(box):
    # REAL: two busy loops (one per core here) are the foreign work; the run waits them out
    hogs = [
        subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile 1: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        a = launch(box, "a", "--wait-for-idle")
        open_gate(box, "a")
        assert procs.wait_until(lambda: (status(box, a).get("queue") or {}).get("waiting_for"), 20)
        why = status(box, a)["queue"]["waiting_for"][0]
        assert why.startswith("other processes use") and "cores of" in why, why
        time.sleep(2.0)
        assert status(box, a)["state"] == "queued"  # still waiting while the hogs run
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    ended = time.time()
    assert wait_final(box, [a]) == ["succeeded"]
    assert span(box, a)[0] >= ended - 0.5  # it started once the machine was quiet


@pytest.mark.proc
def test_a_foreign_gpu_process_keeps_an_idle_waiting_run_waiting(monkeypatch):
    # FAKE: NVML (no GPU here); GPU 1 lists a process that is not this one
    from lab.engine.devices import nvml
    from lab.engine.devices.interference import OtherCpu
    from lab.engine.queue import idle
    from tests.fake_nvml import FakeGpu, FakeNvml

    # not our child (its parent exits at once): a descendant of ours would count as our own
    # its output elsewhere: holding our pipes open, it would keep run() waiting its 30 s out
    orphan = "import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', "
    orphan += "'import time; time.sleep(30)'], stdout=subprocess.DEVNULL, "
    orphan += "stderr=subprocess.DEVNULL).pid)"
    pid = int(subprocess.run([sys.executable, "-c", orphan], capture_output=True, text=True).stdout)
    try:
        gpus = [FakeGpu(uuid="GPU-0"), FakeGpu(uuid="GPU-1", processes=[(pid, 500)])]
        monkeypatch.setattr(nvml, "pynvml", FakeNvml(gpus))
        cpu = OtherCpu()
        assert idle.busy_reason([0], cpu) is None  # GPU 0 is free (and the CPU not yet read)
        why = idle.busy_reason([1], cpu)
        assert why == f"GPU 1 holds other processes (pid {pid})"
        seen: list[str] = []
        calls = iter([False, False, True])  # cancelled on the third look
        assert idle.wait_idle([1], seen.append, lambda: next(calls), sleep=lambda s: None) is False
        assert seen == [why]  # said once, not at every reading
    finally:
        os.kill(pid, signal.SIGKILL)
