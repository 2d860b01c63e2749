"""``several_writers``: a script whose every rank writes events (issue 36). Real event files from
tensorboard's writer; the second writer of one folder is a second real process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.engine.health import rules
from lab.engine.health.watch import writers
from lab.engine.scalars import ScalarWriter

REPO = Path(__file__).resolve().parent.parent
WRITE = (
    "import sys, time; from lab.engine.scalars import ScalarWriter; "
    "w = ScalarWriter(sys.argv[1]); w.add({'train/loss': 1.0}, 1, time.time()); w.close()"
)


def write(folder: Path, tags: tuple[str, ...] = ("train/loss",)) -> None:
    w = ScalarWriter(folder)
    w.add({t: 1.0 for t in tags}, 1, time.time())
    w.close()


def finding(found: dict):
    return rules.several_writers(rules.Observation(now=0.0, started=0.0, alive=True, writers=found))


@pytest.mark.proc
def test_two_processes_writing_one_folder_are_found(tmp_path):
    since = time.time()
    write(tmp_path / "runs")
    subprocess.run([sys.executable, "-c", WRITE, str(tmp_path / "runs")], cwd=REPO, check=True)
    found = writers({str(tmp_path / "runs"): {"train/loss"}}, since)
    assert list(found) == ["folders"] and len(found["folders"][str(tmp_path / "runs")]) == 2
    message, fix, _ = finding(found)
    assert "2 processes (pids " in message and "merge into one curve" in message
    assert "dist.get_rank() == 0" in fix


def test_the_same_tags_in_two_folders_are_found_and_one_writer_is_not(tmp_path):
    since = time.time()
    write(tmp_path / "rank0", ("train/loss", "train/acc"))
    write(tmp_path / "rank1", ("train/loss",))
    alone = writers({str(tmp_path / "rank0"): {"train/loss", "train/acc"}}, since)
    assert alone == {} and finding(alone) is None
    both = writers(
        {
            str(tmp_path / "rank0"): {"train/loss", "train/acc"},
            str(tmp_path / "rank1"): {"train/loss"},
        },
        since,
    )
    assert both == {"shared": ["train/loss"]}
    assert "1 tag (train/loss) is logged in several folders" in finding(both)[0]


def test_files_from_before_the_launch_are_not_the_run_s(tmp_path):
    write(tmp_path / "runs")
    later = time.time() + 2  # a launch two seconds after the file was made (names: whole seconds)
    assert writers({str(tmp_path / "runs"): {"train/loss"}}, later) == {}
