"""The corpus fed over the whole run: the feeds tail files that the demo appends to, a
piece at a time, while the coordinator keeps up, so the feeds are still sending when the
crashes and the upgrade come, and resume after each."""

from __future__ import annotations

from pathlib import Path

__all__ = ["Drip"]


class Drip:
    """Appends the corpus files ``sources`` to ``targets`` in ``pieces`` pieces each (cut
    at line ends). A next piece goes out once the coordinator has applied all but one
    piece's worth of what was appended, so about two pieces are in flight at a time."""

    def __init__(self, sources: list[Path], targets: list[Path], pieces: int = 24) -> None:
        self.targets = targets
        self._pieces: list[list[bytes]] = []
        for source in sources:
            lines = source.read_bytes().splitlines(keepends=True)
            step = max(1, -(-len(lines) // pieces))
            self._pieces.append([b"".join(lines[i:i + step])
                                 for i in range(0, len(lines), step)])
        self._lines_per_round = [sum(p[i].count(b"\n") for p in self._pieces if i < len(p))
                                 for i in range(max(map(len, self._pieces), default=0))]
        self._next = 0
        self.appended_lines = 0
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"")

    @property
    def done(self) -> bool:
        return self._next >= len(self._lines_per_round)

    def poll(self, applied: int) -> None:
        """Append the next piece of every file if the coordinator has caught up enough
        (``applied``: the lines it has applied, per its status)."""
        while not self.done and (self._next < 2 or applied >= self.appended_lines
                                 - self._lines_per_round[self._next - 1]):
            for pieces, target in zip(self._pieces, self.targets, strict=True):
                if self._next < len(pieces):
                    with open(target, "ab") as out:
                        out.write(pieces[self._next])
            self.appended_lines += self._lines_per_round[self._next]
            self._next += 1
