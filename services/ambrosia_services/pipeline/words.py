"""The one rule for what a word is, shared by the Spark job and every recount.

A word is a maximal run of ASCII letters, with ``A``-``Z`` lowered to ``a``-``z``:
``words("Don't stop-2-GO!") == ["don", "t", "stop", "go"]``. Everything else (digits,
punctuation, any non-ASCII character) separates words. The rule is ASCII on purpose:
Python's and the JVM's Unicode lowercasing differ on a few characters, and a rule that
both sides apply byte for byte can be recounted exactly.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable
from typing import Final

__all__ = ["LOWER", "SEPARATOR", "UPPER", "count_words", "words"]

UPPER: Final = string.ascii_uppercase
LOWER: Final = string.ascii_lowercase
SEPARATOR: Final = "[^a-z]+"  # after lowering: what splits words (a Java regex too)

_LOWER = str.maketrans(UPPER, LOWER)
_SPLIT = re.compile(SEPARATOR)


def words(line: str) -> list[str]:
    """The words of one line, in order (see the module docstring)."""
    return [w for w in _SPLIT.split(line.translate(_LOWER)) if w]


def count_words(lines: Iterable[str]) -> Counter[str]:
    """Word counts of many lines: the plain-Python recount of the Spark job."""
    counts: Counter[str] = Counter()
    for line in lines:
        counts.update(words(line))
    return counts
