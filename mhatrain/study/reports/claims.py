"""What others claim about the head count and what this study concludes: the paper's Table 3 (A), the
explainer article's claim, ours beside them, and the conclusion in plain sentences that say only what
the h × seed-block test supports (comparison.SIGNIFICANCE_METHOD).
"""

from __future__ import annotations

from ..stats.comparison import BASELINE_HEADS, LEVEL

PAPER_SOURCE = (
    'Vaswani et al. 2017, "Attention Is All You Need", Table 3 rows (A): WMT14 English→German, '
    "newstest2013 (dev), base model (N=6, d_model=512), beam 4, α=0.6; PPL per word-piece"
)
PAPER_TABLE_3A = {  # h: d_k = d_v, dev perplexity, dev BLEU
    1: {"d_k": 512, "ppl": 5.29, "bleu": 24.9},
    4: {"d_k": 128, "ppl": 5.00, "bleu": 25.5},
    8: {"d_k": 64, "ppl": 4.92, "bleu": 25.8},
    16: {"d_k": 32, "ppl": 4.91, "bleu": 25.8},
    32: {"d_k": 16, "ppl": 5.01, "bleu": 25.4},
}
ARTICLE_CLAIM = {
    "text": "8 heads beat 1 head by 2.3 BLEU",
    "h8_minus_h1_bleu": 2.3,
    "source": "the explainer article the project starts from (a claim to check, not to trust)",
}


def claims(by_heads: list[dict], tests: dict) -> dict:
    """The report's "claims": h=8 − h=1 by the article, the paper and us, and the conclusion.
    by_heads: the report's rows per h (by_heads.py); tests: its "significance" (comparison.py)."""
    rows = {row["heads"]: row for row in by_heads}
    ours = None
    if 1 in rows and rows[1]["diff_to_h8"] is not None:
        diff = rows[1]["diff_to_h8"]
        ours = {
            "test_bleu": -diff["test_bleu"] if diff["test_bleu"] is not None else None,
            "valid_bleu": -diff["valid_bleu"] if diff["valid_bleu"] is not None else None,
            "seed_test": rows[1]["seed_test"],
        }
    return {
        "article": ARTICLE_CLAIM,
        "paper": {
            "h8_minus_h1_bleu": round(PAPER_TABLE_3A[8]["bleu"] - PAPER_TABLE_3A[1]["bleu"], 2),
            "text": "single-head attention is 0.9 BLEU worse than the best setting (newstest2013 dev)",
        },
        "ours": ours,  # h=8 minus h=1, mean over seeds; None until both have a finished run
        "conclusion": " ".join(
            part
            for part in (
                cross_entropy_conclusion(by_heads, tests.get("cross_entropy") or {}),
                seed_count_sentence(by_heads),
                conclusion(by_heads, tests.get("trend"), tests.get("left_out")),
            )
            if part
        ),
    }


# ----------------------------------------------------------------------------- the primary measure


SOURCE_WORDS = {
    "test": "the test set (seed and test-sentence noise)",
    "validation": "the validation set (seed noise on these sentences: no per-sentence values to add the sentence "
    "noise the seeds of an h share)",
}


def cross_entropy_conclusion(by_heads: list[dict], tests: dict) -> str:
    """The verdicts on per-token cross-entropy (the primary measure) and its trend, where tested."""
    tested = [row for row in by_heads if (row.get("cross_entropy") or {}).get("test")]
    if not tested or all(row["cross_entropy"]["test"].get("p_adjusted") is None for row in tested):
        return ""
    parts = []
    for verdict in ("better", "worse", "no detectable difference"):
        hs = [row for row in tested if row["cross_entropy"]["test"]["verdict"] == verdict]
        if hs:
            effects = _join(_ce_effect(row) for row in hs)
            parts.append(
                f"{_heads_list(hs)} {'is' if len(hs) == 1 else 'are'} {verdict} than h={BASELINE_HEADS} ({effects})"
                if verdict != "no detectable difference"
                else f"no detectable difference from h={BASELINE_HEADS} for {_heads_list(hs)} ({effects})"
            )
    text = (
        f"Cross-entropy on {SOURCE_WORDS[tests['source']]}, the primary measure (nats per reference token, "
        f"lower is better; same test, Holm-adjusted two-sided p < {LEVEL}): {'; '.join(parts)}."
    )
    trend = tests.get("trend")
    if trend and trend["p_value"] < LEVEL:
        low, high = trend["ci95"]
        text += (
            f" Cross-entropy {'rises' if trend['slope_per_doubling'] > 0 else 'falls'} by "
            f"{abs(trend['slope_per_doubling']):.4f} nats per doubling of h (95% interval {low:+.4f} to {high:+.4f}, "
            f"p {_p_text(trend['p_value'])})."
        )
    return text


def seed_count_sentence(by_heads: list[dict]) -> str:
    """In how many seeds h=1 did at least as well as h=8 of the same seed, on each measure."""
    rows = {row["heads"]: row for row in by_heads}
    if 1 not in rows or BASELINE_HEADS not in rows:
        return ""
    counts = []
    ce_metric = "test_nll" if (rows[1].get("cross_entropy") or {}).get("source") == "test" else "valid_nll"
    ce_name = f"{'test' if ce_metric == 'test_nll' else 'validation'} cross-entropy"
    for metric, name, better in ((ce_metric, ce_name, min), ("test_bleu", "test BLEU", max)):
        ours, base = rows[1][metric]["per_seed"], rows[BASELINE_HEADS][metric]["per_seed"]
        seeds = [s for s in ours if s in base and ours[s] is not None and base[s] is not None]
        if seeds:
            wins = sum(better(ours[s], base[s]) == ours[s] for s in seeds)
            counts.append(f"on {name} in {wins} of {len(seeds)}")
    if not counts:
        return ""
    return f"Seed by seed, h=1 does at least as well as h={BASELINE_HEADS} of the same seed {' and '.join(counts)}."


def _ce_effect(row: dict) -> str:
    test = row["cross_entropy"]["test"]
    if test.get("borderline"):
        return f"h={row['heads']}: {test['mean_difference']:+.4f}, adjusted p {_p_text(test['p_adjusted'])}, borderline"
    if test.get("p_adjusted") is None:
        return f"h={row['heads']}: {test['mean_difference']:+.4f}"
    return f"h={row['heads']}: {test['mean_difference']:+.4f}, adjusted p {_p_text(test['p_adjusted'])}"


def _p_text(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"= {p:.3f}"


# ----------------------------------------------------------------------------- the conclusion


def conclusion(by_heads: list[dict], trend: dict | None = None, left_out: list[str] | None = None) -> str:
    """Plain sentences that say only what the h × seed-block test supports (SIGNIFICANCE_METHOD): the
    verdicts, the trend against log2 h where its p is below LEVEL, and which published gains of h=8
    over h=1 the 95% interval rules out."""
    tested = [row for row in by_heads if row["seed_test"] is not None]
    if not tested:
        if all(row["heads"] != BASELINE_HEADS for row in by_heads):
            return (
                f"Nothing tested: every test is against h={BASELINE_HEADS}, which this grid lacks "
                f"(add {BASELINE_HEADS} to --heads)."
            )
        return f"Nothing tested yet: it needs finished h={BASELINE_HEADS} runs and runs of another h" + (
            f" that meet the measure (left out: {', '.join(left_out)})." if left_out else "."
        )
    if all(row["seed_test"].get("p_adjusted") is None for row in tested):
        return (
            f"Not tested: with one seed per h nothing measures the seed noise, so no difference from "
            f"h={BASELINE_HEADS} can be called ({_join(_effect(row) for row in tested)})."
        )
    text = (
        f"Test BLEU against h={BASELINE_HEADS} ({_seeds_text(tested)}, h × seed-block test over seed and "
        f"test-sentence noise, Holm-adjusted two-sided p < {LEVEL}): {'; '.join(_verdict_clauses(tested))}."
    )
    if trend and trend["p_value"] < LEVEL:
        text += _trend_sentence(trend)
    h1 = next((row["seed_test"] for row in tested if row["heads"] == 1), None)
    if h1 and h1.get("ci95"):
        text += _ruled_out_sentence(h1)
    return text


def _seeds_text(tested: list[dict]) -> str:
    """How many seeds each h has: '3 seeds per h', '3/5 seeds per h'."""
    counts = {len(row["seed_test"]["seeds"]) for row in tested}
    seeds = sorted(counts | {len(tested[0]["seed_test"].get("baseline_seeds") or [])} - {0})
    return f"{'/'.join(map(str, seeds))} seed{'s' if seeds != [1] else ''} per h"


def _verdict_clauses(tested: list[dict]) -> list[str]:
    """One clause per verdict: which h are better, worse, or not detectably different from h=8."""
    parts = []
    for verdict in ("better", "worse"):
        hs = [row for row in tested if row["seed_test"]["verdict"] == verdict]
        if hs:
            parts.append(
                f"{_heads_list(hs)} "
                f"{'is' if len(hs) == 1 else 'are'} {verdict} than h={BASELINE_HEADS} "
                f"({_join(_effect(row) for row in hs)})"
            )
    same = [row for row in tested if row["seed_test"]["verdict"] == "no detectable difference"]
    if same:
        parts.append(
            f"no detectable difference from h={BASELINE_HEADS} for {_heads_list(same)} "
            f"({_join(_effect(row) for row in same)})"
        )
    return parts


def _trend_sentence(trend: dict) -> str:
    """BLEU per doubling of h with its 95% interval (said only where the trend's p is below LEVEL)."""
    low, high = trend["ci95"]
    return (
        f" BLEU {'falls' if trend['slope_per_doubling'] < 0 else 'rises'} by {abs(trend['slope_per_doubling']):.2f} "
        f"per doubling of h (95% interval {low:+.2f} to {high:+.2f}, p = {trend['p_value']:.4f})."
    )


def _ruled_out_sentence(h1: dict) -> str:
    """Which published gains of h=8 over h=1 lie outside the 95% interval of h=1 − h=8 ('' if none)."""
    gains = [
        (
            f"the paper's (+{PAPER_TABLE_3A[8]['bleu'] - PAPER_TABLE_3A[1]['bleu']:.1f})",
            PAPER_TABLE_3A[8]["bleu"] - PAPER_TABLE_3A[1]["bleu"],
        ),
        (f"the explainer's (+{ARTICLE_CLAIM['h8_minus_h1_bleu']:.1f})", ARTICLE_CLAIM["h8_minus_h1_bleu"]),
    ]
    ruled_out = [name for name, gain in gains if -gain < h1["ci95"][0]]
    if not ruled_out:
        return ""
    return (
        f" A gain of h={BASELINE_HEADS} over h=1 as large as {_join(ruled_out)} lies outside the 95% "
        f"interval of h=1 − h={BASELINE_HEADS} ({h1['ci95'][0]:+.2f} to {h1['ci95'][1]:+.2f})."
    )


def _heads_list(rows: list[dict]) -> str:
    return _join(f"h={row['heads']}" for row in rows)


def _effect(row: dict) -> str:
    """An h's difference to h=8 and its adjusted p, as the conclusion quotes them."""
    test = row["seed_test"]
    if test["mean_difference"] is None:
        return f"h={row['heads']}: no paired seed"
    if test.get("p_adjusted") is None:
        return f"h={row['heads']}: {test['mean_difference']:+.2f} BLEU"
    borderline = ", borderline: one run or the resampling seed changes it" if test.get("borderline") else ""
    return f"h={row['heads']}: {test['mean_difference']:+.2f} BLEU, adjusted p = {test['p_adjusted']:.3f}{borderline}"


def _join(items) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
