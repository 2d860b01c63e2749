"""The house rules of DESIGN.md, checked with ``ast`` so they stay true.

1. ``training/`` never imports ``lab``; ``lab/`` never imports ``streamlit``.
   ``lab/`` imports ``training`` in one place only: ``lab/engine/preflight/estimate.py``
   builds the trainer's own model (inside a function) to measure its memory
   before a launch; the trainer still knows nothing of the lab.
2. One gateway per outside system: NVML (``pynvml``) only in
   ``lab/engine/devices/nvml.py``; ``psutil`` only in ``lab/engine/procs.py`` (and
   the trainer's own metrics, ``training/metrics.py``); processes are started
   (``subprocess``, ``Popen``, ``os.system``/``popen``/``fork``/``spawn*``/``exec*``) only by
   the one gateway ``lab/engine/spawn.py``, which the launcher, the supervisors, the link check,
   Slurm's commands (``lab/engine/slurm/cmd.py``) and the stack taker (``py-spy dump``) call;
   at most two modules under ``lab/`` may ever start processes (the gateway and py-spy's); event
   files are
   parsed (TensorBoard's protos, ``crc32c``) only under ``lab/events/``, the
   lab's own scalar writer (``lab/engine/scalars.py``) writing them aside.
3. No module over 600 lines (an alarm to look again, not a cap to cut to) and no function over
   80 (as ruff formats them) in ``lab/``, ``training/``, ``pages/`` and ``app.py``.
4. The import graph of ``lab`` (every import, those inside functions included) has no cycle, and
   its arrows run views -> engine -> events: ``lab.events`` imports neither the engine nor the
   views, the engine does not import the views; each may use ``lab.runfolder``, which imports
   nothing of the lab, and ``lab.runrecords`` (the run's records), which imports only it.
   Collapsed to the engine's units (its sub-packages and top-level modules: ``launch``,
   ``slurm``, ``supervise``, ``procs``, ...) the graph has no cycle either, and the run's
   vocabulary, ``lab.engine.spec``, imports no other unit of the engine.
5. No code branches on where a run goes (``backend == SLURM``, ``record.backend == "slurm"``...)
   outside the backends (the facts in ``lab/engine/spec/backends.py``, the actions in
   ``lab/engine/launch/backends.py``) and the Slurm code itself (``lab/engine/slurm/``, its job
   script and its watcher): the rest asks the backend (``backends.of(config).runs_here``,
   ``.where``, ``.watcher``...).
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
    """Does ``path`` call os.system/popen/fork/spawn*/exec* or a ``Popen``, or import
    subprocess?"""
    if "subprocess" in {m.split(".")[0] for m in imports(path)}:
        return True
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == "Popen") or (
                isinstance(f, ast.Attribute) and f.attr == "Popen"
            ):
                return True
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


def test_no_test_module_imports_another():
    """Shared test code lives in tests/helpers/ (and conftest.py, fake_nvml.py): a test module
    imported by another is collected twice over and drags its fixtures along."""
    tests = py_files("tests")
    offenders = {
        f"{rel(f)} imports {m}"
        for f in tests
        for m in imports(f)
        if m.startswith("tests.test_") or (m.startswith("tests.") and ".test_" in m)
    }
    assert offenders == set()


def test_training_never_imports_lab():
    assert importers("lab", py_files("training")) == set()


# The allowances: the pre-flight's memory estimate measures the trainer's own
# model (training.models), imported inside the function that measures it; the knobs read
# the trainer's option words and limits (training.options: plain values, no torch), and the
# launcher's models the names and image sizes the trainer takes (training.model_names: no torch
# until a torchvision model is asked about), so the form and the trainer cannot drift apart.
LAB_IMPORTS_TRAINING = {"lab/engine/preflight/estimate.py"}
LAB_READS_TRAINER_OPTIONS = {
    "lab/engine/launch/knobs.py": "training.options",
    "lab/engine/launch/models.py": "training.model_names",
}


def test_lab_imports_training_only_for_the_memory_estimate_and_the_option_words():
    files = py_files("lab")
    assert importers("training", files) == LAB_IMPORTS_TRAINING | set(LAB_READS_TRAINER_OPTIONS)
    for f, allowed in LAB_READS_TRAINER_OPTIONS.items():  # those words, nothing else of it
        read = {m for m in imports(REPO_ROOT / f) if m.split(".")[0] == "training"}
        assert all(m == "training" or m.startswith(allowed) for m in read), read
    # plain values and a check of them: the supervisor imports it (through the knobs) and never
    # imports torch
    plain = {"__future__", "__future__.annotations", "typing", "typing.Any", "argparse"}
    plain |= {"dataclasses", "dataclasses.dataclass"}
    assert imports(REPO_ROOT / "training/options.py") <= plain
    names = plain | {"functools", "functools.lru_cache", "torchvision.models"}  # torchvision lazily
    assert imports(REPO_ROOT / "training/model_names.py") <= names
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


# The one gateway: every process the lab starts (a run's supervisor, the run, the link check's
# torchrun, Slurm's commands, py-spy) is started by it.
SPAWN = "lab/engine/spawn.py"


def test_processes_started_only_by_the_gateway():
    starters = {rel(f) for f in py_files(*CODE) if process_starters(f)}
    assert starters <= {SPAWN, STACK_TAKER}, sorted(starters - {SPAWN, STACK_TAKER})
    assert len({s for s in starters if s.startswith("lab/")}) <= 2


def test_the_stack_taker_is_used_only_by_the_supervisor():
    # "from lab.engine import stacks" counts too
    users = importers("lab.engine.health.stacks", py_files(*CODE))
    # the supervisor's health watch, in the supervisor process
    assert users == {"lab/engine/health/watch.py"}


def test_event_files_parsed_only_under_lab_events():
    files = py_files(*CODE)
    parsers = importers("crc32c", files) | importers("tensorboard.compat.proto", files)
    # writes the sys/ events with TensorBoard's own writer
    allowed = {"lab/engine/scalars.py"}
    assert {p for p in parsers if not p.startswith("lab/events/")} <= allowed


def test_the_checks_see_what_they_look_for(tmp_path):
    """Not vacuous: an import inside a function and an os.system call are found."""
    f = tmp_path / "m.py"
    f.write_text(
        "def f():\n    import pynvml.x\n    from lab.events import reader\n    os.system('x')\n"
    )
    assert {"pynvml.x", "lab.events", "lab.events.reader"} <= imports(f)
    assert process_starters(f)
    f.write_text(
        "from lab.engine import spawn\n\ndef g(p: spawn.Popen):\n    spawn.start(['x'], 'l')\n"
    )
    assert not process_starters(f)  # through the gateway, a type named Popen in an annotation
    f.write_text("from x import y\n\ndef g():\n    y.Popen(['x'])\n")
    assert process_starters(f)


# an alarm, not a cap: a module is cut by what it owns (STYLE: by meaning, not line count), and
# code moved only to stay under a cap is worse than the long module; past this, look again
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 600, 80


@pytest.mark.parametrize("path", py_files(*CODE), ids=rel)
def test_modules_and_functions_stay_small(path):
    lines = path.read_text().count("\n")
    assert lines <= MAX_MODULE_LINES, (
        f"{rel(path)} has {lines} lines: does it own more than one thing? Cut it by meaning"
    )
    long = [
        f"{n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{rel(path)}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"


# ---- 4. the import graph ------------------------------------------------------------------

# views -> engine -> events: a higher layer may import a lower one, never the other way
LAYERS = {"lab.events": 0, "lab.engine": 1, "lab.views": 2}


def lab_modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ``root``/lab (a package by its __init__)."""
    out = {}
    for f in sorted((root / "lab").rglob("*.py")):
        parts = f.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the lab modules it imports, anywhere in the file (inside functions too).

    ``from lab.a import b`` is an arrow to ``lab.a.b`` when that is a module, else to ``lab.a``;
    a package's ``__init__`` that Python runs on the way is not counted (it is a module of its
    own, with its own arrows)."""
    mods = lab_modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        package = m if f.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names
                ]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != m:
                    graph[m].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> int | None:
    return next((n for p, n in LAYERS.items() if module == p or module.startswith(p + ".")), None)


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Arrows against views -> engine -> events, and any arrow out of lab.runfolder or lab.tags
    (which every layer may use) or out of lab.runrecords but to lab.runfolder."""
    out = []
    for m, targets in sorted(graph.items()):
        for t in sorted(targets):
            below, above = layer(m), layer(t)
            base = m in ("lab.runfolder", "lab.tags") or (
                m == "lab.runrecords" and t != "lab.runfolder"
            )
            if base or (below is not None and above is not None and above > below):
                out.append(f"{m} -> {t}")
    return out


def test_no_import_cycle_among_lab_modules():
    found = cycles(import_graph(REPO_ROOT))
    assert not found, "import cycles (inside functions counted): " + "; ".join(
        " <-> ".join(c) for c in found
    )


ENGINE = "lab.engine"


def engine_unit(module: str) -> str | None:
    """The engine unit a module belongs to: ``lab.engine.launch.config`` -> ``launch``,
    ``lab.engine.procs`` -> ``procs``; None outside the engine (and for its ``__init__``)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ENGINE.split(".") and len(parts) > 2 else None


def unit_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """Engine unit -> the units it imports -> the module arrows that make each unit arrow."""
    out: dict[str, dict[str, set[str]]] = {}
    for m, targets in graph.items():
        a = engine_unit(m)
        if a is None:
            continue
        out.setdefault(a, {})
        for t in targets:
            b = engine_unit(t)
            if b is not None and b != a:
                out[a].setdefault(b, set()).add(f"{m} -> {t}")
    return out


def unit_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each cycle among the engine's units, with the module arrows inside it."""
    units = unit_graph(graph)
    found = []
    for c in cycles({u: set(arrows) for u, arrows in units.items()}):
        inside = sorted(x for a in c for b in c if b in units[a] for x in units[a][b])
        found.append(" <-> ".join(c) + ": " + ", ".join(inside))
    return found


def test_no_import_cycle_among_engine_packages():
    found = unit_cycles(import_graph(REPO_ROOT))
    assert not found, (
        "cycles among lab/engine's packages (inside functions counted):\n" + "\n".join(found)
    )


def test_the_runs_vocabulary_imports_no_other_engine_package():
    arrows = unit_graph(import_graph(REPO_ROOT))["spec"]
    assert not arrows, sorted(x for xs in arrows.values() for x in xs)


def test_arrows_run_views_to_engine_to_events():
    assert upward_arrows(import_graph(REPO_ROOT)) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_graph_checks_fail_on_a_planted_cycle_and_an_upward_arrow(tmp_path):
    """Not vacuous: a cycle hidden in a function, a view imported by the engine and the run's
    records importing the engine are found."""
    root = _tree(
        tmp_path,
        {
            "lab/__init__.py": "",
            "lab/runfolder.py": "",
            "lab/runrecords.py": "from lab.runfolder import x\nfrom lab.engine.b import y\n",
            "lab/events/__init__.py": "",
            "lab/events/reader.py": "from lab.runfolder import x\n",
            "lab/engine/__init__.py": "",
            "lab/engine/a.py": "def f():\n    from lab.engine import b\n",
            "lab/engine/b.py": "from lab.engine.c import y\n",
            "lab/engine/c.py": "import lab.engine.a\nfrom lab.views.page import z\n",
            "lab/views/__init__.py": "",
            "lab/views/page.py": "from lab.events.reader import r\n",
        },
    )
    graph = import_graph(root)
    assert graph["lab.engine.a"] == {"lab.engine.b"}  # found inside the function
    assert cycles(graph) == [["lab.engine.a", "lab.engine.b", "lab.engine.c"]]
    assert upward_arrows(graph) == [
        "lab.engine.c -> lab.views.page",
        "lab.runrecords -> lab.engine.b",
    ]
    (root / "lab/engine/c.py").write_text("from lab.events import reader\n")  # downward: fine
    (root / "lab/runrecords.py").write_text("from lab.runfolder import x\n")
    assert cycles(import_graph(root)) == [] and upward_arrows(import_graph(root)) == []


def test_the_package_check_fails_on_a_cycle_between_packages_but_not_modules(tmp_path):
    """Not vacuous: two packages that import each other through different modules (no module
    cycle) are a package cycle, found inside a function too."""
    root = _tree(
        tmp_path,
        {
            "lab/__init__.py": "",
            "lab/engine/__init__.py": "",
            "lab/engine/procs.py": "",
            "lab/engine/launch/__init__.py": "",
            "lab/engine/launch/commands.py": "from lab.engine import procs\n",
            "lab/engine/launch/launcher.py": "from lab.engine.slurm import job\n",
            "lab/engine/slurm/__init__.py": "",
            "lab/engine/slurm/job.py": "def f():\n    from lab.engine.launch import commands\n",
        },
    )
    graph = import_graph(root)
    assert cycles(graph) == []
    assert unit_cycles(graph) == [
        "launch <-> slurm: lab.engine.launch.launcher -> lab.engine.slurm.job, "
        "lab.engine.slurm.job -> lab.engine.launch.commands"
    ]
    (root / "lab/engine/slurm/job.py").write_text("from lab.engine import procs\n")
    assert unit_cycles(import_graph(root)) == []


# where a backend may be named: its two implementations, and the Slurm code they delegate to
BACKEND_CODE = {
    "lab/engine/spec/backends.py",
    "lab/engine/launch/backends.py",
    "lab/engine/launch/slurm_job.py",
    "lab/engine/supervise/slurm_watch.py",
}
BACKEND_WORDS, BACKEND_NAMES = {"local", "slurm"}, {"LOCAL", "SLURM", "BACKENDS"}
# whose ``backend`` is torch.distributed's (gloo, nccl), not where a run goes
COLLECTIVES_BACKEND = {"lab/engine/linkcheck.py"}


def _names_backend(node: ast.expr) -> bool:
    """A backend's name (``SLURM``, ``"local"``) or a run's backend (``c.backend``,
    ``config.get("backend")``, ``config["backend"]``)."""
    if isinstance(node, ast.Constant):
        return node.value in BACKEND_WORDS
    if isinstance(node, ast.Name):
        return node.id in BACKEND_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in BACKEND_NAMES or node.attr == "backend"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "backend"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        first = node.args[0] if node.args else None
        return (
            node.func.attr == "get" and isinstance(first, ast.Constant) and first.value == "backend"
        )
    return False


def backend_branches(path: Path) -> list[str]:
    """Each comparison in ``path`` against a run's backend or a backend's name (line: source).
    ``training/``'s ``backend`` is torch.distributed's (gloo, nccl), not where a run goes."""
    text = path.read_text()
    return [
        f"{rel(path) if path.is_relative_to(REPO_ROOT) else path.name}:{n.lineno}: "
        + ast.get_source_segment(text, n)
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.Compare) and any(map(_names_backend, [n.left, *n.comparators]))
    ]


def test_only_the_backends_branch_on_the_backend():
    files = [
        f
        for f in py_files("app.py", "pages", "ui", "lab")
        if rel(f) not in BACKEND_CODE | COLLECTIVES_BACKEND
        and not rel(f).startswith("lab/engine/slurm/")
    ]
    assert [b for f in files for b in backend_branches(f)] == []


def test_the_backend_check_sees_a_branch(tmp_path):
    """Not vacuous: each way of naming a backend in a comparison is found, a count of backends
    and torch.distributed's backend are not."""
    f = tmp_path / "m.py"
    planted = [
        "if c.backend == SLURM: pass",
        'if record.backend == "slurm": pass',
        'if kw.get("backend", LOCAL) == LOCAL: pass',
        'x = 1 if cfg["backend"] != run.LOCAL else 2',
    ]
    for line in planted:
        f.write_text(line + "\n")
        assert len(backend_branches(f)) == 1, line
    f.write_text('n = len({c.backend for c in cs}) > 1\nif pg.name() == "gloo": pass\n')
    assert backend_branches(f) == []
