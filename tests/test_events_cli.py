"""``python -m lab scalars``: the same points as the library, as CSV and JSON; clear errors."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2

from lab import events
from lab.events.tfrecord import frame

pytestmark = pytest.mark.proc

REPO = Path(__file__).resolve().parent.parent


def rec(tag: str, step: int, value: float, wall: float) -> bytes:
    ev = event_pb2.Event(
        wall_time=wall,
        step=step,
        summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]),
    )
    return frame(ev.SerializeToString())


@pytest.fixture
def logdir(tmp_path):
    (tmp_path / "r1" / "tb").mkdir(parents=True)
    (tmp_path / "r1" / "tb" / "events.out.tfevents.1.h").write_bytes(
        b"".join(rec("train/loss", s, 1 / (s + 1), 1_700_000_000.123456 + s / 3) for s in range(30))
        + b"".join(rec("val/acc", s, s / 7, 1_700_000_000.5 + s) for s in range(0, 30, 10))
    )
    (tmp_path / "r2").mkdir()
    (tmp_path / "r2" / "events.out.tfevents.2.h").write_bytes(
        rec("train/loss", 1, float("nan"), 1_700_000_100.0)
        + rec("train/loss", 2, 0.25, 1_700_000_101.0)
    )
    return tmp_path


def cli(*args, module=("-m", "lab")):
    return subprocess.run(
        [sys.executable, *module, *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def library_rows(root, tags=None):
    r = events.LogdirReader(root)
    r.refresh()
    df = events.to_frame(r, tags=tags)
    return [tuple(x) for x in df.itertuples(index=False)]


def same(a, b):
    return a == b or (a != a and b != b)  # NaN equals NaN here


def test_csv_equals_library(logdir):
    p = cli("scalars", str(logdir))
    assert p.returncode == 0, p.stderr
    rows = list(csv.reader(io.StringIO(p.stdout)))
    assert rows[0] == ["run", "tag", "step", "wall_time", "value"]
    got = [(r[0], r[1], int(r[2]), float(r[3]), float(r[4])) for r in rows[1:]]
    want = library_rows(logdir)
    assert len(got) == len(want) == 35
    assert all(g[:4] == w[:4] and same(g[4], w[4]) for g, w in zip(got, want))


def test_json_equals_library_with_tag_filter(logdir):
    p = cli("scalars", str(logdir), "--tags", "^train/", "--format", "json")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    want = library_rows(logdir, tags="^train/")
    assert len(got) == len(want) == 32
    for g, w in zip(got, want):
        assert (g["run"], g["tag"], g["step"], g["wall_time"]) == w[:4]
        assert g["value"] == w[4] or (g["value"] is None and w[4] != w[4])
    assert {g["run"] for g in got} == {"r1/tb", "r2"}


def test_standalone_module_and_errors(logdir, tmp_path):
    p = cli(str(logdir / "r2"), "--format", "json", module=("-m", "lab.events.export"))
    assert p.returncode == 0 and len(json.loads(p.stdout)) == 2
    missing = cli("scalars", str(tmp_path / "nope"))
    assert missing.returncode == 2 and missing.stdout == ""
    assert (
        missing.stderr.count("\n") == 1
        and missing.stderr.startswith("error: ")
        and "does not exist" in missing.stderr
    )
    (tmp_path / "empty").mkdir()
    empty = cli("scalars", str(tmp_path / "empty"))
    assert (
        empty.returncode == 2
        and "no TensorBoard event files" in empty.stderr
        and "Traceback" not in empty.stderr
    )
    bad = cli("scalars", str(logdir), "--tags", "(")
    assert bad.returncode == 2 and "regular expression" in bad.stderr
