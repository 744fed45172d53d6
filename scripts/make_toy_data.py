"""Write the synthetic toy parallel corpus used by configs/tiny.yaml and the tests.

The "translation" is learnable in seconds: each source word maps to a fixed target word and
adjectives move behind their noun, so a model must attend across positions, not copy in place.
Usage: python scripts/make_toy_data.py OUT_DIR [--train N]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

NOUNS = {
    "cat": "katze",
    "dog": "hund",
    "man": "mann",
    "woman": "frau",
    "child": "kind",
    "ball": "ball",
    "hat": "hut",
    "car": "auto",
    "house": "haus",
    "tree": "baum",
    "street": "strasse",
    "mat": "matte",
}
ADJECTIVES = {"red": "rot", "big": "gross", "small": "klein", "old": "alt", "young": "jung", "blue": "blau"}
VERBS = {"sees": "sieht", "holds": "hält", "likes": "mag", "finds": "findet", "sat on": "sass auf"}


def phrase(rng: random.Random) -> tuple[str, str]:
    noun = rng.choice(list(NOUNS))
    if rng.random() < 0.6:
        adjective = rng.choice(list(ADJECTIVES))
        return f"the {adjective} {noun}", f"die {NOUNS[noun]} {ADJECTIVES[adjective]}"
    return f"the {noun}", f"die {NOUNS[noun]}"


def sentence(rng: random.Random) -> tuple[str, str]:
    (s1, t1), (s2, t2) = phrase(rng), phrase(rng)
    verb = rng.choice(list(VERBS))
    return f"{s1} {verb} {s2}.".capitalize(), f"{t1} {VERBS[verb]} {t2}.".capitalize()


def write(out: Path, sizes: dict[str, int], seed: int = 0) -> None:
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    for split, n in sizes.items():
        pairs = [sentence(rng) for _ in range(n)]
        (out / f"{split}.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (out / f"{split}.de").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, default=2000)
    args = parser.parse_args()
    write(args.out, {"train": args.train, "valid": 100, "test": 100})
