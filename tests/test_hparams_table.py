"""lab.views.logs.hparams_table and lab.views.logs.folder on a folder written by the real writers:
torch's and tensorboardX's ``add_hparams``, Keras' hparams summaries with
``train``/``validation`` runs below the session, and a lab run folder (a copy of a
shipped sample run) whose run.json holds its config. Rows, folded runs, final
metrics, the table's columns, and the typed row filter."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from lab.events.hparams import HparamsReader
from lab.runfolder import SAMPLE_RUNS, read_json
from lab.views.logs import hparams_table as hpt
from lab.views.logs.folder import LogFolder
from tests.logs_fixtures import write_events


def _torch(root, run, hp, metrics, loss):
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(root / run)) as w:
        for i, v in enumerate(loss):
            w.add_scalar("train/loss", v, i)
        w.add_hparams(hp, metrics)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    from tensorboard.plugins.hparams import summary_v2
    from tensorboardX import SummaryWriter as XWriter

    root = tmp_path_factory.mktemp("mixed")
    _torch(
        root,
        "torch/run1",
        {"lr": 0.1, "opt": "adam", "layers": 2},
        {"hparam/acc": 0.9},
        [2.0, 1.0, 0.5],
    )
    _torch(
        root,
        "torch/run2",
        {"lr": 0.01, "opt": "adam", "layers": 2},
        {"hparam/acc": 0.7},
        [2.0, 1.5],
    )
    with XWriter(str(root / "tbx" / "run1")) as w:
        w.add_scalar("train/loss", 3.0, 0)
        w.add_hparams({"lr": 0.001, "opt": "sgd", "layers": 4}, {"hparam/acc": 0.5}, name="hp")
    # Keras: the session in keras/run-0, its metrics in run-0/train and run-0/validation, the config
    # at the top.
    session = summary_v2.hparams_pb({"lr": 0.2, "opt": "rmsprop"})
    config = summary_v2.hparams_config_pb(
        hparams=[summary_v2.HParam("lr"), summary_v2.HParam("opt")],
        metrics=[summary_v2.Metric("epoch_accuracy", group="validation")],
    )
    write_events(root / "keras" / "events.out.tfevents.0.k", {}, extra=[config])
    write_events(root / "keras" / "run-0" / "events.out.tfevents.1.k", {}, extra=[session])
    for sub, acc in (("train", [0.5, 0.8]), ("validation", [0.4, 0.75])):
        write_events(
            root / "keras" / "run-0" / sub / "events.out.tfevents.2.k",
            {"epoch_accuracy": (np.arange(2), np.array(acc))},
        )
    sample = sorted(p for p in SAMPLE_RUNS.iterdir() if (p / "run.json").is_file())[0]
    shutil.copytree(sample, root / "lab" / sample.name)
    return root, sample.name


@pytest.fixture
def folder(mixed):
    root, _ = mixed
    f = LogFolder(root, HparamsReader(root))
    f.refresh()
    return f


@pytest.mark.proc
def test_add_hparams_child_folders_fold_into_their_run(folder, mixed):
    _, lab_run = mixed
    names = folder.run_names
    assert "torch/run1" in names and "tbx/run1" in names
    # no extra run per add_hparams
    assert not [n for n in names if n.startswith(("torch/run1/", "tbx/run1/"))]
    assert f"lab/{lab_run}" in names and not [n for n in names if n.endswith(("/tb", "/sys"))]
    assert {"keras/run-0", "keras/run-0/train", "keras/run-0/validation"} <= set(names)
    sc = folder.scalars("torch/run1")
    # the metric add_hparams writes shows with its run
    assert {"train/loss", "hparam/acc"} <= set(sc)


@pytest.mark.proc
def test_rows_hold_the_written_values_and_final_metrics(folder, mixed):
    _, lab_run = mixed
    rows = {r.run: r for r in folder.hp_rows()}
    assert set(rows) == {"torch/run1", "torch/run2", "tbx/run1", "keras/run-0", f"lab/{lab_run}"}
    t1 = rows["torch/run1"]
    assert t1.hparams == {"lr": 0.1, "opt": "adam", "layers": 2} and t1.runs == ("torch/run1",)
    assert t1.metrics["hparam/acc"] == pytest.approx(0.9) and t1.metrics[
        "train/loss"
    ] == pytest.approx(0.5)
    assert rows["tbx/run1"].hparams == {"lr": 0.001, "opt": "sgd", "layers": 4}
    assert rows["tbx/run1"].metrics["hparam/acc"] == pytest.approx(0.5)
    k = rows["keras/run-0"]
    assert k.hparams == {"lr": 0.2, "opt": "rmsprop"}
    assert k.runs == ("keras/run-0", "keras/run-0/train", "keras/run-0/validation")
    # the group's run, its last value
    assert k.metrics["validation/epoch_accuracy"] == pytest.approx(0.75)
    lab = rows[f"lab/{lab_run}"]
    config = read_json(mixed[0] / "lab" / lab_run / "run.json")["config"]
    assert lab.source == hpt.FROM_RUN_JSON and lab.hparams["model"] == config["model"]
    assert lab.hparams["batch_size"] == config["batch_size"] and lab.hparams["lr"] == config["lr"]
    assert "extra_env" not in lab.hparams  # an empty dict is no hyperparameter
    assert lab.metrics["train/loss"] is not None


@pytest.mark.proc
def test_table_columns_order_and_varying_only(folder):
    rows = [r for r in folder.hp_rows() if r.run.startswith(("torch/", "tbx/"))]
    df = hpt.hp_table(rows, folder.hparam_order())
    assert list(df.columns[:4]) == ["run", "lr", "opt", "layers"]  # the experiment's order
    assert list(df["run"]) == ["tbx/run1", "torch/run1", "torch/run2"]
    assert {"hparam/acc", "train/loss"} <= set(df.columns)
    varying = hpt.hp_table(
        [r for r in rows if r.run.startswith("torch/")], folder.hparam_order(), varying_only=True
    )
    # opt and layers are equal
    assert [c for c in varying.columns if c in ("lr", "opt", "layers")] == ["lr"]
    # one row: nothing to compare
    one = hpt.hp_table(rows[:1], folder.hparam_order(), varying_only=True)
    assert list(one.columns[:4]) == ["run", "lr", "opt", "layers"]
    clash = hpt.hp_table([hpt.HpRow("r", ("r",), {"acc": 1}, {"acc": 0.5})])
    assert list(clash.columns) == ["run", "acc", "acc (final)"]


@pytest.mark.proc
def test_row_runs_follow_the_table_as_drawn(folder):
    rows = folder.hp_rows()
    table, _ = hpt.filter_table(hpt.hp_table(rows), "run~keras")
    assert hpt.row_runs(table.reset_index(drop=True), rows) == [
        ("keras/run-0", "keras/run-0/train", "keras/run-0/validation")
    ]
    assert [r.run for r in hpt.rows_for(rows, ["tbx/run1", "nope"])] == ["tbx/run1"]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("", ["a", "b", "c"]),
        ("lr<0.05", ["b", "c"]),
        ("lr >= 0.01, opt=adam", ["a", "b"]),
        ("lr >= 0.01, lr<0.05", ["b"]),
        ("opt != adam", ["c"]),
        ("opt=ADAM", ["a", "b"]),
        ("run~^[ab]$", ["a", "b"]),
        ("acc>0.6", ["a"]),
        ("opt>1", []),  # an order on text matches nothing
    ],
)
def test_filter_table_conditions(text, expected):
    rows = [
        hpt.HpRow("a", ("a",), {"lr": 0.1, "opt": "adam"}, {"acc": 0.9}),
        hpt.HpRow("b", ("b",), {"lr": 0.01, "opt": "adam"}, {"acc": 0.5}),
        hpt.HpRow("c", ("c",), {"lr": 0.001, "opt": "sgd"}, {"acc": None}),
    ]
    got, err = hpt.filter_table(hpt.hp_table(rows), text)
    assert err is None and list(got["run"]) == expected


@pytest.mark.parametrize(
    "text,message",
    [
        ("lrr<1", "No column 'lrr'"),
        ("lr", "is not a condition"),
        ("run~(", "not a valid regular expression"),
    ],
)
def test_filter_table_errors_name_the_fix(text, message):
    df = hpt.hp_table([hpt.HpRow("a", ("a",), {"lr": 0.1})])
    got, err = hpt.filter_table(df, text)
    assert message in err and err.startswith("Table filter:") and len(got) == 0


def test_fold_sessions_needs_a_parent_run():
    groups = {
        "a": ["a"],
        "a/123.4": ["a/123.4"],
        "x/y": ["x/y"],
        "lab1": ["lab1/sys", "lab1/tb"],
        "lab1/tb/hp": ["lab1/tb/hp"],
    }
    folded = hpt.fold_sessions(groups, ["a/123.4", "x/y", "lab1/tb/hp"])
    assert folded == {
        "a": ["a", "a/123.4"],
        "x/y": ["x/y"],
        "lab1": ["lab1/sys", "lab1/tb", "lab1/tb/hp"],
    }
    # Keras: the parent holds only the experiment's config, and the session has runs below it
    keras = {
        "k": ["k"],
        "k/run-0": ["k/run-0"],
        "k/run-0/train": ["k/run-0/train"],
        "j": ["j"],
        "j/s": ["j/s"],
    }
    assert hpt.fold_sessions(keras, ["k/run-0", "j/s"], has_scalars=lambda r: r != "j") == keras


def test_config_hparams_cells():
    assert hpt.config_hparams(
        {"gpus": [0, 1], "tags": [], "extra_env": {"A": "1"}, "x": None, "lr": 0.1}
    ) == {"gpus": "0,1", "extra_env": "A=1", "lr": 0.1}
    assert hpt.last_value(None) is None
