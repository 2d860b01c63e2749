"""One event file read incrementally: offsets, truncation and read errors.

Owns what TensorBoard's ``event_file_loader.py`` owns: ``EventFileLoader``
keeps the byte offset of one file, and each ``load()`` yields only the
scalar points appended since the last call. A record cut short at the end
(a writer mid-flush) is "not yet", never an error: reading resumes at its
first byte next time. Problems are classified and reported once each through
``on_warning``: a deleted file is final (``state == "deleted"``), a damaged
length (its CRC fails) skips the bytes up to the next record that verifies
(the warning says how many), other I/O errors are retried on the next load,
and a bad payload CRC or a record that is not an Event skips that record only. Framing lives in
``lab.events.tfrecord``, decoding in ``lab.events.decode`` (with
``lab.events.protobuf`` as its fallback).
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Iterator

from lab.events import decode, points, tfrecord

log = logging.getLogger(__name__)

# Bytes read and decoded at once: small enough that the column passes over a
# batch stay in the CPU cache, and memory stays bounded on a multi-GB file.
CHUNK = 4 << 20

READING, DELETED = "reading", "deleted"
MAX_NOTES = 50


class EventFileLoader:
    """Reads one event file from where the previous ``load()`` stopped.

    ``plugins`` (tag -> plugin name) is shared by every file of a run,
    since writers send a tag's metadata only with its first value.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        on_warning: Callable[[str], None] | None = None,
        plugins: dict[str, str] | None = None,
    ) -> None:
        self.path = str(path)
        self._warn = on_warning or (lambda msg: log.info("%s", msg))
        self._plugins = {} if plugins is None else plugins
        self._offset = 0
        self._state = READING
        self._last_error: str | None = None
        self._warned_size = False
        self.notes: list[str] = []  # warnings about the bytes read (kept by the cache)

    def resume(self, offset: int, notes: list[str]) -> None:
        """Go on at ``offset`` (restored from the cache), repeating what its bytes warned."""
        self._offset = offset
        for msg in notes:
            self._note(msg)

    def _note(self, msg: str) -> None:
        self.notes.append(msg)
        del self.notes[:-MAX_NOTES]
        self._warn(msg)

    @property
    def offset(self) -> int:
        """Bytes consumed so far: every complete record before it has been yielded."""
        return self._offset

    @property
    def state(self) -> str:
        """``"reading"``, or final: ``"deleted"``."""
        return self._state

    def peek_small(self, limit: int) -> bytes | None:
        """The bytes after the offset when they are at most ``limit`` (``lab.events.many``).

        ``b""``: nothing new, and nothing to say about it. None for anything else (more
        bytes, an empty or shrunk file, an error): ``load()`` then reads the file its usual
        way and says what is wrong. Reads without moving the offset.
        """
        if self._state != READING:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return None
        try:
            data = os.pread(fd, limit + 1, self._offset)
            if not data and (self._offset == 0 or os.fstat(fd).st_size < self._offset):
                return None
        except OSError:
            return None
        finally:
            os.close(fd)
        return data if len(data) <= limit else None

    def advance(self, consumed: int) -> None:
        """``consumed`` bytes after the offset were read (cleanly) by ``lab.events.many``."""
        self._offset += consumed
        self._last_error = None

    def load(self) -> Iterator[points.Points]:
        """Points of the records appended since the last call, one batch per chunk read."""
        if self._state != READING:
            return
        try:
            fh = open(self.path, "rb")
        except FileNotFoundError:
            self._state = DELETED
            self._warn(f"{self.path}: file deleted; keeping the {self._offset} bytes read before")
            return
        except OSError as exc:
            self._io_error(exc)
            return
        with fh:
            yield from self._chunks(fh)

    def _chunks(self, fh) -> Iterator[points.Points]:
        size = CHUNK
        while True:
            try:
                fh.seek(self._offset)
                data = fh.read(size)
            except OSError as exc:
                self._io_error(exc)
                return
            self._last_error = None
            if not data:
                self._check_size(fh)
                return
            sc = tfrecord.scan(data)
            pts = self._decode(data, sc) if len(sc.starts) else None
            if pts is not None and pts.undecodable:
                self._note(
                    f"{self.path}: skipped {pts.undecodable} record(s) that are not valid events"
                )
            if sc.bad_payloads:
                self._note(f"{self.path}: skipped {sc.bad_payloads} record(s) with a bad CRC")
            for at, skipped in sc.skipped:
                self._note(
                    f"{self.path}: length CRC mismatch at byte {self._offset + at}; "
                    f"skipped {skipped} bytes to the next record that verifies"
                )
            self._offset += sc.consumed
            if pts is not None:
                yield pts
            if len(data) < size:
                return  # end of file, maybe inside a record still being written
            # One record larger than the chunk: read it whole next.
            size = int.from_bytes(data[:8], "little") + 16 if sc.consumed == 0 else CHUNK

    def _check_size(self, fh) -> None:
        """Nothing new: say once if the file is empty or was rewritten shorter."""
        if self._warned_size:
            return
        if self._offset == 0:
            self._warned_size = True
            self._warn(f"{self.path}: empty file (no events written yet)")
        elif os.fstat(fh.fileno()).st_size < self._offset:
            self._warned_size = True  # rewritten from scratch: our offset means nothing now
            self._warn(
                f"{self.path}: file shrank below the {self._offset} bytes already read; not re-read"
            )

    def _decode(self, data: bytes, sc: tfrecord.Scan) -> points.Points:
        try:
            return decode.decode(data, sc.starts, sc.ends, self._plugins)
        except Exception:  # a walker bug must not stall this file forever
            log.exception(
                "column decoder failed on %s at byte %d; using protobuf", self.path, self._offset
            )
            from lab.events import protobuf

            return protobuf.decode_with_protobuf(data, sc.starts, sc.ends, self._plugins)

    def _io_error(self, exc: OSError) -> None:
        msg = f"{self.path}: cannot read ({exc.strerror or exc}); will retry"
        if msg != self._last_error:  # once per distinct error, not once per load
            self._warn(msg)
        self._last_error = msg
