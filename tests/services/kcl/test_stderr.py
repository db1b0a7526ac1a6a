"""A child's stderr cut into log lines, without I/O: exact pieces, fed whole or a byte at
a time."""

from __future__ import annotations

import pytest
from ambrosia_services.kcl.stderr import CONTINUED, CUT, StderrLines


def fed(data: bytes, *, step: int = 0, cut: int = CUT) -> list[str]:
    lines = StderrLines(cut)
    out: list[str] = []
    for i in range(0, len(data), step or len(data) or 1):
        out += lines.feed(data[i:i + (step or len(data))])
    return out + lines.close()


def test_exact_pieces() -> None:
    cut = 8
    assert fed(b"Traceback:\n  indented  \n\n   \n", cut=64) == ["Traceback:", "  indented"]
    assert fed(b"a" * 20 + b"\n", cut=cut) == ["a" * 8, CONTINUED + "a" * 8,
                                               CONTINUED + "a" * 4]
    assert fed(b"b" * 8 + b"\n", cut=cut) == ["b" * 8]  # exactly the cut: one line
    assert fed(b"c" * 9 + b"\r\n", cut=cut) == ["c" * 8, CONTINUED + "c"]
    assert fed(b"d" * 16 + b"\n", cut=cut) == ["d" * 8, CONTINUED + "d" * 8]
    assert fed(b"last words", cut=cut) == ["last wor", CONTINUED + "ds"]  # at the end


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_the_same_pieces_however_the_bytes_come(step: int) -> None:
    data = b"x" * (2 * CUT + 100) + b"\nshort\n" + b"y" * CUT + b"\n" + b"z" * 10
    assert fed(data, step=step) == ["x" * CUT, CONTINUED + "x" * CUT, CONTINUED + "x" * 100,
                                    "short", "y" * CUT, "z" * 10]


def test_a_cut_or_a_flush_never_splits_a_character() -> None:
    lines = StderrLines(8)
    euro = "€".encode()  # 3 bytes
    assert lines.feed(b"abcdef" + euro + b"gh\n") == ["abcdef", CONTINUED + "€gh"]
    assert lines.feed(b"12" + euro[:2]) == [] and lines.unfinished
    assert lines.flush() == ["12"]  # the half character waits for the rest
    assert lines.feed(euro[2:] + b"\n") == [CONTINUED + "€"]
    assert not lines.unfinished


def test_an_unfinished_line_flushed_then_finished() -> None:
    lines = StderrLines()
    assert lines.feed(b"Record 1, ") == [] and lines.unfinished
    assert lines.flush() == ["Record 1, "] and not lines.unfinished
    assert lines.flush() == []
    assert lines.feed(b"Record 2\nnext") == [CONTINUED + "Record 2"]
    assert lines.close() == ["next"]
    assert lines.feed(b"   ") == [] and lines.flush() == []  # blanks alone are no line
    assert lines.feed(b"\nafter\n") == ["after"]  # not marked: nothing of it was said
