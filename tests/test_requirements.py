"""Every third-party import of the project is provided by a pinned requirement.

A fresh machine has only what the requirement files install (scripts/venv.sh
builds .venv from them alone). This test walks every ``.py`` of the shipped
code with ``ast``, collects the top-level modules it imports (also the ones
imported inside functions), and checks that each non-stdlib, non-project
module comes from a distribution pinned in a requirement file. What the app,
its pages, ``lab/`` and ``training/`` import must be in ``requirements.txt``
alone; scripts and benchmarks may also use ``requirements-test.txt``.
It caught ``scipy`` (imported by lab/views/smoothing.py, pinned nowhere).
"""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from lab.runfolder import REPO_ROOT

RUNTIME = ["app.py", "pages", "ui", "lab", "training"]
TOOLING = ["scripts", "bench", "examples"]
PROJECT = {"lab", "training", "tests", "pages", "ui", "scripts", "bench", "examples", "app"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(*files: str) -> set[str]:
    out = set()
    for f in files:
        for line in (REPO_ROOT / f).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                out.add(_norm(re.split(r"[<>=!~\[; ]", line, maxsplit=1)[0]))
    return out


def imported_modules(paths: list[str]) -> dict[str, str]:
    """Top-level module -> the first file importing it (absolute imports only)."""
    files: list[Path] = []
    for p in paths:
        path = REPO_ROOT / p
        files += [path] if path.is_file() else sorted(path.rglob("*.py")) if path.is_dir() else []
    found: dict[str, str] = {}
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for n in names:
                found.setdefault(n.split(".")[0], str(f.relative_to(REPO_ROOT)))
    return found


def uncovered(paths: list[str], allowed: set[str]) -> list[str]:
    dists = packages_distributions()
    missing = []
    for mod, where in sorted(imported_modules(paths).items()):
        if mod in sys.stdlib_module_names or mod in PROJECT or mod == "__future__":
            continue
        provided_by = {_norm(d) for d in dists.get(mod, [])}
        if not provided_by & allowed:
            missing.append(
                f"{mod} (imported by {where}; provided by "
                f"{sorted(provided_by) or 'nothing installed'})"
            )
    return missing


def test_runtime_imports_are_pinned_in_requirements_txt():
    missing = uncovered(RUNTIME, pinned("requirements.txt"))
    assert not missing, "pin these in requirements.txt: " + "; ".join(missing)


def test_script_and_bench_imports_are_pinned():
    missing = uncovered(TOOLING, pinned("requirements.txt", "requirements-test.txt"))
    assert not missing, "pin these in requirements.txt or requirements-test.txt: " + "; ".join(
        missing
    )


def test_the_check_sees_an_unpinned_import(tmp_path, monkeypatch):
    """The walk is not vacuous: an import of a package no requirement names is reported."""
    pkg = tmp_path / "lab"
    pkg.mkdir()
    (pkg / "x.py").write_text("def f():\n    from scipy.signal import lfilter\n    import numpy\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO_ROOT", tmp_path)
    missing = uncovered(["lab"], pinned_from(tmp_path, "numpy==2.4.6\n"))
    assert [m.split(" ")[0] for m in missing] == ["scipy"]


def pinned_from(tmp_path: Path, text: str) -> set[str]:
    (tmp_path / "requirements.txt").write_text(text)
    return pinned("requirements.txt")


@pytest.mark.parametrize(
    "line,name",
    [
        ("torch==2.14.1", "torch"),
        ("nvidia-ml-py==13.615.71", "nvidia-ml-py"),
        ("crc32c==2.9.post0  # C", "crc32c"),
        ("Foo_Bar[x]==1", "foo-bar"),
    ],
)
def test_requirement_names_are_normalised(tmp_path, monkeypatch, line, name):
    monkeypatch.setattr(sys.modules[__name__], "REPO_ROOT", tmp_path)
    assert pinned_from(tmp_path, line + "\n") == {name}
