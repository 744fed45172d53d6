"""The covariance of Δ between the cells of a varied study: the term the interaction tests leave out.

interaction.py compares Δ = BLEU(h) − BLEU(h=8) between the cells of a study varied over other settings
(regimes.py) as if the cells were independent, yet every run is scored on the same test sentences.
This module measures what that leaves out: over test sets resampled as the seed-level test resamples
them (significance.resample_counts, SENTENCE_SAMPLES draws), the covariance of the Δ of each seed of
one cell with the Δ of each seed of another, averaged over those pairs of runs (docs/ablation.md, "taken
as independent"). A covariance near zero beside the variance of a difference of two Δ says the
independence the tests assume costs them little.

    python -m mhatrain.study.stats.cross_cell_covariance STUDY_DIR [--heads 1] [--samples 5000]

The references are the test split that the runs' config names, as the report reads them.
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.errors import MhatrainError
from ..grid.directory import study_cells
from ..grid.points import Cell, cell_labels, cell_name
from ..grid.run_records import RunRecord, gather, test_split
from . import significance as S
from .comparison import BASELINE_HEADS


@dataclass(frozen=True)
class CellPair:
    """Two cells and the mean covariance (BLEU²) of their Δ over `pairs` pairs of runs (None without any)."""

    first: str  # the cells' labels (regimes.cell_labels)
    second: str
    pairs: int
    covariance: float | None


def cross_cell_covariance(
    study_dir: Path, heads: int = 1, baseline: int = BASELINE_HEADS, samples: int = S.SENTENCE_SAMPLES
) -> list[CellPair]:
    """For every two cells of the varied study at `study_dir` (in the study's cell order): the mean
    covariance, over `samples` resampled test sets, of Δ = BLEU(heads) − BLEU(baseline) of a seed of
    one cell with that of a seed of the other. A seed counts in a cell where both its h have test
    hypotheses."""
    study_dir = Path(study_dir)
    runs = {cell: _evaluated_runs(study_dir / cell_name(cell)) for cell in study_cells(study_dir)}
    runs = {cell: found for cell, found in runs.items() if found}
    if not runs:
        raise MhatrainError(f"{study_dir}: no cell holds a run with test hypotheses")
    cell, first = next((cell, run) for cell, found in runs.items() for run in found.values())
    references = test_split(study_dir / cell_name(cell), first.run_dir).tgt
    delta = _resampled_deltas(study_dir, runs, references, heads, baseline, samples)
    labels = dict(zip(runs, cell_labels([dict(cell) for cell in runs])))
    return [_pair(labels[a], labels[b], delta[a], delta[b]) for a, b in itertools.combinations(runs, 2)]


def _evaluated_runs(cell_dir: Path) -> dict[tuple[int, int], RunRecord]:
    """{(h, seed): record} of the cell's runs with test hypotheses."""
    if not cell_dir.is_dir():
        return {}
    _, runs = gather(cell_dir)
    return {(run.heads, run.seed): run for run in runs if run.test_hypotheses is not None}


def _resampled_deltas(
    study_dir: Path,
    runs: dict[Cell, dict[tuple[int, int], RunRecord]],
    references: list[str],
    heads: int,
    baseline: int,
    samples: int,
) -> dict[Cell, list[np.ndarray]]:
    """{cell: [Δ over the resampled test sets, one [samples] array per seed with both h]}."""
    columns: dict[tuple[Cell, int, int], int] = {}
    stats = []
    for cell, found in runs.items():
        for (h, seed), run in found.items():
            if h in (heads, baseline) and (heads if h == baseline else baseline, seed) in found:
                columns[cell, h, seed] = len(stats)
                stats.append(
                    S.sentence_statistics(_hypotheses(study_dir / cell_name(cell), run, references), references)
                )
    if not stats:
        return {cell: [] for cell in runs}
    resampled = S.resampled_bleus(np.stack(stats), S.resample_counts(len(references), samples))  # [samples, runs]
    return {
        cell: [
            resampled[:, columns[cell, heads, seed]] - resampled[:, columns[cell, baseline, seed]]
            for seed in sorted({seed for c, h, seed in columns if c == cell})
        ]
        for cell in runs
    }


def _hypotheses(cell_dir: Path, run: RunRecord, references: list[str]) -> list[str]:
    hypotheses = (cell_dir / run.test_hypotheses).read_text(encoding="utf-8").splitlines()
    if len(hypotheses) != len(references):
        raise MhatrainError(
            f"{cell_dir / run.test_hypotheses}: {len(hypotheses)} test hypotheses for {len(references)} references"
        )
    return hypotheses


def _pair(first: str, second: str, a: list[np.ndarray], b: list[np.ndarray]) -> CellPair:
    covariances = [float(np.cov(x, y)[0, 1]) for x in a for y in b]
    return CellPair(first, second, len(covariances), float(np.mean(covariances)) if covariances else None)


def main(argv: list[str] | None = None) -> None:
    """Print one line per two cells: their labels, the pairs of runs and the mean covariance."""
    parser = argparse.ArgumentParser(prog="python -m mhatrain.study.stats.cross_cell_covariance", description=__doc__)
    parser.add_argument("study_dir", type=Path, help="a study made with `mhatrain ablate --vary`")
    parser.add_argument("--heads", type=int, default=1, help="the h whose Δ against h=8 is compared (default 1)")
    parser.add_argument("--samples", type=int, default=S.SENTENCE_SAMPLES, help="resampled test sets")
    args = parser.parse_args(argv)
    for pair in cross_cell_covariance(args.study_dir, args.heads, samples=args.samples):
        shown = "—" if pair.covariance is None else f"{pair.covariance:+.4f} BLEU²"
        print(f"{pair.first}  vs  {pair.second}: {pair.pairs} pairs of runs, mean covariance {shown}")


if __name__ == "__main__":
    main()
