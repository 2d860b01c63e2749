"""Shared fixtures, the rules for the ``gpu``, ``e2e`` and ``slurm`` markers, and the fake-GPU test
mode.

Fake-GPU mode (``LAB_TEST_FAKE_GPUS=4 pytest ...``, scripts/test.sh's second
pass): every process of the run, this one and the supervisors and CLIs the
tests start, imports tests/fake_nvml.py instead of ``pynvml``
(``LAB_NVML_MODULE``, lab/engine/devices/nvml.py's test seam) and sees that many
GPUs, while torch still has no CUDA: the machine a CPU test meets on a GPU box
as far as the dashboard can tell. Tests whose expectations are the CPU's pin
themselves with the ``cpu_only`` fixture (or ``CUDA_VISIBLE_DEVICES=""`` for
the trainer), so they pass in both modes and on a real GPU box.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
# The event cache (lab/events/cache.py) of every test, and of the processes tests start, goes to
# one temporary folder: never into the tracked sample_data/ nor the user's ~/.cache.
if not os.environ.get("LAB_EVENTS_CACHE_DIR"):
    os.environ["LAB_EVENTS_CACHE_DIR"] = tempfile.mkdtemp(prefix="lab-events-cache-")
    atexit.register(shutil.rmtree, os.environ["LAB_EVENTS_CACHE_DIR"], True)
if os.environ.get("LAB_TEST_FAKE_GPUS"):  # before lab.engine.devices.nvml is imported anywhere
    os.environ["LAB_NVML_MODULE"] = "tests.fake_nvml"
# torch's first import runs `/sbin/ldconfig -p` (cuda.pathfinder's find_library): here, before the
# guard below, so that no test that merely imports torch first is taken to start a process
import torch  # noqa: E402

from tests.helpers.measured import MEASURED_PROCESSES  # noqa: E402


def _nvml_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 0


def _gpu_skip_reason() -> str | None:
    """Why ``gpu`` tests cannot run here (None: they can). They need torch to use CUDA, not NVML
    alone: a CPU-only torch on a GPU box, or the fake-GPU mode, skips them with the reason."""

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return None
    n = _nvml_count()
    if n:
        return (
            f"NVML sees {n} GPU(s) but torch {torch.__version__} cannot use CUDA: "
            "install torch's CUDA build to run the gpu tests"
        )
    return "needs an NVIDIA GPU and driver; none found on this machine"


# -- the process tiers on two pytest-xdist workers (scripts/test.sh) ------------------------------
# ``--dist loadgroup`` hands tests out one by one, except those in one ``xdist_group``, which one
# worker runs together. A module whose tests share a run through a module-, class- or
# session-scoped fixture of its own (a finished sweep, a private Slurm cluster) is one group, so
# the run is made once, not once per worker; every browser test is in the group ``browser``, so
# two Chromiums never draw at once. Tests whose result depends on the machine being otherwise
# idle (CPU measured, busy or quiet asserted, a deadline in seconds, noise) are marked ``serial``
# and run in a pass of their own with no other test beside them.
SHARED_SCOPES = ("module", "class", "session")


def _shared_fixture_module(item) -> str | None:
    """The module of ``item`` when it uses a module/class/session-scoped fixture defined there."""
    info = getattr(item, "_fixtureinfo", None)
    module = item.nodeid.split("::", 1)[0]
    for defs in info.name2fixturedefs.values() if info else ():
        if defs and defs[-1].scope in SHARED_SCOPES and defs[-1].baseid.startswith(module):
            return module
    return None


def _xdist_groups(items) -> None:
    for item in items:
        if item.get_closest_marker("serial") and not any(
            item.get_closest_marker(m) for m in PROC_MARKERS
        ):
            raise pytest.UsageError(
                f"{item.nodeid} is marked serial but not proc/e2e/slurm/gpu: serial is a part "
                "of the process tiers (pytest.ini)"
            )
        if item.get_closest_marker("serial") and "mark.serial" not in Path(item.fspath).read_text():
            raise pytest.UsageError(
                f"{item.nodeid} is marked serial without the words 'mark.serial' in its file: "
                "scripts/test.sh's serial pass collects only the files that contain them"
            )
        group = "browser" if item.get_closest_marker("e2e") else _shared_fixture_module(item)
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    _xdist_groups(items)
    why = _gpu_skip_reason() if any("gpu" in item.keywords for item in items) else None
    skip_gpu = pytest.mark.skip(reason=why or "")
    chromium = os.environ.get("LAB_CHROMIUM", "/usr/bin/chromium")
    skip_e2e = pytest.mark.skip(
        reason=f"needs Debian's chromium at {chromium}; run scripts/test.sh as root to install it"
    )
    # Slurm: skipped with the reason where it is missing, except under CI, where the tests then fail
    # on it
    no_slurm = next(
        (
            f"needs {exe}: run scripts/test.sh as root to install slurm-wlm and munge"
            for exe in ("slurmctld", "slurmd", "sbatch", "munged")
            if not shutil.which(exe)
        ),
        None,
    ) or (
        "needs root: the private test cluster's slurmd starts jobs as their user"
        if os.geteuid() != 0
        else None
    )
    skip_slurm = pytest.mark.skip(reason=no_slurm or "")
    for item in items:
        if "gpu" in item.keywords and why:
            item.add_marker(skip_gpu)
        if "e2e" in item.keywords and not shutil.which(chromium):
            item.add_marker(skip_e2e)
        if "slurm" in item.keywords and no_slurm and os.environ.get("CI") != "true":
            item.add_marker(skip_slurm)


def _worktree_state() -> str | None:
    """What ``git status`` and ``git diff`` say of the checkout (None outside git)."""
    import subprocess

    try:
        return (
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=all"],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
            + subprocess.run(
                ["git", "diff", "HEAD"],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
        )
    except (OSError, subprocess.SubprocessError):
        return None


def pytest_sessionstart(session):
    session.config._lab_git_before = _worktree_state()


def pytest_sessionfinish(session, exitstatus):
    """Tests never write into the checkout: the suite fails if ``git status`` changed under it."""
    before = getattr(session.config, "_lab_git_before", None)
    after = _worktree_state()
    if before is not None and after is not None and after != before:
        changed = sorted(set(after.splitlines()) - set(before.splitlines()))[:10]
        session.config.get_terminal_writer().line(
            "the test run changed the checkout (tests must write only to temp folders): "
            + "; ".join(changed),
            red=True,
        )
        session.exitstatus = 1


@pytest.fixture
def cpu_only(monkeypatch) -> None:
    """This machine as one without any GPU, whatever it has or fakes: no NVML driver here (the
    pages, the launcher) nor in the processes the test starts (supervisor, CLI). Their trainers get
    no GPU either: the launcher gives a run without GPUs ``CUDA_VISIBLE_DEVICES=""`` (and setting it
    here would hide it from the commands the pages show, which list only what differs from this
    process's environment)."""
    from lab.engine.devices import nvml as devices
    from tests.fake_nvml import FakeNvml

    monkeypatch.setattr(devices, "pynvml", FakeNvml([], no_driver=True))
    monkeypatch.setenv("LAB_NVML_MODULE", "tests.fake_nvml")
    monkeypatch.setenv("LAB_TEST_FAKE_GPUS", "none")


@pytest.fixture(scope="session")
def single_same(tmp_path_factory) -> Path:
    """The trainer's single run of ``tests.helpers.train_ddp.SAME`` (tinycnn, 10 steps, seed 3, on
    the CPU), paid for once per worker: the modules that check another run against it (DDP,
    accumulation, fsdp, compile) read it and never write into it."""
    from tests.helpers.train_ddp import SAME
    from tests.helpers.train_run import trainer

    run = tmp_path_factory.mktemp("single_same") / "run"
    done = trainer("--log-dir", str(run), *SAME, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return run


@pytest.fixture
def runs_dir(tmp_path, monkeypatch) -> Path:
    """A private runs folder for one test, also exported as LAB_RUNS_DIR."""
    d = tmp_path / "runs"
    d.mkdir()
    monkeypatch.setenv("LAB_RUNS_DIR", str(d))
    return d


# -- tiers: a test that starts a process says so --------------------------------------------------
# ``proc`` (starts a process: a CLI, a supervisor, torchrun, git), ``e2e`` (a browser), ``slurm``
# and ``gpu`` name what a test costs; the quick tier (README, Tests) deselects them all and runs in
# parallel. The rule is enforced: while an unmarked test runs (its setup, its fixtures, its body and
# its teardown), starting a process, from any thread, through subprocess, os.fork or os.posix_spawn
# (multiprocessing and asyncio go through these) raises ProcessNotMarked and fails the test, so a
# new test that forgets its marker fails the first time it runs.
PROC_MARKERS = ("proc", "e2e", "slurm", "gpu")


class ProcessNotMarked(BaseException):
    """Raised where an unmarked test starts a process. A BaseException, so the code under test's
    ``except Exception`` (a launcher reporting a failed start) cannot swallow it."""


_unmarked_item: list = [None]  # the unmarked test now running, if any


def _guarded(original, what: str):
    def start(*args, **kwargs):
        item = _unmarked_item[0]
        if item is not None:
            shown = args[1] if what == "subprocess.Popen" and len(args) > 1 else kwargs.get("args")
            item.stash.setdefault(_STARTED, []).append(f"{what}({shown!r})"[:200])
            raise ProcessNotMarked(
                f"{item.nodeid} started a process ({what}) without a marker: mark it "
                "@pytest.mark.proc (or e2e/slurm/gpu), or the module with pytestmark"
            )
        return original(*args, **kwargs)

    start.__wrapped__ = original
    return start


_STARTED = pytest.StashKey[list]()


def pytest_configure(config):
    import subprocess

    if not getattr(subprocess.Popen.__init__, "_lab_guard", False):
        guard = _guarded(subprocess.Popen.__init__, "subprocess.Popen")
        guard._lab_guard = True
        subprocess.Popen.__init__ = guard
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
            if hasattr(os, name):
                setattr(os, name, _guarded(getattr(os, name), f"os.{name}"))


COVERAGE_OF_PROCESSES = "COVERAGE_PROCESS_CONFIG"  # set by coverage: measure what starts


def _coverage_of_processes(item) -> str | None:
    """This test's processes' coverage: the config of the module's own data folder under
    ``LAB_COVERAGE_BY_MODULE`` (scripts/coverage_of_processes.py), coverage's own for a module of
    ``MEASURED_PROCESSES``, else None: its processes run unmeasured (tests/helpers/measured.py)."""
    config = os.environ.get(COVERAGE_OF_PROCESSES)
    by_module = os.environ.get("LAB_COVERAGE_BY_MODULE")
    if config is None or not by_module:
        return config if item.path.stem in MEASURED_PROCESSES else None
    data = json.loads(base64.b64decode(config))
    folder = Path(by_module) / item.path.stem
    folder.mkdir(parents=True, exist_ok=True)
    data.update(data_file=str(folder / ".coverage"), parallel=True)
    return base64.b64encode(json.dumps(data).encode()).decode()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    marked = any(item.get_closest_marker(m) for m in PROC_MARKERS)
    _unmarked_item[0] = None if marked else item
    coverage_config = os.environ.get(COVERAGE_OF_PROCESSES)
    if coverage_config is not None:
        if (mine := _coverage_of_processes(item)) is None:
            os.environ.pop(COVERAGE_OF_PROCESSES)
        else:
            os.environ[COVERAGE_OF_PROCESSES] = mine
    # an unmarked test reads event files in this process: several cold runs read together would
    # be read in forked readers (lab.events.apart), or not, as the threads alive say (xdist's
    # vary); the forked read is tests/test_events_apart.py's own, marked proc
    apart = os.environ.get("LAB_EVENTS_APART")
    if not marked:
        os.environ["LAB_EVENTS_APART"] = "0"
    try:
        yield
    finally:
        _unmarked_item[0] = None
        if coverage_config is not None:
            os.environ[COVERAGE_OF_PROCESSES] = coverage_config
        if apart is None:
            os.environ.pop("LAB_EVENTS_APART", None)
        else:
            os.environ["LAB_EVENTS_APART"] = apart


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:  # the raise itself failed this phase: reported once
        item.stash[_STARTED] = []
    started = item.stash.get(_STARTED, None)
    if started:  # the process start was caught and swallowed: still a failure
        item.stash[_STARTED] = []
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started a process without a marker (proc/e2e/slurm/gpu): "
            + "; ".join(started)
        )
