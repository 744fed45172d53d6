"""Calibrate the head-count verdict by simulation (see mhatrain/study/calibration.py): the false-positive rate
of the seed-block test and of the previous rule under the null, and the power to find a true +1.0 BLEU
difference of h=1 from h=8 with 3 and 6 seeds. With --interaction, the same for the interaction tests
of a varied study (does Δ differ between cells). The figures in docs/ablation.md come from, at the
repository root:

    python scripts/calibrate.py --studies 2000
    python scripts/calibrate.py --studies 2000 --interaction --effect 1.5

The pool of systems is tests/data/multi30k-test-stats.npz: per-sentence BLEU statistics of the 15
committed Multi30k systems (results/ablate-multi30k/hNN-seedS/eval/test.beam4.hyp.txt). Remake it with
`--write-pool` (needs the references in ../shared/data/multi30k).
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mhatrain.study import calibration as C  # noqa: E402
from mhatrain.study.significance import sentence_statistics  # noqa: E402

POOL = ROOT / "tests" / "data" / "multi30k-test-stats.npz"
STUDY = ROOT / "results" / "ablate-multi30k"
REFERENCES = ROOT.parent / "shared" / "data" / "multi30k" / "test_2016_flickr.de.gz"
HEADS = (1, 4, 8, 16, 32)


def write_pool() -> None:
    """Per-sentence statistics of the committed three-seed grid, as uint16 (every count is below 2^16)."""
    with gzip.open(REFERENCES, "rt", encoding="utf-8") as f:
        references = f.read().splitlines()
    names = [f"h{h:02d}-seed{s}" for h in HEADS for s in (1, 2, 3)]
    stats = [
        sentence_statistics(
            (STUDY / name / "eval" / "test.beam4.hyp.txt").read_text(encoding="utf-8").splitlines(), references
        )
        for name in names
    ]
    np.savez_compressed(POOL, stats=np.stack(stats).astype(np.uint16), systems=np.array(names))
    print(f"wrote {POOL} ({len(names)} systems, {len(references)} sentences)")


def main() -> None:
    parser = argparse.ArgumentParser(description="False-positive rate and power of the head-count verdict.")
    parser.add_argument("--studies", type=int, default=2000, help="synthetic studies per design")
    parser.add_argument("--effect", type=float, default=1.0, help="true BLEU difference of h=1 for the power")
    parser.add_argument("--seed", type=int, default=0, help="numpy seed of the simulation")
    parser.add_argument("--write-pool", action="store_true", help=f"remake {POOL.name} from the committed runs")
    parser.add_argument(
        "--interaction", action="store_true", help="the interaction tests of a varied study instead of the verdict"
    )
    args = parser.parse_args()
    if args.write_pool:
        write_pool()
        return
    pool = np.load(POOL)["stats"]
    rng = np.random.default_rng(args.seed)
    if args.interaction:
        calibrate_interaction(pool, rng, args.studies, args.effect)
        return
    designs = {
        "3 seeds per h": {h: 3 for h in HEADS},
        "6 seeds of h=1 and h=8, 3 of the others": {h: 6 if h in (1, 8) else 3 for h in HEADS},
        "6 seeds per h": {h: 6 for h in HEADS},
    }
    print(f"{args.studies} synthetic studies per line; pool: {pool.shape[0]} systems, {pool.shape[1]} sentences")
    print(f"{'design':42} {'rule':16} {'false-positive rate':>20} {f'power (+{args.effect:.1f} BLEU)':>18} {'sd':>5}")
    for name, seeds in designs.items():
        started = time.perf_counter()
        null = C.rates(C.simulate(pool, seeds, args.studies, rng))
        power = C.rates(C.simulate(pool, seeds, args.studies, rng, effects={1: args.effect}), null_heads=set())
        for rule in C.RULES:
            print(
                f"{name:42} {rule:16} {null[rule].family_false_positive:20.3f} "
                f"{power[rule].called_better[1]:18.3f} {null[rule].residual_sd:5.2f}"
            )
        print(f"  ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    print(
        "false-positive rate: share of null studies (every h the same) in which any h was called better or "
        "worse than h=8 at α = 0.05; power: share of studies in which h=1 was called better; sd: median "
        "residual standard deviation of the seed-block fit (the seed noise simulated; the committed study: 0.55)"
    )


def calibrate_interaction(pool: np.ndarray, rng: np.random.Generator, studies: int, effect: float) -> None:
    """False-positive rate and power of the interaction tests: 3 cells of h ∈ {1, 8}, the effect added to
    h=1 in cell 1 (so Δ there differs from the reference cell's by about `effect`)."""
    print(f"{studies} synthetic varied studies per line (3 cells, h ∈ {{1, 8}}); pool: {pool.shape[0]} systems")
    print(f"{'seeds':>5} {'effect':>6} {'omnibus called':>15} {'any cell called':>16} {'cell 1 called':>14}")
    for seeds in (3, 6):
        for size in (0.0, effect):
            started = time.perf_counter()
            rates = C.interaction_rates(pool, 3, seeds, studies, rng, effect_in_cell={1: size} if size else None)
            print(f"{seeds:5} {size:+6.1f} {rates.omnibus:15.3f} {rates.any_pair:16.3f} {rates.pair_called[1]:14.3f}")
            print(f"  ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    print(
        "effect 0: false-positive rates (every cell the same); otherwise power. Omnibus: Holm over h; cells "
        "against the reference cell: Holm over the cells compared; α = 0.05"
    )


if __name__ == "__main__":
    main()
