"""lab.views.runscalars: a run folder's tb/ and sys/ as one run, on real event files written by
torch's SummaryWriter and the supervisor's own writer, read back through lab.events the way every
page reads them."""

from __future__ import annotations

import numpy as np

from lab.engine.scalars import ScalarWriter
from lab.events import LogdirReader
from lab.views import runscalars

WALL0 = 1_700_000_000.0


def _tb(dir_, points: dict[str, list[float]]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(dir_))
    for tag, vals in points.items():
        for i, v in enumerate(vals):
            w.add_scalar(tag, v, global_step=i * 5, walltime=WALL0 + i)
    w.close()


def _sys(dir_, n: int) -> None:
    w = ScalarWriter(dir_)
    for i in range(n):
        w.add({"sys/cpu_pct": 50.0 + i, "sys/rss_mib": 300.0}, i, WALL0 + 0.5 * i)
    w.close()


def test_group_parts_joins_tb_and_sys_of_a_run_folder(tmp_path):
    _tb(tmp_path / "r1" / "tb", {"train/loss": [1.0, 0.5]})
    _sys(tmp_path / "r1" / "sys", 3)
    _tb(tmp_path / "other", {"x": [1.0]})
    _tb(tmp_path / "deep" / "r2" / "tb", {"train/loss": [2.0]})
    reader = LogdirReader(str(tmp_path))
    reader.refresh()
    groups = runscalars.group_parts(reader.run_names())
    assert groups == {"deep/r2": ["deep/r2/tb"], "other": ["other"], "r1": ["r1/sys", "r1/tb"]}
    merged = runscalars.merge_parts(reader.scalars(p) for p in groups["r1"])
    assert (
        set(merged) == {"train/loss", "sys/cpu_pct", "sys/rss_mib"}
        and len(merged["sys/cpu_pct"].value) == 3
    )
    # a reader over one run folder
    assert runscalars.group_parts(["tb", "sys"]) == {".": ["sys", "tb"]}
    assert (
        runscalars.run_folder_of("a\\b\\sys") == "a/b"
        and runscalars.run_folder_of("a/tbx") == "a/tbx"
    )


def test_run_scalars_reads_incrementally_and_split_sys_takes_the_samples_apart(tmp_path):
    run = tmp_path / "run"
    _tb(run / "tb", {"train/loss": [3.0, 2.0], "val/acc": [0.5]})
    reader = LogdirReader(str(run))
    first = runscalars.run_scalars(reader)
    assert set(first) == {"train/loss", "val/acc"}
    _sys(run / "sys", 4)  # the supervisor's samples appear later: the next call sees them
    train, sysd = runscalars.split_sys(runscalars.run_scalars(reader))
    assert set(train) == {"train/loss", "val/acc"} and set(sysd) == {"sys/cpu_pct", "sys/rss_mib"}
    np.testing.assert_allclose(train["train/loss"].value, [3.0, 2.0])
    np.testing.assert_allclose(sysd["sys/cpu_pct"].value, [50.0, 51.0, 52.0, 53.0])


def test_merge_parts_first_part_wins_a_clash():
    assert runscalars.merge_parts([{"a": 1, "b": 2}, {"b": 3, "c": 4}]) == {"a": 1, "b": 2, "c": 4}
