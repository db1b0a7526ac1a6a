"""What a feed sends on each stream: the lines of a file, or an iterator's records.

A source is a cursor the feed moves: ``resume(por)`` after each successful NOTIFY_ACK,
``next_record()`` for the next record to send, ``acked(por)`` when the worker has applied
records up to ``por``. A point of reference is the id of the last record the worker
applied, so ``resume(por)`` continues *after* the record at ``por`` (Wallaroo's own line
feed sent that record again and left the worker to drop it; skipping it keeps a worker
that does not drop it from applying it twice). ``None`` means from the start (the
NOTIFY_ACK's U64 max).
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

import attrs

from .errors import FeedSourceError

__all__ = ["FileSource", "IteratorSource", "FeedRecord", "RecordSource", "stream_id_of"]


def stream_id_of(name: str) -> int:
    """The stream id a file-based connector derives from its stream name: the first
    64 bits of sha256(name), big-endian."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big")


@attrs.frozen
class FeedRecord:
    message_id: int
    payload: bytes
    key: bytes = b""


class RecordSource(Protocol):
    name: str
    stream_id: int

    @property
    def finished(self) -> bool:
        """Every record has been produced (a followed file never finishes)."""

    @property
    def last_id(self) -> int | None:
        """Once finished: the id of the last record, None when there was none."""

    def resume(self, por: int | None) -> None: ...

    def next_record(self) -> FeedRecord | None:
        """The next record, or None when there is none now (or ever, once finished)."""

    def acked(self, por: int) -> None: ...


class FileSource:
    """The lines of a file: message id = the line's start byte offset, payload = the
    line with its newline (so id + len(payload) is the next line's id), key = the path.

    With ``message_bytes``, a payload holds as many whole lines as fit in that many bytes
    (at least one), and its id is the start of its last line: a point of reference still
    names the last line applied, so resuming is the same (fewer, larger messages cost far
    less to send, stage and log than a message per line).

    With ``follow`` (tailing), lines appended later are sent too, and a last line without
    its newline waits for it. Without, the file ends at its end of file (a last line
    without newline is sent as it is). A file truncated or replaced while read is not
    noticed.

    Args:
        path: the file.
        name: the stream name (default: the path as given).
        stream_id: default ``stream_id_of(name)``.
        follow: keep reading lines appended later.
        max_line: the longest line accepted (a longer one is a ``FeedSourceError``, since
            no worker would take a frame that large).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        stream_id: int | None = None,
        follow: bool = True,
        max_line: int = (4 << 20) - 1024,
        message_bytes: int = 0,
    ) -> None:
        self.path = Path(path)
        self.message_bytes = message_bytes
        self.name = str(path) if name is None else name
        self.stream_id = stream_id_of(self.name) if stream_id is None else stream_id
        self.key = str(path).encode("utf-8")
        self.follow = follow
        self.max_line = max_line
        self._file: BinaryIO | None = None
        self._offset = 0
        self._skip_next = False
        self._at_eof = False
        self._last_id: int | None = None

    @property
    def finished(self) -> bool:
        return not self.follow and self._at_eof

    @property
    def last_id(self) -> int | None:
        return self._last_id

    def resume(self, por: int | None) -> None:
        f = self._open()
        self._at_eof = False
        if por is None:
            self._offset, self._skip_next, self._last_id = 0, False, None
            return
        if por > 0:
            f.seek(por - 1)
            if f.read(1) != b"\n":
                raise FeedSourceError(
                    f"{self.path}: the point of reference {por} is not the start of a line"
                )
        self._offset, self._skip_next, self._last_id = por, True, por

    def next_record(self) -> FeedRecord | None:
        if self.message_bytes > 0:
            return self._next_lines()
        return self._next_line()

    def _next_lines(self) -> FeedRecord | None:
        """Whole lines, as many as fit in ``message_bytes`` (one longer line alone)."""
        f = self._open()
        while True:
            f.seek(self._offset)
            data = f.read(self.message_bytes)
            end = data.rfind(b"\n") + 1
            if end == 0:  # no whole line here: a long one, or a last one without newline
                return self._next_line()
            chunk = data[:end]
            if self._skip_next:  # the line at the point of reference: applied
                self._skip_next = False
                self._offset += chunk.index(b"\n") + 1
                continue
            record = FeedRecord(self._offset + chunk.rfind(b"\n", 0, end - 1) + 1, chunk,
                            self.key)
            self._offset += end
            self._last_id = record.message_id
            return record

    def _next_line(self) -> FeedRecord | None:
        f = self._open()
        while True:
            f.seek(self._offset)
            line = f.readline(self.max_line + 1)
            if len(line) > self.max_line:
                raise FeedSourceError(
                    f"{self.path}: the line at byte {self._offset} is over {self.max_line} bytes"
                )
            if not line or (self.follow and not line.endswith(b"\n")):
                self._at_eof = True
                return None
            record = FeedRecord(self._offset, line, self.key)
            self._offset += len(line)
            self._last_id = record.message_id
            if self._skip_next:
                self._skip_next = False  # the record at the point of reference: applied
                continue
            return record

    def acked(self, por: int) -> None:
        """Nothing to drop: a file can always be read again."""

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _open(self) -> BinaryIO:
        if self._file is None:
            try:
                self._file = self.path.open("rb")
            except OSError as e:
                raise FeedSourceError(f"cannot read {self.path}: {e.strerror}") from None
        return self._file


class IteratorSource:
    """Records from an iterator of ``(message id, payload)`` or ``(message id, payload,
    key)``; ids must rise strictly. Records sent and not yet acknowledged are kept, so
    they can be sent again after a reconnect. The iterator is called on the feed's event
    loop: it must not block (read a slow source in a thread and hand over a queue's items).

    Args:
        records: the records, in order.
        name: the stream name.
        stream_id: default ``stream_id_of(name)``.
    """

    def __init__(
        self,
        records: Iterable[tuple[int, bytes] | tuple[int, bytes, bytes]],
        *,
        name: str,
        stream_id: int | None = None,
    ) -> None:
        self.name = name
        self.stream_id = stream_id_of(name) if stream_id is None else stream_id
        self._it: Iterator[tuple[int, bytes] | tuple[int, bytes, bytes]] = iter(records)
        self._unacked: deque[FeedRecord] = deque()  # sent, not yet acknowledged
        self._replay: deque[FeedRecord] = deque()  # to send again after a resume
        self._skip_through = -1  # iterator records at or below this id were applied
        self._acked_through = -1  # records at or below this id were acknowledged, dropped
        self._newest = -1  # the last id the iterator gave, to check that ids rise
        self._exhausted = False
        self._last_id: int | None = None

    @property
    def finished(self) -> bool:
        return self._exhausted and not self._replay

    @property
    def last_id(self) -> int | None:
        return self._last_id

    def resume(self, por: int | None) -> None:
        floor = -1 if por is None else por
        if floor < self._acked_through:
            where = "the start" if por is None else f"point of reference {por}"
            raise FeedSourceError(
                f"stream {self.name!r}: cannot rewind to {where}: records up to "
                f"{self._acked_through} were acknowledged and dropped"
            )
        self._replay = deque(r for r in [*self._unacked, *self._replay] if r.message_id > floor)
        self._unacked.clear()
        self._skip_through = max(self._skip_through, floor)

    def next_record(self) -> FeedRecord | None:
        record = self._replay.popleft() if self._replay else self._pull()
        if record is not None:
            self._unacked.append(record)
        return record

    def _pull(self) -> FeedRecord | None:
        while not self._exhausted:
            try:
                item = next(self._it)
            except StopIteration:
                self._exhausted = True
                return None
            record = FeedRecord(*item)
            if record.message_id <= self._newest:
                raise FeedSourceError(
                    f"stream {self.name!r}: message id {record.message_id} does not rise "
                    f"above {self._newest}"
                )
            self._newest = self._last_id = record.message_id
            if record.message_id > self._skip_through:
                return record
        return None

    def acked(self, por: int) -> None:
        while self._unacked and self._unacked[0].message_id <= por:
            self._unacked.popleft()
        self._acked_through = max(self._acked_through, por)
