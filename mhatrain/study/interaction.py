"""Does the gain of h over h=8 depend on the cell? The interaction tests of a varied study (regimes.py).

A cell's Δ is the mean over seeds of its per-seed differences d = BLEU(h, seed s) − BLEU(h=8, seed s).
Its noise has the two parts that significance.py separates:
  * what differs from seed to seed: training noise and the part of the test-sentence noise particular to
    each trained model. The spread of the per-seed differences holds it; pooled over the cells, s² with
    n − k degrees of freedom (n differences in k cells);
  * the part of the test-sentence noise shared by the seeds of an h, which no number of seeds reveals: v,
    the variance the cell's own test against h=8 adds for it (its shared_sentence_variance). A cell
    whose own test has not run (one seed) takes the mean v of the cells that have one.
So Δ_c has variance s²/n_c + v_c. Two tests per h, each two-sided:
  * omnibus: Q = Σ_c w_c (Δ_c − Δ_w)², w_c = 1 / (s²/n_c + v_c), Δ_w the w-weighted mean; F = Q / (k − 1)
    against F(k − 1, n − k). With v = 0 this is the one-way analysis of variance of the per-seed
    differences. Holm over the h tested;
  * each cell against the reference cell (the study's first): Δ_c − Δ_ref, variance
    s²(1/n_c + 1/n_ref) + v_c + v_ref, a t-test with n − k degrees of freedom and its 95% interval. Holm
    over every (h, cell) compared.
Both take the cells as independent. They are scored on the same test sentences, which correlates their
shared sentence noise; leaving out that covariance overstates the variance of a difference when it is
positive (conservative). Runs of different cells that share a seed number share nothing else that the
tests model.
"""

from __future__ import annotations

import math
import statistics

from .significance import holm

LEVEL = 0.05

METHOD = (
    "per h, the per-seed differences d = BLEU(h, seed s) − BLEU(h=8, seed s) of each cell; their spread, pooled "
    "over the cells (s², n − k degrees of freedom for n differences in k cells), holds the training noise and the "
    "part of the test-sentence noise particular to each model; to each cell's Δ the variance v_c that its own "
    "test against h=8 adds for the sentence noise shared by its seeds is added (var Δ_c = s²/n_c + v_c; a cell of "
    "one seed, without a test of its own, takes the other cells' mean v). Omnibus: "
    "F = Σ w_c (Δ_c − Δ_w)² / (k − 1) with w_c = 1/var Δ_c, against F(k − 1, n − k): with v = 0 the one-way "
    "analysis of variance of the per-seed differences. Each cell against the reference cell (the study's first): "
    "Δ_c − Δ_ref with variance s²(1/n_c + 1/n_ref) + v_c + v_ref, a two-sided t-test with n − k degrees of "
    "freedom. Holm–Bonferroni over the h tested (omnibus) and over every (h, cell) compared (against the "
    "reference). Cells are taken as independent (same seed numbers start their runs; the covariance of their "
    "sentence noise, scored on the same sentences, is left out) and per-seed differences as roughly normal with "
    "the same spread in every cell. It needs a cell with two seeds."
)


def interaction(rows: list[dict], baseline: int) -> list[dict]:
    """Per h other than the baseline, the omnibus test and each cell against the reference cell. rows:
    the regime map's (cell, heads, differences, shared_variance), cells in the study's order."""
    tests = [_tests_of(h, rows) for h in sorted({row["heads"] for row in rows} - {baseline})]
    for test, adjusted in zip(tests, holm([t["p"] for t in tests])):
        test["p_holm"] = adjusted
        test["verdict"] = _verdict(test["p"], adjusted, "Δ differs between cells")
    pairs = [pair for test in tests for pair in test["against_reference"]]
    for pair, adjusted in zip(pairs, holm([p["p"] for p in pairs])):
        pair["p_holm"] = adjusted
        larger = pair["difference"] is not None and pair["difference"] > 0
        pair["verdict"] = _verdict(
            pair["p"], adjusted, f"Δ {'larger' if larger else 'smaller'} than in the reference cell"
        )
    return tests


def _verdict(p: float | None, adjusted: float | None, found: str) -> str:
    if p is None or adjusted is None:
        return "untestable"
    return found if adjusted < LEVEL else "no detectable difference between cells"


def _tests_of(h: int, rows: list[dict]) -> dict:
    from scipy import stats  # on use, as in significance.py: `ablate`, which imports regimes.py, needs none

    groups = {row["cell"]: row for row in rows if row["heads"] == h and row["differences"]}
    n, k = sum(len(row["differences"]) for row in groups.values()), len(groups)
    means = {cell: statistics.fmean(row["differences"]) for cell, row in groups.items()}
    test = {"heads": h, "cells": k, "differences": n, "F": None, "df": None, "p": None, "against_reference": []}
    if means:
        test["delta_range"] = [round(min(means.values()), 4), round(max(means.values()), 4)]
    if k < 2 or n <= k:
        test["against_reference"] = _untestable_pairs(h, rows, means)
        return test
    df = n - k
    s2 = sum((x - means[c]) ** 2 for c, row in groups.items() for x in row["differences"]) / df
    known = [row["shared_variance"] for row in groups.values() if row.get("shared_variance") is not None]
    fallback = statistics.fmean(known) if known else 0.0  # a cell of one seed has no test of its own to give v
    shared = {
        c: fallback if row.get("shared_variance") is None else row["shared_variance"] for c, row in groups.items()
    }
    variance = {c: s2 / len(row["differences"]) + shared[c] for c, row in groups.items()}
    test["df"] = [k - 1, df]
    test["pooled_sd"] = round(math.sqrt(s2), 4)
    if all(v > 0 for v in variance.values()):
        weights = {c: 1.0 / v for c, v in variance.items()}
        centre = sum(weights[c] * means[c] for c in groups) / sum(weights.values())
        f = sum(weights[c] * (means[c] - centre) ** 2 for c in groups) / (k - 1)
        test["F"] = round(f, 4)
        test["p"] = float(stats.f.sf(f, k - 1, df))
    else:
        test["p"] = 1.0 if len(set(means.values())) == 1 else 0.0
    reference = next((row["cell"] for row in rows if row["heads"] == h), None)
    for cell in groups:
        if cell == reference:
            continue
        pair = {"heads": h, "cell": cell, "reference": reference, "delta": round(means[cell], 4)}
        if reference not in groups:
            test["against_reference"].append({**pair, "delta_reference": None, "difference": None, "p": None})
            continue
        estimate = means[cell] - means[reference]
        var = variance[cell] + variance[reference]
        half = float(stats.t.ppf(0.975, df)) * math.sqrt(var)
        p = float(2 * stats.t.sf(abs(estimate) / math.sqrt(var), df)) if var > 0 else (0.0 if estimate else 1.0)
        pair.update(
            delta_reference=round(means[reference], 4),
            difference=round(estimate, 4),
            ci95=[round(estimate - half, 4), round(estimate + half, 4)],
            df=df,
            p=p,
        )
        test["against_reference"].append(pair)
    return test


def _untestable_pairs(h: int, rows: list[dict], means: dict) -> list[dict]:
    """The cells a test could not compare yet, so the tables still list them."""
    reference = next((row["cell"] for row in rows if row["heads"] == h), None)
    return [
        {
            "heads": h,
            "cell": cell,
            "reference": reference,
            "delta": round(mean, 4),
            "delta_reference": None if reference not in means else round(means[reference], 4),
            "difference": None,
            "p": None,
        }
        for cell, mean in means.items()
        if cell != reference
    ]
