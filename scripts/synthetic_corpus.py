"""A synthetic WMT-length parallel corpus for measuring data preparation at scale (docs/performance.md).

usage: python scripts/synthetic_corpus.py N_PAIRS OUT_DIR
Writes OUT_DIR/train.{en,de} (N_PAIRS lines each) and OUT_DIR/valid.{en,de} (the first 1,000 pairs):
pseudo-words from 20 syllables, 30,000 a language, Zipf-distributed (a = 1.2), N(25, 12) words a sentence
(clipped to 1..120), seeded. Train on it with --set data.local_dir=OUT_DIR --set data.valid_split=valid.
"""

import sys
from pathlib import Path

import numpy as np

SYLLABLES = [
    "ka",
    "to",
    "ri",
    "en",
    "de",
    "sch",
    "ung",
    "ver",
    "lo",
    "ma",
    "ne",
    "st",
    "qu",
    "ab",
    "ei",
    "au",
    "ion",
    "ta",
    "be",
    "ge",
]
CHUNK = 100_000


def vocabulary(size: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array(["".join(rng.choice(SYLLABLES, rng.integers(1, 5))) for _ in range(size)])


def write_side(path: Path, n: int, words: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for start in range(0, n, CHUNK):
            m = min(CHUNK, n - start)
            lengths = np.clip(rng.normal(25, 12, m).round(), 1, 120).astype(int)
            tokens = words[np.minimum(rng.zipf(1.2, lengths.sum()) - 1, len(words) - 1)]
            ends = np.cumsum(lengths)
            f.write("".join(" ".join(tokens[e - k : e]) + " .\n" for k, e in zip(lengths, ends)))


def main(n: int, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for lang, seed in (("en", 1), ("de", 2)):
        write_side(out / f"train.{lang}", n, vocabulary(30_000, seed), seed + 10)
        with open(out / f"train.{lang}") as f:
            (out / f"valid.{lang}").write_text("".join(line for _, line in zip(range(1000), f)))


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
