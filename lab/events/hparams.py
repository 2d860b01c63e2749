"""Hyperparameters in event files: TensorBoard's ``hparams`` plugin records, read incrementally.

Owns reading what ``SummaryWriter.add_hparams`` (torch and tensorboardX) and
Keras' ``hp.hparams`` / ``hp.hparams_config`` write: summaries whose
metadata names the ``hparams`` plugin and whose content is an
``HParamsPluginData`` (``session_start_info.hparams``: the values of one
session; ``experiment``: the hyperparameter names in order and the metric
tags). ``HparamsReader(root)`` finds them under a log directory: a session
belongs to the run (folder, relative to the root, ``"."`` for the root) whose
event file holds it. Those records are rare and small, so a file is searched
as raw bytes for the plugin's name first and only records that contain it
are framed, checked and decoded with TensorBoard's protos; each refresh reads
only the bytes appended since the last one. Nothing here raises on a bad
file: problems are lines in ``.warnings``.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lab.events import tfrecord
from lab.events.reader import MAX_WARNINGS, discover, is_event_file

log = logging.getLogger(__name__)

PLUGIN = "hparams"
# PluginData.plugin_name (field 1, length 7) as it appears in every hparams
# record: a cheap byte search rules out the files (nearly all) without one.
NEEDLE = b"\x0a\x07" + PLUGIN.encode()
CHUNK = 4 << 20


@dataclass(frozen=True)
class Metric:
    """A metric of an experiment: ``tag`` in the session's run, or in its ``group`` sub-run (Keras:
    ``validation``)."""

    tag: str
    group: str = ""

    @property
    def label(self) -> str:
        return f"{self.group}/{self.tag}" if self.group else self.tag


@dataclass
class Session:
    """One run's hyperparameters (name -> float, int, str, bool or None), in the order written."""

    run: str
    hparams: dict[str, Any] = field(default_factory=dict)
    start_time: float = 0.0


@dataclass
class _File:
    searched: int = 0  # bytes known to hold no hparams record not yet decoded
    boundary: int = 0  # record boundary up to which records were framed


def plain_value(v: Any) -> Any:
    """A ``google.protobuf.Value`` as Python: numbers (whole ones as int), text, bool, None."""
    kind = v.WhichOneof("kind")
    if kind == "number_value":
        x = float(v.number_value)
        return int(x) if x.is_integer() and abs(x) < 2**53 else x
    if kind == "string_value":
        return v.string_value
    if kind == "bool_value":
        return bool(v.bool_value)
    if kind in ("list_value", "struct_value"):
        from google.protobuf.json_format import MessageToJson

        return MessageToJson(v, indent=None)
    return None


class HparamsReader:
    """The hparams sessions and experiments of every run below ``root``; ``refresh()`` reads what is
    new."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = str(root)
        self.warnings: list[str] = []
        self._files: dict[str, _File] = {}
        self._sessions: dict[str, Session] = {}
        self._hparam_names: list[str] = []
        self._metrics: list[Metric] = []
        self._lock = threading.RLock()

    def refresh(self) -> int:
        """Read the bytes appended since the last call; the number of hparams records decoded."""
        with self._lock:
            try:
                return self._refresh()
            except Exception as exc:  # the page keeps what it has
                log.exception("reading hparams under %s", self.root)
                self._warn(
                    f"{self.root}: unexpected error while reading hyperparameters ({exc}); will "
                    "retry"
                )
                return 0

    def sessions(self) -> dict[str, Session]:
        """Run -> its session (a copy); several sessions in one run merge, the later value
        winning."""
        with self._lock:
            return {
                r: Session(s.run, dict(s.hparams), s.start_time)
                for r, s in sorted(self._sessions.items())
            }

    def hparam_names(self) -> list[str]:
        """Hyperparameter names in the order experiments declare them."""
        with self._lock:
            return list(self._hparam_names)

    def metrics(self) -> list[Metric]:
        """The metrics every experiment under the root declares, in order, without repeats."""
        with self._lock:
            return list(self._metrics)

    def _warn(self, msg: str) -> None:
        log.info("%s", msg)
        self.warnings.append(msg)
        del self.warnings[:-MAX_WARNINGS]

    def _refresh(self) -> int:
        found = 0
        for run in discover(self.root):
            folder = os.path.normpath(os.path.join(self.root, run))
            try:
                names = sorted(
                    e.name for e in os.scandir(folder) if is_event_file(e.name) and e.is_file()
                )
            except OSError:
                continue  # vanished between the walk and the listing: the next refresh knows
            for name in names:
                path = os.path.join(folder, name)
                state = self._files.setdefault(path, _File())
                found += self._read_file(run, path, state)
        return found

    def _read_file(self, run: str, path: str, state: _File) -> int:
        try:
            size = os.path.getsize(path)
            if size <= state.searched:
                return 0
            with open(path, "rb") as fh:
                return self._search(run, path, fh, size, state)
        except OSError as exc:
            self._warn(f"{path}: cannot read ({exc.strerror or exc}); will retry")
            return 0

    def _search(self, run: str, path: str, fh, size: int, state: _File) -> int:
        found = 0
        while state.searched < size:
            # Overlap the previous chunk so a needle cut in two is still found.
            start = max(state.boundary, state.searched - len(NEEDLE) + 1)
            fh.seek(start)
            data = fh.read(CHUNK)
            if not data:
                break
            at = data.find(NEEDLE)
            if at < 0:
                state.searched = start + len(data)
                continue
            found += self._frame_through(run, path, fh, state, start + at)
            if state.boundary <= start + at:
                break  # that record is still being written: the next refresh reads it
        return found

    def _frame_through(self, run: str, path: str, fh, state: _File, target: int) -> int:
        """Frame records from the last boundary until the one holding byte ``target``; decode those
        with the needle."""
        found, size = 0, CHUNK
        while state.boundary <= target:
            fh.seek(state.boundary)
            data = fh.read(size)
            if not data:
                break
            sc = tfrecord.scan(data)
            if sc.bad_payloads:
                self._warn(
                    f"{path}: skipped {sc.bad_payloads} record(s) with a bad CRC while looking "
                    "for hyperparameters"
                )
            for at, skipped in sc.skipped:
                self._warn(
                    f"{path}: length CRC mismatch at byte {state.boundary + at}; skipped "
                    f"{skipped} bytes while looking for hyperparameters"
                )
            found += self._decode_hits(run, data, sc)
            state.boundary += sc.consumed
            if len(data) < size:
                break  # the end of the file, maybe inside a record still being written
            # A record larger than the chunk: read it whole next.
            size = CHUNK if sc.consumed else int.from_bytes(data[:8], "little") + 16
        state.searched = max(state.searched, state.boundary)
        return found

    def _decode_hits(self, run: str, data: bytes, sc: tfrecord.Scan) -> int:
        hits = _needles(data)
        rec = np.searchsorted(sc.ends, hits, side="right")  # the first record ending after each hit
        holding = {int(k) for k, h in zip(rec, hits) if k < len(sc.starts) and sc.starts[k] <= h}
        return sum(
            self._decode_record(run, bytes(data[sc.starts[i] : sc.ends[i]]))
            for i in sorted(holding)
        )

    def _decode_record(self, run: str, payload: bytes) -> int:
        from google.protobuf.message import DecodeError
        from tensorboard.plugins.hparams import plugin_data_pb2

        from lab.events.protobuf import parse_event

        ev = parse_event(payload)
        if ev is None or not ev.HasField("summary"):
            return 0
        found = 0
        for value in ev.summary.value:
            if value.metadata.plugin_data.plugin_name != PLUGIN:
                continue
            try:
                data = plugin_data_pb2.HParamsPluginData.FromString(
                    value.metadata.plugin_data.content
                )
            except (DecodeError, ValueError):
                self._warn(
                    f"{run}: an hparams record that cannot be decoded ({value.tag}); skipped"
                )
                continue
            found += self._take(run, data)
        return found

    def _take(self, run: str, data: Any) -> int:
        if data.HasField("session_start_info"):
            info = data.session_start_info
            session = self._sessions.setdefault(run, Session(run))
            session.hparams.update({k: plain_value(v) for k, v in sorted(info.hparams.items())})
            session.start_time = info.start_time_secs or session.start_time
            return 1
        if data.HasField("experiment"):
            for h in data.experiment.hparam_infos:
                if h.name not in self._hparam_names:
                    self._hparam_names.append(h.name)
            for m in data.experiment.metric_infos:
                metric = Metric(m.name.tag, m.name.group)
                if metric not in self._metrics:
                    self._metrics.append(metric)
            return 1
        return 0  # session_end_info: nothing the table shows


def _needles(data: bytes) -> np.ndarray:
    """Offsets of every occurrence of ``NEEDLE`` in ``data``."""
    out = []
    at = data.find(NEEDLE)
    while at >= 0:
        out.append(at)
        at = data.find(NEEDLE, at + 1)
    return np.array(out, dtype=np.int64)
