"""How the PostgreSQL sink turns output lines into rows: the row formats, without I/O.

A sink's output is a byte stream; the coordinator commits it in ranges that may end
inside a line. The store keeps the piece of a line a range ends in (the carry, in its
state row) and hands every whole line here with ``pos``, the output offset of the line's
first byte. ``pos`` with the sink's name is each row's primary key, so a line can never
be stored twice; a format only says what columns a line becomes.

- ``lines`` (any output): one row per line, ``(sink, pos, txn, line)``, the line as text
  without its newline.
- ``wordcount`` (the word count pipeline's output, see ``ambrosia_services.pipeline``): a
  row per batch header (``#batch\\t<k>\\t<lines>\\t<words>`` or ``#failed\\t<k>\\t<lines>``)
  in ``<table>_batches`` ``(sink, pos, txn, batch, lines, words, failed)`` and a row per
  word count (``<word>\\t<count>``) in ``<table>`` ``(sink, pos, batch, word, count)``.

A line a format cannot read (not UTF-8, a NUL, a row of the wrong shape) is a
``RowFormatError``: the transaction holding it is voted no, and nothing of it is stored.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

__all__ = ["FORMATS", "Column", "LinesFormat", "RowFormat", "RowFormatError", "Rows",
           "TableShape", "WordCountFormat"]


class RowFormatError(ValueError):
    """A line the format cannot store (the message names its output offset)."""


@attrs.frozen
class Column:
    name: str
    type: str  # as PostgreSQL's format_type() spells it


@attrs.frozen
class TableShape:
    """A table a format writes: ``suffix`` is appended to the table the user names."""

    suffix: str
    columns: tuple[Column, ...]
    key: tuple[str, ...] = ("sink", "pos")


#: Per table suffix, the rows to insert, in column order.
Rows = dict[str, list[tuple[Any, ...]]]


class RowFormat(abc.ABC):
    """What the lines of one transaction become. ``context`` carries what a format must
    remember from one transaction to the next (the word count's current batch); it is
    kept in the sink's state row, moved in the same transaction as the rows."""

    name: ClassVar[str]
    tables: ClassVar[tuple[TableShape, ...]]

    @abc.abstractmethod
    def rows(self, sink: str, txn: str, lines: Sequence[tuple[int, bytes]],
             context: str) -> tuple[Rows, str]:
        """The rows of ``lines`` (``(pos, line without its newline)``) and the context
        after them.

        Raises:
            RowFormatError: a line this format cannot store.
        """


def _text(pos: int, line: bytes) -> str:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise RowFormatError(f"the line at output offset {pos} is not UTF-8") from None
    if "\x00" in text:
        raise RowFormatError(f"the line at output offset {pos} holds a NUL byte")
    return text


class LinesFormat(RowFormat):
    name = "lines"
    tables = (TableShape("", (Column("sink", "text"), Column("pos", "bigint"),
                              Column("txn", "text"), Column("line", "text"))),)

    def rows(self, sink: str, txn: str, lines: Sequence[tuple[int, bytes]],
             context: str) -> tuple[Rows, str]:
        return {"": [(sink, pos, txn, _text(pos, line)) for pos, line in lines]}, context


class WordCountFormat(RowFormat):
    name = "wordcount"
    tables = (
        TableShape("", (Column("sink", "text"), Column("pos", "bigint"),
                        Column("batch", "bigint"), Column("word", "text"),
                        Column("count", "bigint"))),
        TableShape("_batches", (Column("sink", "text"), Column("pos", "bigint"),
                                Column("txn", "text"), Column("batch", "bigint"),
                                Column("lines", "bigint"), Column("words", "bigint"),
                                Column("failed", "boolean"))),
    )

    def rows(self, sink: str, txn: str, lines: Sequence[tuple[int, bytes]],
             context: str) -> tuple[Rows, str]:
        words: list[tuple[Any, ...]] = []
        batches: list[tuple[Any, ...]] = []
        batch = int(context) if context else None
        for pos, line in lines:
            fields = _text(pos, line).split("\t")
            numbers = fields[1:]
            if fields[0] in ("#batch", "#failed"):
                size = 4 if fields[0] == "#batch" else 3
                if len(fields) != size or not all(f.isdigit() for f in numbers):
                    raise RowFormatError(f"a bad batch header at output offset {pos}: "
                                         f"{line[:80]!r}")
                batch = int(numbers[0])
                failed = fields[0] == "#failed"
                batches.append((sink, pos, txn, batch, int(numbers[1]),
                                0 if failed else int(numbers[2]), failed))
            elif len(fields) != 2 or not fields[0] or not fields[1].isdigit():
                raise RowFormatError(f"a bad word count row at output offset {pos}: "
                                     f"{line[:80]!r}")
            elif batch is None:
                raise RowFormatError(f"a word count row before any batch header at output "
                                     f"offset {pos}")
            else:
                words.append((sink, pos, batch, fields[0], int(fields[1])))
        return {"": words, "_batches": batches}, "" if batch is None else str(batch)


FORMATS: dict[str, type[RowFormat]] = {f.name: f for f in (LinesFormat, WordCountFormat)}
