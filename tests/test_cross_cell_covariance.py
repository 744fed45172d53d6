"""The covariance of Δ between the cells of a varied study (study/stats/cross_cell_covariance.py), on a study
laid out by hand: run directories with a config, a summary and test hypotheses, no training."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
import sacrebleu

from mhatrain.core.config import dump_config, load_config
from mhatrain.core.rundir import SUMMARY_FILE, eval_path
from mhatrain.study.stats.cross_cell_covariance import CellPair, cross_cell_covariance, main
from mhatrain.study.stats.significance import resample_indices

from .conftest import TINY, TOY

REFERENCES = (TOY / "test.de").read_text(encoding="utf-8").splitlines()
SAMPLES = 200


def system(seed: int) -> list[str]:
    """The references with the last word of about a third of the sentences dropped (which, by `seed`)."""
    rng = random.Random(seed)
    return [line.rsplit(" ", 1)[0] if rng.random() < 0.35 else line for line in REFERENCES]


def lay_out(study: Path, cells: dict[str, dict[tuple[int, int], list[str]]]) -> None:
    """Run directories CELL/hHH-seedS with a config, a summary and test hypotheses (beam 1)."""
    for cell, runs in cells.items():
        for (heads, seed), hypotheses in runs.items():
            run = study / cell / f"h{heads:02d}-seed{seed}"
            config = load_config(TINY, [f"data.local_dir={TOY}", f"model.n_heads={heads}", "decode.beam=1"])
            run.mkdir(parents=True)
            dump_config(config, run / "config.yaml")
            (run / SUMMARY_FILE).write_text("{}")
            eval_path(run, "test", 1).parent.mkdir()
            eval_path(run, "test", 1).write_text("{}")
            eval_path(run, "test", 1, suffix=".hyp.txt").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")


def resampled_delta(h1: list[str], h8: list[str]) -> np.ndarray:
    """Δ BLEU on each resampled test set, each scored by sacreBLEU on the drawn sentences themselves."""
    delta = []
    for drawn in resample_indices(len(REFERENCES), SAMPLES):
        refs = [[REFERENCES[i] for i in drawn]]
        bleu = [sacrebleu.corpus_bleu([hyps[i] for i in drawn], refs).score for hyps in (h1, h8)]
        delta.append(bleu[0] - bleu[1])
    return np.array(delta)


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """Three cells: B repeats A's systems; C's h=1 is its h=8 (Δ ≡ 0); A's seed 2 has no h=8."""
    out = tmp_path_factory.mktemp("covariance") / "study"
    a = {(1, 1): system(1), (8, 1): system(8), (1, 2): system(2)}
    lay_out(
        out,
        {
            "model.dropout=0.0": a,
            "model.dropout=0.1": dict(a),
            "model.dropout=0.2": {(1, 1): system(3), (8, 1): system(3)},
        },
    )
    return out


def test_cells_with_the_same_systems_covary_by_the_variance_of_their_delta(study):
    pairs = cross_cell_covariance(study, samples=SAMPLES)
    variance = float(np.var(resampled_delta(system(1), system(8)), ddof=1))
    assert variance > 0.01
    assert [(p.first, p.second, p.pairs) for p in pairs] == [
        ("dropout=0.0", "dropout=0.1", 1),
        ("dropout=0.0", "dropout=0.2", 1),
        ("dropout=0.1", "dropout=0.2", 1),
    ]
    assert pairs[0].covariance == pytest.approx(variance, rel=1e-6)
    assert pairs[1].covariance == 0.0 and pairs[2].covariance == 0.0  # Δ ≡ 0 in one cell: nothing covaries


def test_a_cell_without_both_h_of_a_seed_has_no_pairs(tmp_path):
    lay_out(
        tmp_path, {"model.norm=post": {(1, 1): system(2)}, "model.norm=pre": {(1, 1): system(1), (8, 1): system(8)}}
    )
    assert cross_cell_covariance(tmp_path, samples=SAMPLES) == [CellPair("norm=post", "norm=pre", 0, None)]


def test_the_module_runs_as_a_script_and_prints_a_line_per_two_cells(study, capsys):
    main([str(study), "--samples", str(SAMPLES)])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert re.fullmatch(
        r"dropout=0\.0  vs  dropout=0\.1: 1 pairs of runs, mean covariance \+\d+\.\d{4} BLEU²", lines[0]
    )
    assert lines[1] == "dropout=0.0  vs  dropout=0.2: 1 pairs of runs, mean covariance +0.0000 BLEU²"
