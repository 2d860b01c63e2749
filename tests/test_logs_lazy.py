"""The Logs page's folder at scale: the run list is found again by looking only at folders that
changed (the same answer as ``lab.events.discover``), and a large folder reads a run's points only
when they are asked for, its hyperparameters only when the user asks for every run."""

from __future__ import annotations

import numpy as np
import pytest

from lab.events import discover
from lab.events.hparams import HparamsReader
from lab.views.logs import folder as folder_mod
from lab.views.logs.folder import LogFolder
from lab.views.logs.listing import RunListing
from tests.logs_fixtures import TAGS, make_experiments, write_events


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_EVENTS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("lab.runfolder.SETTLED_NS", 0)  # the files here were just written
    monkeypatch.setattr("lab.views.logs.listing.SETTLED_NS", 0)
    make_experiments(tmp_path / "logs", experiments=1, points=20, hparams=True)
    return tmp_path / "logs"


def test_the_listing_finds_what_discover_finds_and_looks_again_only_where_changed(root):
    listing = RunListing(root)
    assert listing.runs() == discover(root) and listing.listed > 30
    assert listing.runs() == discover(root) and listing.listed == 0
    write_events(root / "exp0" / "new" / "events.out.tfevents.9.gen", {"a": (np.arange(2),) * 2})
    found = listing.runs()
    assert found == discover(root) and "exp0/new" in found
    assert listing.listed == 2  # exp0 (a new entry) and the new folder; nothing else


@pytest.mark.proc
def test_a_large_folder_reads_only_the_runs_asked_for(root, monkeypatch):
    monkeypatch.setattr(folder_mod, "EAGER_RUNS", 10)
    f = LogFolder(root, HparamsReader(root))
    f.refresh()
    # add_hparams' child folders are folded into their runs: the hyperparameters are read even
    # when lazy (a byte search a file, no decoding), the scalars are not
    assert f.lazy and len(f.run_names) == 30
    assert all(not f._known_scalars(r) for r in f.run_names)  # nothing read yet
    first = f.run_names[0]
    assert set(TAGS) <= set(f.scalars(first))
    read = [r for r in f.run_names if f._known_scalars(r)]
    assert read == [first]
    rows = {r.run: r for r in f.hp_rows()}
    assert len(rows) == 30 and all(r.hparams for r in rows.values())
    # the final metrics of a run come with its scalars: only the run read has them so far
    assert [r for r in rows.values() if r.metrics.get("hparam/final_acc") is not None] == [
        rows[first]
    ]
    f.read_everything()
    assert not f.lazy and all(f._known_scalars(r) for r in f.run_names)
    rows = {r.run: r for r in f.hp_rows()}
    assert len(rows) == 30 and all(
        r.metrics.get("hparam/final_acc") is not None for r in rows.values()
    )


@pytest.mark.proc
def test_a_small_folder_is_read_whole(root):
    f = LogFolder(root, HparamsReader(root))
    f.refresh()
    assert not f.lazy and all(f._known_scalars(r) for r in f.run_names)
    assert len(f.run_names) == 30  # add_hparams' child folders folded into their runs
