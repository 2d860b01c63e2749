"""The house rules of DESIGN.md, checked with ``ast`` so they stay true.

1. ``training/`` never imports ``lab``; ``lab/`` never imports ``streamlit``.
   ``lab/`` imports ``training`` in one place only: ``lab/engine/preflight/estimate.py``
   builds the trainer's own model (inside a function) to measure its memory
   before a launch; the trainer still knows nothing of the lab.
2. One gateway per outside system: NVML (``pynvml``) only in
   ``lab/engine/devices/nvml.py``; ``psutil`` only in ``lab/engine/procs.py`` (and
   the trainer's own metrics, ``training/metrics.py``); processes are started
   (``subprocess``, ``os.system``/``popen``/``spawn*``/``exec*``) only by
   ``lab/engine/launch/launcher.py`` and ``lab/engine/supervise/supervisor.py``, Slurm's
   commands only by its gateway ``lab/engine/slurm/cmd.py``, and py-spy by
   ``lab/engine/health/stacks.py``, the supervisor's stack taker (``py-spy dump``: a
   documented allowance); event files are
   parsed (TensorBoard's protos, ``crc32c``) only under ``lab/events/``, the
   supervisor's sampler writing them aside.
3. No module over 400 lines and no function over 80 (as ruff formats them) in ``lab/``,
   ``training/``, ``pages/`` and ``app.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lab.runfolder import REPO_ROOT

CODE = ["app.py", "pages", "ui", "lab", "training"]


def py_files(*roots: str) -> list[Path]:
    out: list[Path] = []
    for r in roots:
        p = REPO_ROOT / r
        out += [p] if p.is_file() else sorted(p.rglob("*.py"))
    return out


def rel(p: Path) -> str:
    return p.relative_to(REPO_ROOT).as_posix()


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports (dotted, absolute), anywhere in the file."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def importers(module: str, files: list[Path]) -> set[str]:
    return {
        rel(f) for f in files if any(m == module or m.startswith(module + ".") for m in imports(f))
    }


def process_starters(path: Path) -> bool:
    """Does ``path`` call os.system/popen/spawn*/exec* or import subprocess?"""
    if "subprocess" in {m.split(".")[0] for m in imports(path)}:
        return True
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and (
                node.attr in ("system", "popen", "fork", "forkpty")
                or node.attr.startswith(("spawn", "exec"))
            )
        ):
            return True
    return False


def test_training_never_imports_lab():
    assert importers("lab", py_files("training")) == set()


# The one allowance: the pre-flight's memory estimate measures the trainer's own
# model (training.models), imported inside the function that measures it.
LAB_IMPORTS_TRAINING = {"lab/engine/preflight/estimate.py"}


def test_lab_imports_training_only_for_the_memory_estimate():
    assert importers("training", py_files("lab")) == LAB_IMPORTS_TRAINING
    tree = ast.parse((REPO_ROOT / "lab/engine/preflight/estimate.py").read_text())
    top = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    top |= {n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(m == "training" or m.startswith("training.") for m in top), (
        "import training inside the function"
    )


def test_lab_never_imports_streamlit():
    assert importers("streamlit", py_files("lab")) == set()


def test_nvml_only_in_the_devices_module():
    assert importers("pynvml", py_files(*CODE)) <= {"lab/engine/devices/nvml.py"}


def test_psutil_only_in_the_process_module_and_the_trainers_metrics():
    assert importers("psutil", py_files(*CODE)) <= {"lab/engine/procs.py", "training/metrics.py"}


# The allowance: the supervisor's stack taker runs ``py-spy dump`` (and signals ranks) on its
# behalf.
STACK_TAKER = "lab/engine/health/stacks.py"


def test_processes_started_only_by_launcher_and_supervisor():
    starters = {rel(f) for f in py_files(*CODE) if process_starters(f)}
    # slurm_cmd.py: the gateway to Slurm, one module per outside system (sbatch, squeue, sacct,
    # scancel only)
    assert starters <= {
        "lab/engine/launch/launcher.py",
        "lab/engine/supervise/supervisor.py",
        "lab/engine/slurm/cmd.py",
        STACK_TAKER,
    }


def test_the_stack_taker_is_used_only_by_the_supervisor():
    # "from lab.engine import stacks" counts too
    users = importers("lab.engine.health.stacks", py_files(*CODE))
    # the supervisor's health watch, in the supervisor process
    assert users == {"lab/engine/health/watch.py"}


def test_event_files_parsed_only_under_lab_events():
    files = py_files(*CODE)
    parsers = importers("crc32c", files) | importers("tensorboard.compat.proto", files)
    # writes the sys/ events with TensorBoard's own writer
    allowed = {"lab/engine/supervise/sampler.py"}
    assert {p for p in parsers if not p.startswith("lab/events/")} <= allowed


def test_the_checks_see_what_they_look_for(tmp_path):
    """Not vacuous: an import inside a function and an os.system call are found."""
    f = tmp_path / "m.py"
    f.write_text(
        "def f():\n    import pynvml.x\n    from lab.events import reader\n    os.system('x')\n"
    )
    assert {"pynvml.x", "lab.events", "lab.events.reader"} <= imports(f)
    assert process_starters(f)


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 80


@pytest.mark.parametrize("path", py_files(*CODE), ids=rel)
def test_modules_and_functions_stay_small(path):
    lines = path.read_text().count("\n")
    assert lines <= MAX_MODULE_LINES, f"{rel(path)} has {lines} lines: split it by what it owns"
    long = [
        f"{n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{rel(path)}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"
