"""Does the gain of h over h=8 depend on the cell? The interaction tests of a varied study (regimes.py),
run once per measure: per-token cross-entropy (the primary measure) and test BLEU.

A cell's Δ is the mean over seeds of its per-seed differences d = value(h, seed s) − value(h=8, seed s).
Its noise has the two parts that significance.py separates:
  * what differs from seed to seed: training noise and the part of the sentence noise particular to
    each trained model. The spread of the per-seed differences holds it; pooled over the cells, s² with
    n − k degrees of freedom (n differences in k cells);
  * the part of the sentence noise shared by the seeds of an h, which no number of seeds reveals: v,
    the variance the cell's own test against h=8 adds for it (its shared_sentence_variance). A cell
    whose own test has not run (one seed) takes the mean v of the cells that have one. Validation
    cross-entropy has no per-sentence values: its v is 0 in every cell (not included; regimes.py says so).
So Δ_c has variance s²/n_c + v_c. Two tests per h, each two-sided:
  * omnibus: Q = Σ_c w_c (Δ_c − Δ_w)², w_c = 1 / (s²/n_c + v_c), Δ_w the w-weighted mean; F = Q / (k − 1)
    against F(k − 1, n − k). With v = 0 this is the one-way analysis of variance of the per-seed
    differences. Holm over the h tested;
  * each cell against the reference cell (the study's first): Δ_c − Δ_ref, variance
    s²(1/n_c + 1/n_ref) + v_c + v_ref, a t-test with n − k degrees of freedom and its 95% interval. Holm
    over every (h, cell) compared.
Both take the cells as independent. They are scored on the same sentences, which correlates their
shared sentence noise; leaving out that covariance overstates the variance of a difference when it is
positive (conservative). Runs of different cells that share a seed number share nothing else that the
tests model.

The power of each cell-against-reference test (`power`) is computed, not simulated: for an interaction of
a stated size δ (Δ_c − Δ_ref = δ), the difference is normal with variance s²(1/n_c + 1/n_ref) + v_c + v_ref
(s² and v the values the study measured, taken as the truth), the test estimates s² from a scaled χ² with
n − k degrees of freedom, and the chance that |t| exceeds the two-sided critical value is integrated over
that χ² (with v = 0, the noncentral t's power). The level is 0.05 / m, m the pairs in the Holm family:
what Holm asks of the smallest p, so a lower bound on the chance that Holm calls that pair when it is the
only one with an effect. It is given at the seeds each cell has now and at the design's seeds in every cell.
"""

from __future__ import annotations

import math
import statistics

from .significance import holm

LEVEL = 0.05
MIN_SEEDS = 2  # a cell's Δ is tested against other cells only with a spread of its own

METHOD = (
    "per measure (cross-entropy, test BLEU) and h, the per-seed differences d = value(h, seed s) − value(h=8, "
    "seed s) of each cell; their spread, pooled over the cells (s², n − k degrees of freedom for n differences in "
    "k cells), holds the training noise and the part of the sentence noise particular to each model; to each "
    "cell's Δ the variance v_c that its own test against h=8 adds for the sentence noise shared by its seeds is "
    "added (var Δ_c = s²/n_c + v_c; a cell of one seed, without a test of its own, takes the other cells' mean v; "
    "validation cross-entropy has no per-sentence values, so v = 0 there: not included). Omnibus: "
    "F = Σ w_c (Δ_c − Δ_w)² / (k − 1) with w_c = 1/var Δ_c, against F(k − 1, n − k): with v = 0 the one-way "
    "analysis of variance of the per-seed differences. Each cell against the reference cell (the study's first): "
    "Δ_c − Δ_ref with variance s²(1/n_c + 1/n_ref) + v_c + v_ref, a two-sided t-test with n − k degrees of "
    "freedom. Holm–Bonferroni over the h tested (omnibus) and over every (h, cell) compared (against the "
    "reference). Cells are taken as independent (same seed numbers start their runs; the covariance of their "
    "sentence noise, scored on the same sentences, is left out) and per-seed differences as roughly normal with "
    "the same spread in every cell. It needs a cell with two seeds. Power of a cell against the reference, for a "
    "stated interaction δ: the chance the test rejects when Δ_c − Δ_ref is normal with mean δ and variance "
    "s²(1/n_c + 1/n_ref) + v_c + v_ref (s² and v as measured; s² re-estimated with n − k degrees of freedom), at two-sided level 0.05 / m (m pairs in the "
    "Holm family: the threshold of the smallest p, a lower bound on Holm's power); at the seeds each cell has "
    "now, and at the design's seeds in every cell (df = k·seeds − k). With v > 0 the t reference is conservative; "
    "the power integrates over the χ² of the estimated s² with v known, so it is the test's own rejection rate."
)


def interaction(
    rows: list[dict], baseline: int, effect: float | None = None, design_seeds: int | None = None
) -> list[dict]:
    """Per h other than the baseline, the omnibus test and each cell against the reference cell. rows:
    one measure's (cell, heads, differences, shared_variance), cells in the study's order. With effect,
    each pair also gets its power to find an interaction of that size (`power`): at the seeds it has,
    and at design_seeds per cell."""
    tests = [_tests_of(h, rows) for h in sorted({row["heads"] for row in rows} - {baseline})]
    for test, adjusted in zip(tests, holm([t["p"] for t in tests])):
        test["p_holm"] = adjusted
        test["verdict"] = _verdict(test["p"], adjusted, "Δ differs between cells")
    pairs = [pair for test in tests for pair in test["against_reference"]]
    for pair, adjusted in zip(pairs, holm([p["p"] for p in pairs])):
        pair["p_holm"] = adjusted
        larger = pair["difference"] is not None and pair["difference"] > 0
        pair["verdict"] = (
            f"not tested ({pair['not_tested']})"
            if pair.get("not_tested")
            else _verdict(pair["p"], adjusted, f"Δ {'larger' if larger else 'smaller'} than in the reference cell")
        )
    if effect is not None:  # the Holm family at the design: every pair listed
        for pair in pairs:
            pair["power"] = _pair_power(
                pair, next(t for t in tests if t["heads"] == pair["heads"]), effect, len(pairs), design_seeds
            )
    for test in tests:
        test.pop("_power_inputs", None)
    return tests


def power(effect: float, s2: float, seeds: tuple[int, int], shared: tuple[float, float], df: int, alpha: float):
    """The chance that the two-sided t-test of one cell against the reference (level alpha, df degrees of
    freedom) rejects when their Δ differ by `effect`, under the tests' model: the difference is normal with
    variance s²(1/n_c + 1/n_ref) + v_c + v_ref, and the test estimates s² with df degrees of freedom (a
    scaled χ²) while taking v as known. Integrated over that χ² numerically: with v = 0 it is the
    noncentral t's power; with v > 0 the t reference is conservative, and this says by how much. None
    without degrees of freedom or with no variance."""
    from scipy import integrate, stats  # on use, as below

    model = s2 * (1 / seeds[0] + 1 / seeds[1])
    known = shared[0] + shared[1]
    if df <= 0 or model + known <= 0:
        return None
    critical = float(stats.t.ppf(1 - alpha / 2, df))
    sd = math.sqrt(model + known)

    def rejects(x: float) -> float:  # x: the χ² draw behind the estimated s²
        threshold = critical * math.sqrt(model * x / df + known)
        return float(stats.norm.sf((threshold - effect) / sd) + stats.norm.cdf((-threshold - effect) / sd))

    value, _ = integrate.quad(lambda x: rejects(x) * float(stats.chi2.pdf(x, df)), 0, math.inf, limit=200)
    return min(1.0, max(0.0, value))


def _pair_power(pair: dict, test: dict, effect: float, family: int, design_seeds: int | None) -> dict:
    """The pair's power for an interaction of `effect`, at its seeds now and at design_seeds per cell."""
    out = {
        "effect": effect,
        "alpha": round(LEVEL / max(1, family), 4),
        "now": None,
        "design": None,
        "design_seeds": design_seeds,
    }
    inputs = test.get("_power_inputs")
    if not inputs or pair["cell"] not in inputs["seeds"] or pair["reference"] not in inputs["seeds"]:
        return out
    shared = (inputs["shared"][pair["cell"]], inputs["shared"][pair["reference"]])
    if not pair.get("not_tested"):  # tested now: both cells have two seeds or more
        now = power(
            effect,
            inputs["s2"],
            (inputs["seeds"][pair["cell"]], inputs["seeds"][pair["reference"]]),
            shared,
            inputs["df"],
            LEVEL / max(1, family),
        )
        out["now"] = None if now is None else round(now, 3)
    if design_seeds:
        k = len(inputs["seeds"])
        design = power(
            effect, inputs["s2"], (design_seeds, design_seeds), shared, k * design_seeds - k, LEVEL / max(1, family)
        )
        out["design"] = None if design is None else round(design, 3)
    return out


def _verdict(p: float | None, adjusted: float | None, found: str) -> str:
    if p is None or adjusted is None:
        return "untestable"
    return found if adjusted < LEVEL else "no detectable difference between cells"


def _tests_of(h: int, rows: list[dict]) -> dict:
    from scipy import stats  # on use, as in significance.py: `ablate`, which imports regimes.py, needs none

    listed = list(dict.fromkeys(row["cell"] for row in rows if row["heads"] == h))  # the study's order
    groups = {row["cell"]: row for row in rows if row["heads"] == h and row["differences"]}
    n, k = sum(len(row["differences"]) for row in groups.values()), len(groups)
    means = {cell: statistics.fmean(row["differences"]) for cell, row in groups.items()}
    test = {"heads": h, "cells": k, "differences": n, "F": None, "df": None, "p": None, "against_reference": []}
    if means:
        test["delta_range"] = [round(min(means.values()), 4), round(max(means.values()), 4)]
    df = n - k
    s2 = sum((x - means[c]) ** 2 for c, row in groups.items() for x in row["differences"]) / df if df > 0 else None
    known = [row["shared_variance"] for row in groups.values() if row.get("shared_variance") is not None]
    fallback = statistics.fmean(known) if known else 0.0  # a cell without a test of its own has no v to give
    shared = {
        c: fallback if (groups.get(c) or {}).get("shared_variance") is None else groups[c]["shared_variance"]
        for c in listed
    }
    # A cell of one seed has no spread of its own: its Δ is not tested against others, and the omnibus
    # test runs over the cells of two seeds or more (the pooled s² is the same: one seed adds no df).
    tested = [c for c, row in groups.items() if len(row["differences"]) >= MIN_SEEDS]
    test["tested_cells"] = len(tested)
    if s2 is not None:
        variance = {c: s2 / len(row["differences"]) + shared[c] for c, row in groups.items()}
        test["pooled_sd"] = round(math.sqrt(s2), 4)
        test["_power_inputs"] = {
            "s2": s2,
            "df": df,
            "seeds": {c: len((groups.get(c) or {}).get("differences") or []) for c in listed},
            "shared": shared,
        }
    if s2 is not None and len(tested) >= 2:
        test["df"] = [len(tested) - 1, df]
        if all(variance[c] > 0 for c in tested):
            weights = {c: 1.0 / variance[c] for c in tested}
            centre = sum(weights[c] * means[c] for c in tested) / sum(weights.values())
            f = sum(weights[c] * (means[c] - centre) ** 2 for c in tested) / (len(tested) - 1)
            test["F"] = round(f, 4)
            test["p"] = float(stats.f.sf(f, len(tested) - 1, df))
        else:
            test["p"] = 1.0 if len({means[c] for c in tested}) == 1 else 0.0
    reference = listed[0] if listed else None
    for cell in listed[1:]:
        pair = {
            "heads": h,
            "cell": cell,
            "reference": reference,
            "delta": None if cell not in means else round(means[cell], 4),
            "delta_reference": None if reference not in means else round(means[reference], 4),
            "difference": None,
            "p": None,
        }
        test["against_reference"].append(pair)
        if cell not in means or reference not in means:
            pair["not_tested"] = "no seed tested yet" + ("" if cell not in means else " in the reference cell")
            continue
        estimate = means[cell] - means[reference]
        pair.update(difference=round(estimate, 4), df=df)
        if s2 is None or cell not in tested or reference not in tested:
            pair["not_tested"] = f"one seed in {'this' if cell not in tested else 'the reference'} cell"
            continue
        var = variance[cell] + variance[reference]
        half = float(stats.t.ppf(0.975, df)) * math.sqrt(var)
        p = float(2 * stats.t.sf(abs(estimate) / math.sqrt(var), df)) if var > 0 else (0.0 if estimate else 1.0)
        pair.update(ci95=[round(estimate - half, 4), round(estimate + half, 4)], p=p)
    return test
