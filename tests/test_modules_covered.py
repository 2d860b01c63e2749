"""Every module of lab/, training/ and ui/ has a test file: one named after it, or one its docstring
names (and that exists)."""

from __future__ import annotations

import ast
import re

import pytest

from lab.runfolder import REPO_ROOT

MODULES = [
    p
    for d in ("lab", "lab/events", "lab/engine", "lab/views", "ui", "training")
    for p in sorted((REPO_ROOT / d).glob("*.py"))
    if p.name not in ("__init__.py", "__main__.py")
]


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_module_names_its_tests(module):
    if (REPO_ROOT / "tests" / f"test_{module.stem}.py").is_file():
        return
    doc = ast.get_docstring(ast.parse(module.read_text())) or ""
    named = re.findall(r"tests/(test_\w+\.py)", doc)
    assert named, (
        f'{module.name}: name the test file that covers it in its docstring ("Tested by '
        'tests/test_x.py")'
    )
    missing = [n for n in named if not (REPO_ROOT / "tests" / n).is_file()]
    assert not missing, f"{module.name} names test files that do not exist: {missing}"
