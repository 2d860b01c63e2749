"""lab.events.hparams on files written by the real writers: torch's and tensorboardX's
``add_hparams``, and the summaries Keras' ``hp.hparams`` / ``hp.hparams_config``
write (TensorBoard's own ``summary_v2``, which Keras calls). Incremental reading
(a record cut short is "not yet"), a needle cut in two by the read chunks, files
without hparams never decoded, and a corrupt record as a warning."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from lab.events import hparams
from lab.events.hparams import HparamsReader, Metric
from tests.logs_fixtures import write_events


def _torch(root: Path, run: str, hp: dict, metrics: dict, run_name: str | None = None) -> None:
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(root / run)) as w:
        w.add_scalar("train/loss", 1.0, 0)
        w.add_hparams(hp, metrics, run_name=run_name)


def _keras_summaries(hp: dict):
    # What Keras' hp.hparams and hp.hparams_config write: TensorBoard's summary_v2 protos.
    from tensorboard.plugins.hparams import summary_v2

    session = summary_v2.hparams_pb(hp, trial_id="t0")
    config = summary_v2.hparams_config_pb(
        hparams=[
            summary_v2.HParam("units"),
            summary_v2.HParam("optimizer"),
            summary_v2.HParam("dropout"),
        ],
        metrics=[summary_v2.Metric("epoch_accuracy", group="validation")],
    )
    return session, config


def test_torch_add_hparams(tmp_path):
    _torch(
        tmp_path,
        "exp/run1",
        {"lr": 0.1, "bs": 32, "opt": "adam", "bn": True, "gone": None},
        {"hparam/acc": 0.9},
    )
    r = HparamsReader(tmp_path)
    assert r.refresh() == 2  # the experiment and the session (the end info carries nothing shown)
    sessions = r.sessions()
    [(run, session)] = sessions.items()
    parent, _, child = run.rpartition("/")
    assert parent == "exp/run1" and float(child) > 0  # torch writes into <run>/<time.time()>
    # torch stores bool as 1, drops None
    assert session.hparams == {"lr": 0.1, "bs": 32, "opt": "adam", "bn": 1}
    assert r.hparam_names() == ["lr", "bs", "opt", "bn"]
    assert r.metrics() == [Metric("hparam/acc")]
    assert r.refresh() == 0 and not r.warnings


def test_tensorboardx_add_hparams(tmp_path):
    from tensorboardX import SummaryWriter

    with SummaryWriter(str(tmp_path / "tbx")) as w:
        w.add_scalar("train/loss", 1.0, 0)
        w.add_hparams({"lr": 0.01, "bs": 64, "opt": "sgd"}, {"hparam/acc": 0.8}, name="hp")
    r = HparamsReader(tmp_path)
    r.refresh()
    assert {k: v.hparams for k, v in r.sessions().items()} == {
        "tbx/hp": {"lr": 0.01, "bs": 64, "opt": "sgd"}
    }
    assert r.metrics() == [Metric("hparam/acc")]


def test_keras_hparams_and_config(tmp_path):
    session, config = _keras_summaries(
        {"units": 16, "optimizer": "adam", "dropout": 0.1, "bn": True}
    )
    write_events(tmp_path / "run-0" / "events.out.tfevents.1.keras", {}, extra=[session])
    write_events(tmp_path / "events.out.tfevents.0.keras", {}, extra=[config])
    r = HparamsReader(tmp_path)
    r.refresh()
    assert r.sessions()["run-0"].hparams == {
        "bn": True,
        "dropout": 0.1,
        "optimizer": "adam",
        "units": 16,
    }
    assert r.sessions()["run-0"].start_time > 0
    assert r.metrics() == [Metric("epoch_accuracy", "validation")]
    assert Metric("epoch_accuracy", "validation").label == "validation/epoch_accuracy"
    assert r.hparam_names() == ["units", "optimizer", "dropout"]


def test_new_sessions_appear_on_refresh_and_a_cut_record_waits(tmp_path):
    _torch(tmp_path, "a", {"lr": 0.1}, {"m": 1.0}, run_name="hp")
    r = HparamsReader(tmp_path)
    r.refresh()
    assert list(r.sessions()) == ["a/hp"]
    session, _ = _keras_summaries({"units": 8, "optimizer": "sgd", "dropout": 0.0})
    write_events(tmp_path / "b" / "events.out.tfevents.2.x", {}, extra=[session])
    path = tmp_path / "b" / "events.out.tfevents.2.x"
    whole = path.read_bytes()
    path.write_bytes(whole[:-1])  # a writer mid-flush
    assert r.refresh() == 0 and "b" not in r.sessions() and not r.warnings
    path.write_bytes(whole)
    assert r.refresh() == 1
    assert r.sessions()["b"].hparams["units"] == 8


def test_needle_cut_by_the_read_chunk_is_found(tmp_path, monkeypatch):
    steps = np.arange(300)
    session, _ = _keras_summaries({"units": 4, "optimizer": "adam", "dropout": 0.5})
    path = tmp_path / "r" / "events.out.tfevents.1.x"
    write_events(path, {"train/loss": (steps, steps * 0.5)})
    with open(path, "ab") as f:  # the session comes after 300 points, as a late writer's would
        from tensorboard.compat.proto.event_pb2 import Event

        from lab.events.tfrecord import frame

        f.write(frame(Event(wall_time=1.0, summary=session).SerializeToString()))
    data = path.read_bytes()
    at = data.find(hparams.NEEDLE)
    monkeypatch.setattr(hparams, "CHUNK", at + 4)  # the first chunk ends inside the needle
    r = HparamsReader(tmp_path)
    assert r.refresh() == 1 and r.sessions()["r"].hparams["units"] == 4


def test_files_without_hparams_are_never_decoded(tmp_path, monkeypatch):
    write_events(
        tmp_path / "plain" / "events.out.tfevents.1.x",
        {"train/loss": (np.arange(500), np.ones(500))},
    )

    def refuse(payload):
        raise AssertionError("a record without the hparams plugin was decoded")

    monkeypatch.setattr("lab.events.protobuf.parse_event", refuse)
    r = HparamsReader(tmp_path)
    assert r.refresh() == 0 and r.sessions() == {} and not r.warnings


def test_corrupt_hparams_record_is_a_warning(tmp_path):
    _torch(tmp_path, "a", {"lr": 0.1}, {"m": 1.0}, run_name="hp")
    [path] = [p for p in (tmp_path / "a" / "hp").iterdir()]
    data = bytearray(path.read_bytes())
    at = data.find(hparams.NEEDLE)
    # inside the first hparams record (the experiment): its CRC no longer matches
    data[at + 3] ^= 0xFF
    path.write_bytes(bytes(data))
    r = HparamsReader(tmp_path)
    r.refresh()
    assert any("bad CRC" in w for w in r.warnings), r.warnings
    assert r.metrics() == []  # the damaged experiment record is skipped...
    assert r.sessions()["a/hp"].hparams == {"lr": 0.1}  # ...the records after it are still read


def test_missing_root_and_deleted_files_do_not_raise(tmp_path):
    r = HparamsReader(tmp_path / "nope")
    assert r.refresh() == 0 and r.sessions() == {}
    _torch(tmp_path, "a", {"lr": 0.1}, {"m": 1.0}, run_name="hp")
    r = HparamsReader(tmp_path)
    r.refresh()
    for p in (tmp_path / "a" / "hp").iterdir():
        os.remove(p)
    assert r.refresh() == 0 and r.sessions()["a/hp"].hparams == {"lr": 0.1}  # what was read stays


@pytest.mark.parametrize(
    "value,expected",
    [
        ({"number_value": 3.0}, 3),
        ({"number_value": 0.25}, 0.25),
        ({"string_value": "x"}, "x"),
        ({"bool_value": False}, False),
        ({}, None),
    ],
)
def test_plain_value(value, expected):
    from google.protobuf import struct_pb2

    v = struct_pb2.Value(**value)
    got = hparams.plain_value(v)
    assert got == expected and type(got) is type(expected)
