"""lab.views.logs.browse on real event files written by torch's SummaryWriter: folder
resolution and its messages, the tag regex, x axes, smoothing and the CSV.
The charts built from them are tested in tests/test_scalar_chart.py."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from lab.views.logs import browse

WALL0 = 1_700_000_000.0


def _write(dir_, points: dict[str, list[float]], wall0: float = WALL0, dt: float = 2.0):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(dir_))
    for tag, vals in points.items():
        for i, v in enumerate(vals):
            w.add_scalar(tag, v, global_step=i * 5, walltime=wall0 + i * dt)
    w.close()


@pytest.fixture
def logdir(tmp_path):
    root = tmp_path / "logs"
    _write(root / "a", {"train/loss": [3.0, 2.0, 1.0, 0.5], "train/acc": [0.1, 0.4, 0.7, 0.9]})
    _write(
        root / "nested" / "b", {"train/loss": [2.5, 1.5, 0.7], "val/loss": [2.0]}, wall0=WALL0 + 100
    )
    return root


def _scalars(root):
    from lab.events import LogdirReader

    r = LogdirReader(str(root))
    r.refresh()
    return {n: dict(r.scalars(n)) for n in r.run_names()}


def test_resolve_logdir_messages(tmp_path, logdir):
    assert "Type the path" in browse.resolve_logdir("  ").error
    missing = browse.resolve_logdir(str(tmp_path / "nope"))
    assert missing.path == tmp_path / "nope" and "does not exist" in missing.error
    f = tmp_path / "file.txt"
    f.write_text("x")
    assert "is a file, not a folder" in browse.resolve_logdir(str(f)).error
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    assert "No TensorBoard event files" in browse.resolve_logdir(str(empty)).error
    ok = browse.resolve_logdir("logs", base=tmp_path)  # relative to base, quotes stripped too
    assert ok.ok and ok.path == logdir.resolve()
    assert browse.resolve_logdir(f'"{logdir}"').ok


def test_resolve_logdir_expands_home(tmp_path, logdir, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    r = browse.resolve_logdir("~/logs")
    assert r.ok and r.path == logdir.resolve()


def test_filter_tags_regex_and_bad_regex():
    tags = ["train/loss", "val/loss", "train/acc", "sys/cpu_pct"]
    # loss and accuracy first, as a user looks at them first
    assert browse.filter_tags(tags, "") == (
        ["train/loss", "val/loss", "train/acc", "sys/cpu_pct"],
        None,
    )
    assert browse.filter_tags(tags, "loss$")[0] == ["train/loss", "val/loss"]
    assert browse.filter_tags(tags, "^sys/")[0] == ["sys/cpu_pct"]
    got, err = browse.filter_tags(tags, "train/(loss")
    assert got == [] and "not a valid regular expression" in err and "position 6" in err


def test_x_values_on_real_series(logdir):
    s = _scalars(logdir)["a"]["train/loss"]
    np.testing.assert_array_equal(browse.x_values(s, "step"), [0, 5, 10, 15])
    np.testing.assert_allclose(browse.x_values(s, "relative"), [0, 2, 4, 6])
    np.testing.assert_allclose(browse.x_values(s, "wall"), (WALL0 + np.arange(4) * 2) * 1000)
    with pytest.raises(ValueError, match="use one of step, relative, wall"):
        browse.x_values(s, "epoch")


def test_scalars_csv_holds_every_selected_point(logdir):
    sc = _scalars(logdir)
    data = browse.scalars_csv(sc, ["a", "nested/b"], ["train/loss"])
    df = pd.read_csv(io.BytesIO(data))
    assert list(df.columns) == browse.CSV_COLUMNS
    assert len(df) == 7 and set(df["run"]) == {"a", "nested/b"} and set(df["tag"]) == {"train/loss"}
    a = df[df.run == "a"]
    np.testing.assert_allclose(a["value"], [3.0, 2.0, 1.0, 0.5])
    np.testing.assert_allclose(a["wall_time"], WALL0 + np.arange(4) * 2)
    smoothed = pd.read_csv(io.BytesIO(browse.scalars_csv(sc, ["a"], ["train/loss"], weight=0.5)))
    assert "smoothed" in smoothed.columns and smoothed["smoothed"].iloc[0] == pytest.approx(3.0)
    empty = pd.read_csv(io.BytesIO(browse.scalars_csv(sc, ["a"], ["nope"])))
    assert len(empty) == 0 and list(empty.columns) == browse.CSV_COLUMNS


def test_folder_choices(tmp_path):
    runs, samples = tmp_path / "runs", tmp_path / "samples"
    runs.mkdir()
    samples.mkdir()
    # empty runs folder is not offered
    assert list(browse.folder_choices(runs, samples).values()) == [samples]
    (runs / "x").mkdir()
    assert list(browse.folder_choices(runs, samples).values()) == [runs, samples]


def test_smooth_is_tensorboards_debiased_ema(logdir):
    s = _scalars(logdir)["a"]["train/loss"]
    # reference: TensorBoard's vz_line_chart smoothing, written out by hand
    last, out = 0.0, []
    for i, v in enumerate([3.0, 2.0, 1.0, 0.5], start=1):
        last = last * 0.6 + 0.4 * v
        out.append(last / (1 - 0.6**i))
    np.testing.assert_allclose(browse.smooth(s.value, 0.6), out, rtol=1e-6)
    np.testing.assert_array_equal(browse.smooth(s.value, 0.0), [3.0, 2.0, 1.0, 0.5])


def test_order_tags_puts_loss_and_accuracy_first():
    tags = [
        "mem/cpu0/peak_mib",
        "zeta",
        "perf/samples_per_sec",
        "val/acc",
        "train/lr",
        "train/loss",
        "sys/cpu_pct",
    ]
    assert browse.order_tags(tags) == [
        "train/loss",
        "val/acc",
        "train/lr",
        "perf/samples_per_sec",
        "sys/cpu_pct",
        "mem/cpu0/peak_mib",
        "zeta",
    ]
