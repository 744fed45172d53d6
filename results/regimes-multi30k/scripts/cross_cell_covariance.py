"""The covariance, over resampled test sets, of Δ = BLEU(h=1) − BLEU(h=8) between runs of two cells of the
regime study: the term the interaction tests leave out (docs/ablation.md, "taken as independent").
Run from the repository root: .venv/bin/python results/regimes-multi30k/scripts/cross_cell_covariance.py"""

import gzip
import itertools
from pathlib import Path

import numpy as np

from mhatrain.study import significance as S
from mhatrain.study.record import parse_cell
from mhatrain.study.regimes import cell_labels

STUDY = Path("results/regimes-multi30k")
REFERENCES = Path("../shared/data/multi30k/test_2016_flickr.de.gz")

references = gzip.open(REFERENCES, "rt", encoding="utf-8").read().splitlines()
folders = sorted(p for p in STUDY.iterdir() if p.is_dir() and p.name.startswith("model."))
labels = dict(zip(folders, cell_labels([dict(parse_cell(p.name)) for p in folders])))
columns, stats = {}, []
for folder in folders:
    for h, seed in itertools.product((1, 8), (1, 2, 3)):
        hyps = folder / f"h{h:02d}-seed{seed}" / "eval" / "test.beam4.hyp.txt"
        if hyps.is_file():
            columns[folder, h, seed] = len(stats)
            stats.append(S.sentence_statistics(hyps.read_text(encoding="utf-8").splitlines(), references))
resampled = S.resampled_bleus(np.stack(stats), S.resample_counts(len(references), S.SENTENCE_SAMPLES))
delta = {
    folder: [
        resampled[:, columns[folder, 1, s]] - resampled[:, columns[folder, 8, s]]
        for s in (1, 2, 3)
        if (folder, 1, s) in columns and (folder, 8, s) in columns
    ]
    for folder in folders
}
for a, b in itertools.combinations(folders, 2):
    pairs = [float(np.cov(x, y)[0, 1]) for x in delta[a] for y in delta[b]]
    print(f"{labels[a]}  vs  {labels[b]}: {len(pairs)} pairs of runs, mean covariance {np.mean(pairs):+.4f} BLEU²")
