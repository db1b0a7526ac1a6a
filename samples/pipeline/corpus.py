"""The demo's input: a seeded, reproducible text corpus split into files.

Words are made of syllables and drawn with Zipf-like weights (a few very common words, a
long tail), as in real text, so that every micro-batch shares words with the others and
the counts must really be merged. Lines read like sentences (a capital letter first,
commas, a full stop), so the word rule (``ambrosia_services.pipeline.words``) has work to do.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

__all__ = ["CORPUS_SEED", "count_words", "vocabulary", "write_corpus"]

CORPUS_SEED = 13
_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
           "br", "ch", "st", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou")


def vocabulary(size: int, rng: random.Random) -> list[str]:
    """``size`` distinct words of one to three syllables, in the order of their rank."""
    syllables = [o + v for o, v in itertools.product(_ONSETS, _VOWELS)]
    seen: set[str] = set()
    words: list[str] = []
    while len(words) < size:
        word = "".join(rng.choice(syllables) for _ in range(rng.choice((1, 2, 2, 3))))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def write_corpus(directory: Path, lines: int, files: int, seed: int = CORPUS_SEED,
                 words_per_line: tuple[int, int] = (4, 16)) -> list[Path]:
    """Write ``lines`` lines over ``files`` files (``part-1.txt`` ...) into ``directory``;
    the same arguments give the same bytes. Returns the files."""
    rng = random.Random(seed)
    vocab = vocabulary(5000, rng)
    weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocab))))
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"part-{i + 1}.txt" for i in range(files)]
    per_file = [lines // files + (1 if i < lines % files else 0) for i in range(files)]
    for path, n in zip(paths, per_file, strict=True):
        with open(path, "w", encoding="ascii") as out:
            for _ in range(n):
                k = rng.randint(*words_per_line)
                words = rng.choices(vocab, cum_weights=weights, k=k)
                words[0] = words[0].capitalize()
                for i in range(1, k - 1):
                    if rng.random() < 0.08:
                        words[i] += ","
                out.write(" ".join(words) + rng.choice(".?!") + "\n")
    return paths


def count_words(paths: list[Path]) -> Counter[str]:
    """The corpus's word counts in plain Python, by the pipeline's word rule."""
    from ambrosia_services.pipeline.words import count_words as count

    counts: Counter[str] = Counter()
    for path in paths:
        with open(path, encoding="ascii") as f:
            counts.update(count(f))
    return counts
