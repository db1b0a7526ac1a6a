"""The sink's committed output, as the pipeline writes it: per micro-batch ``k`` a header
``#batch\\t<k>\\t<lines>\\t<words>`` and then ``<word>\\t<count>`` rows sorted by word.

Parsed strictly: anything else is a problem named with its line number, never skipped.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import attrs

__all__ = ["Batch", "OutputTail", "Verdict", "check_output", "parse_output"]


@attrs.frozen
class Batch:
    number: int
    lines: int
    words: int
    counts: dict[str, int] = attrs.field(eq=False, repr=False)


def parse_output(data: bytes) -> tuple[list[Batch], list[str]]:
    """The batches in ``data`` in order of appearance, and the problems found."""
    batches: list[Batch] = []
    problems: list[str] = []
    text = data.decode("utf-8", errors="replace")
    if text and not text.endswith("\n"):
        problems.append("the output ends inside a line")
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split("\t")
        if fields[0] == "#failed":
            problems.append(f"line {n}: batch {fields[1] if len(fields) > 1 else '?'} "
                            "failed every attempt")
            continue
        if fields[0] == "#batch":
            if len(fields) != 4 or not all(f.isdigit() for f in fields[1:]):
                problems.append(f"line {n}: a bad batch header {line!r}")
                continue
            k, lines, words = map(int, fields[1:])
            batches.append(Batch(k, lines, words, {}))
            continue
        if not batches:
            problems.append(f"line {n}: a row before any batch header")
            continue
        if len(fields) != 2 or not fields[0] or not fields[1].isdigit():
            problems.append(f"line {n}: a bad row {line!r}")
            continue
        counts = batches[-1].counts
        if fields[0] in counts:
            problems.append(f"line {n}: {fields[0]!r} twice in batch {batches[-1].number}")
        elif counts and fields[0] < max(counts):
            problems.append(f"line {n}: {fields[0]!r} out of order in batch "
                            f"{batches[-1].number}")
        counts[fields[0]] = counts.get(fields[0], 0) + int(fields[1])
    return batches, problems


@attrs.frozen
class Verdict:
    ok: bool
    line: str


def check_output(batches: list[Batch], problems: list[str], expected: Counter[str],
                 total_lines: int, through: str = "") -> Verdict:
    """Compare the committed batches with the recount of the whole corpus: every batch
    once, numbered consecutively, each header true to its rows, and the merged counts
    equal to ``expected``. ``through`` names what the run went through (crashes, an
    upgrade), said in the verdict."""
    problems = list(problems)
    numbers = [b.number for b in batches]
    if not batches:
        problems.append("no batch was committed")
    elif numbers != list(range(numbers[0], numbers[0] + len(numbers))) or numbers[0] > 1:
        dups = sorted(k for k, c in Counter(numbers).items() if c > 1)
        problems.append(f"batches not committed once each in order: {_span(numbers)}"
                        + (f" (repeated: {dups[:10]})" if dups else ""))
    for b in batches:
        if sum(b.counts.values()) != b.words:
            problems.append(f"batch {b.number}: header says {b.words} words, rows hold "
                            f"{sum(b.counts.values())}")
    lines = sum(b.lines for b in batches)
    if lines != total_lines:
        problems.append(f"batches cover {lines} lines, the corpus has {total_lines}")
    merged: Counter[str] = Counter()
    for b in batches:
        merged.update(b.counts)
    total = sum(expected.values())
    if merged != expected:
        wrong = sorted(w for w in merged.keys() | expected.keys() if merged[w] != expected[w])
        sample = ", ".join(f"{w} {merged[w]} vs {expected[w]}" for w in wrong[:3])
        problems.append(f"{len(wrong)} word counts differ from the batch recount "
                        f"({sample}); {sum(merged.values())} words committed, {total} in "
                        "the corpus")
    if problems:
        return Verdict(False, "FAILED: " + "; ".join(problems[:5])
                       + (f"; and {len(problems) - 5} more" if len(problems) > 5 else ""))
    return Verdict(True, f"{total} words, counts equal to a batch recount, every batch "
                         "committed once" + (f", through {through}" if through else ""))


def _span(numbers: list[int]) -> str:
    if len(numbers) <= 12:
        return str(numbers)
    return f"{numbers[:6]} ... {numbers[-6:]}"


class OutputTail:
    """Follows the committed file as it grows: the batch headers that appeared since the
    last ``poll`` (committed output only ever grows)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._rest = b""
        self.headers: list[tuple[int, int, int]] = []  # (batch, lines, words)

    def poll(self) -> list[tuple[int, int, int]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        data = self._rest + data
        whole, _, self._rest = data.rpartition(b"\n")
        new = []
        for line in whole.split(b"\n"):
            if line.startswith(b"#batch\t"):
                fields = line.split(b"\t")
                if len(fields) == 4 and all(f.isdigit() for f in fields[1:]):
                    k, lines, words = (int(f) for f in fields[1:])
                    new.append((k, lines, words))
        self.headers += new
        return new

    @property
    def lines(self) -> int:
        return sum(h[1] for h in self.headers)
