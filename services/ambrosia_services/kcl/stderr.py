"""A child's stderr as log lines, without I/O: ``feed`` the bytes as they are read, and
``flush`` an unfinished line the driver has waited long enough for (``UNFINISHED_SECONDS``)
or the rest at the end.

Each line it wrote is one log line (trailing blanks dropped, indentation kept, blank
lines skipped), except that a line is cut every ``CUT`` bytes (at a character's start),
and an unfinished line is given out when flushed: the pieces after the first of a line
start with ``CONTINUED``. So no log line is longer than ``CUT`` bytes of the child's text,
and nothing waits in memory longer than the driver's wait for the rest of a line.
"""

from __future__ import annotations

__all__ = ["CONTINUED", "CUT", "UNFINISHED_SECONDS", "StderrLines"]

CUT = 64 << 10  # the longest piece of a line in one log line, in bytes

UNFINISHED_SECONDS = 0.5
"""How long an unfinished line waits for its end before it is logged (its rest follows as
continued), so a kill of the instance loses at most this much of what a child wrote."""

CONTINUED = "[continued] "  # starts each piece of a line after its first


def _whole(buf: bytes | bytearray, start: int, end: int) -> int:
    """``end``, or less (by at most 3) if ``buf[start:end]`` ends inside a UTF-8
    character: so a cut or a flush never splits one."""
    i = end - 1
    while i > start and i > end - 4 and buf[i] & 0xC0 == 0x80:
        i -= 1
    if i < start:  # nothing in it
        return end
    lead = buf[i]
    need = 2 if lead & 0xE0 == 0xC0 else 3 if lead & 0xF0 == 0xE0 else (
        4 if lead & 0xF8 == 0xF0 else 1)
    return end if end - i >= need else i


class StderrLines:
    """Cuts one child's stderr into log lines.

    Args:
        cut: the longest piece, in bytes (at least 4).
    """

    def __init__(self, cut: int = CUT) -> None:
        if cut < 4:
            raise ValueError(f"a cut of at least 4 bytes is needed, got {cut}")
        self.cut = cut
        self._buf = bytearray()  # the unfinished line's bytes not given out yet
        self._cont = False  # a piece of the unfinished line was given out

    @property
    def unfinished(self) -> bool:
        """Whether bytes of an unfinished line wait (for their end, or ``flush``)."""
        return bool(self._buf)

    def feed(self, data: bytes) -> list[str]:
        """Bytes read from the child's stderr: the log lines they complete. Linear in
        ``data`` (a child writing a byte at a time costs no copy of the waiting line)."""
        buf = self._buf
        scan = len(buf)  # no newline before it
        buf += data
        out: list[str] = []
        pos = 0
        while True:
            nl = buf.find(b"\n", max(pos, scan), pos + self.cut + 1)
            if nl >= 0:
                self._piece(buf[pos:nl], out, ends=True)
                pos = nl + 1
            elif len(buf) - pos >= self.cut:
                end = _whole(buf, pos, pos + self.cut)
                self._piece(buf[pos:end], out, ends=False)
                pos = end
            else:
                break
        del buf[:pos]
        return out

    def flush(self) -> list[str]:
        """The unfinished line so far (short of a character it ends inside), as a piece."""
        end = _whole(self._buf, 0, len(self._buf))
        out: list[str] = []
        self._piece(self._buf[:end], out, ends=False)
        del self._buf[:end]
        return out

    def close(self) -> list[str]:
        """The stderr ended: whatever is left, as the end of its line."""
        out: list[str] = []
        self._piece(self._buf, out, ends=True)
        self._buf.clear()
        return out

    def _piece(self, raw: bytes | bytearray, out: list[str], *, ends: bool) -> None:
        text = raw.decode("utf-8", "replace")
        if ends:
            text = text.rstrip()
        if text.strip():
            out.append(CONTINUED + text if self._cont else text)
            self._cont = not ends
        elif ends:
            self._cont = False
