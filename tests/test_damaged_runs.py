"""Damaged run files: a run folder whose status.json, run.json, summary.json or progress.json is
empty or truncated to half is listed as ``unreadable`` with the file named (lab/runfolder.py
``damaged_files``, lab/engine/registry.py), and ``lab status``, ``lab compare`` (``lab.cli.main``
in this process) and every page (AppTest) show it and exit 0 / raise nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lab.engine import registry
from lab.runfolder import RUN_FILES, SAMPLE_RUNS, UNREADABLE, damaged_files
from tests.helpers.cli import lab_in_process

REPO = Path(__file__).resolve().parent.parent
PAGES = ["pages/1_Launch.py", "pages/2_Live.py", "pages/3_Compare.py", "pages/4_Logs.py"]
SAMPLE = sorted(p for p in SAMPLE_RUNS.iterdir() if p.is_dir() and "single" in p.name)[0]


def _damage(runs_dir: Path, name: str, how: str) -> str:
    """A copy of a real recorded run and a whole one, with ``name`` cut to ``how``."""
    good = shutil.copytree(SAMPLE, runs_dir / "good-run")
    bad = shutil.copytree(SAMPLE, runs_dir / "bad-run")
    assert good and damaged_files(good) == []
    data = (bad / name).read_bytes()
    (bad / name).write_bytes(b"" if how == "zero" else data[: len(data) // 2])
    return bad.name


@pytest.mark.parametrize("how", ["zero", "half"])
@pytest.mark.parametrize("name", RUN_FILES)
def test_registry_and_cli_list_the_run_unreadable_naming_the_file(runs_dir, name, how, capsys):
    run_id = _damage(runs_dir, name, how)
    rec = registry.get_run(run_id, runs_dir)
    assert rec.state == UNREADABLE and rec.unreadable == [name]
    assert registry.get_run("good-run", runs_dir).state == "succeeded"
    out = lab_in_process(capsys, "status")
    assert out.returncode == 0, out.stderr
    # (the sample's copies carry its sweep id: listed under it, indented)
    line = next(ln for ln in out.stdout.splitlines() if ln.split()[:1] == [run_id])
    assert UNREADABLE in line and name in line
    js = lab_in_process(capsys, "status", run_id, "--json")
    assert js.returncode == 0 and f'"{name}"' in js.stdout
    cmp = lab_in_process(capsys, "compare", "good-run", run_id)
    assert cmp.returncode == 0, cmp.stderr
    assert "Traceback" not in cmp.stderr


def test_a_folder_of_only_damaged_files_is_still_listed(runs_dir):
    d = runs_dir / "only-bad"
    d.mkdir()
    (d / "run.json").write_text('{"config": {"mo')
    rec = registry.get_run("only-bad", runs_dir)
    assert rec.state == UNREADABLE and rec.unreadable == ["run.json"]


@pytest.mark.parametrize("name", RUN_FILES)
def test_every_page_renders_with_a_damaged_run(runs_dir, name):
    run_id = _damage(runs_dir, name, "half")
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=30)
    at.run()
    assert not at.exception, at.exception
    shown = " ".join(str(getattr(e, "value", "")) for e in at.main)
    assert UNREADABLE in shown or any(UNREADABLE in str(df.value) for df in at.dataframe)
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
    assert run_id
