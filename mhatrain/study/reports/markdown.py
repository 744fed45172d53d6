"""report.md of a head-count study: one function per section, in the order the page shows them, and
to_markdown, which puts them together.

Sections: the study (config, code, provenance), the conclusion, the table by h, each run, the tests
against h=8, what the heads do, beside the paper and the article, the fixed layouts of `ablate --layout`
(layouts_section.py), BLEU by source length (lengths.py), notes.
"""

from __future__ import annotations

from ...analysis.roles import ROLE_THRESHOLDS, ROLES, STUDY_MEASURES
from ...core import provenance
from ...core.formatting import MISSING, fraction, interval, md_table, num, p_value, percent, signed
from ..grid.run_records import MEASURE
from ..stats.comparison import BASELINE_HEADS, factor_text
from .claims import PAPER_SOURCE
from .heads_table import HEADERS, row_cells, status_line
from .layouts_section import to_markdown as layouts_markdown
from .lengths import to_markdown as lengths_markdown


def to_markdown(report: dict) -> str:
    """The whole report.md of a report (grid_report.build_report)."""
    sections = [
        _study_section,
        _conclusion_section,
        _by_heads_section,
        _runs_section,
        _significance_section,
        _head_roles_section,
        _claims_section,
    ]
    out = [line for section in sections for line in section(report)]
    out += layouts_markdown(report.get("layouts"))
    out += lengths_markdown(report.get("lengths"))
    if report["notes"]:
        out += ["## Notes", "", *[f"- {note}" for note in report["notes"]], ""]
    return "\n".join(out)


# ----------------------------------------------------------------------------- the study


def _study_section(report: dict) -> list[str]:
    """The title, what is done, the config, the code and the provenance of the runs."""
    grid = report["grid"]
    out = [
        f"# Head-count study: {report['study_dir']}",
        "",
        f"The paper's Table 3, rows (A), on our data. {status_line(report)}.",
        "",
    ]
    if grid.get("config"):
        out += [_config_line(report), ""]
    return out + [
        _code_line(grid),
        "",
        provenance.summary_line(report["provenance"]).replace("provenance:", "Provenance:", 1),
        "",
    ]


def _config_line(report: dict) -> str:
    """The config and its overrides, d_model, and how d_k follows h (so whether parameters stay constant)."""
    grid = report["grid"]
    constant = {row["parameters"] for row in report["by_heads"] if isinstance(row["parameters"], int)}
    extra = " ".join(f"--set {o}" for o in grid.get("overrides") or [])
    if grid.get("d_head"):
        sizes = (
            f"d_k = d_v = model.d_head = {grid['d_head']} at every h, so parameters and FLOPs grow with h "
            f"(each run's parameters: below)."
        )
    else:
        sizes = "d_k = d_v = d_model / h, so parameters stay constant" + (
            f" ({num(constant.pop())} in every run)." if len(constant) == 1 else "."
        )
    return f"Config: `{grid['config']}`{' ' + extra if extra else ''}; d_model = {grid['d_model']}; " + sizes


def _code_line(grid: dict) -> str:
    """Which commit(s) of mhatrain trained and evaluated the runs."""
    code = grid.get("code") or []
    if not code:
        return "Code: not recorded (a study made before mhatrain recorded its commit)."
    names = [
        f"`{c.get('commit') or 'unknown commit'}`{' (with uncommitted changes)' if c.get('dirty') else ''} "
        f"(mhatrain {c.get('version')})"
        for c in code
    ]
    source = grid.get("code_source", "study.yaml")
    if len(names) > 1:
        lead = f"Code versions that ran this study ({source}): "
    elif source == "study.yaml":
        lead = "Every run trained and evaluated by commit "
    else:  # no study.yaml: what the runs' provenance records
        lead = "Every session in the runs' provenance ran commit "
    return lead + ", ".join(names) + "."


def _conclusion_section(report: dict) -> list[str]:
    """The conclusion (claims.conclusion) and the measure it rests on."""
    measure = report.get("measure") or MEASURE
    left_out = report["significance"].get("left_out") or []
    return [
        "## Conclusion",
        "",
        report["claims"]["conclusion"],
        "",
        f"Measure: {measure['text']}"
        + (f" Left out here: {', '.join(left_out)} (see Notes)." if left_out else " Every finished point meets it."),
        "",
    ]


# ----------------------------------------------------------------------------- the tables


def _by_heads_section(report: dict) -> list[str]:
    """The table of one row per h (heads_table.py) and what its columns mean."""
    return [
        "## By number of heads (mean ± std over the tested seeds)",
        "",
        md_table(HEADERS, [row_cells(row) for row in report["by_heads"]]),
        "",
        "Every number comes from the runs the tests use (runs tested); a finished run left out of them is "
        "counted as left out and shown only in the table of runs. Cross-entropy: nats per reference token "
        "(teacher-forced, no label smoothing) on the split named in the tests below, the primary measure. "
        "PPL: validation perplexity per subword token at the evaluated (best) checkpoint (the paper's is per "
        "word-piece on WMT14 newstest2013). BLEU and chrF: sacreBLEU on detokenised output of the best "
        "checkpoint, beam search as in decode.beam / decode.alpha. 95% interval over seeds: mean ± t(n−1)·sd/√n. "
        "Δ (every measure): h minus h=8 as the h × seed-block fit of all tested runs estimates it, the "
        "difference the tests are about: within-seed differences, with each seed's effect estimated from "
        "every h (with every h on the same seeds, the mean of per-seed differences). A verdict marked "
        "borderline changes when one run is left out, or (BLEU) with another resampling seed (see below). "
        "p: two-sided tests against h=8, raw and Holm-adjusted over the h compared (see below). The paper's "
        "numbers are on another data set and model size: compare the shape of the curve and the differences "
        "to h=8, not the levels.",
        "",
    ]


RUN_HEADERS = [
    "run",
    "h",
    "seed",
    "status",
    "parameters",
    "evaluated update",
    "lowest valid loss at",
    "trained updates",
    "precision · device",
    "valid PPL",
    "valid cross-entropy",
    "test cross-entropy",
    "valid BLEU",
    "test BLEU",
    "test chrF",
    "in the tests",
    "train s",
    "tokens/s",
]


def _runs_section(report: dict) -> list[str]:
    """The table of one row per run (RUN_HEADERS)."""
    return ["## Each run", "", md_table(RUN_HEADERS, [_run_cells(r) for r in report["runs"]]), ""]


def _run_cells(run: dict) -> list[str]:
    return [
        run["name"],
        str(run["heads"]),
        str(run["seed"]),
        run["status"],
        num(run["parameters"]),
        num(run["updates"]),
        num(run.get("loss_selected_update")),
        num(run.get("trained_updates")),
        f"{run.get('precision') or MISSING} · {run.get('device') or MISSING}",
        num(run["valid_ppl"], 3),
        num(run.get("valid_nll"), 4),
        num(run.get("test_nll"), 4),
        num(run["valid_bleu"]),
        num(run["test_bleu"]),
        num(run["test_chrf"]),
        "yes" if run.get("tested") else ("left out" if run["status"] == "done" else MISSING),
        num(run["train_seconds"], 1),
        num(run["tokens_per_s"], 0),
    ]


# ----------------------------------------------------------------------------- the tests against h=8


def _significance_section(report: dict) -> list[str]:
    """The verdict's test, the trend, each seed's test and the methods; or why there is no test yet."""
    sig = report["significance"]
    out = [f"## Significance against h={BASELINE_HEADS} (test set)", ""]
    if not sig["seed_level"]:
        return out + [
            f"No test yet: it needs a finished h={BASELINE_HEADS} run and a finished run of another h of the "
            f"same seed.",
            "",
        ]
    out += _cross_entropy_lines(sig.get("cross_entropy") or {})
    out += _seed_level_lines(sig)
    out += _trend_lines(sig.get("trend"))
    out += _sensitivity_lines(sig.get("sensitivity"), {str(t["heads"]): t for t in sig["seed_level"]})
    out += _per_seed_lines(sig)
    out += [f"Methods ({sig['samples']} resamples of the test sentences, numpy seed {sig['bootstrap_seed']}):", ""]
    return out + [f"- {name.replace('_', ' ')}: {text}" for name, text in sig["method"].items()] + [""]


SEED_LEVEL_HEADERS = [
    "h",
    "seeds",
    f"Δ BLEU vs h={BASELINE_HEADS}",
    "95% interval of Δ",
    "p",
    "p Holm",
    "verdict",
    "variance: seeds + own sentences",
    "variance: shared sentences",
    "precision · device",
]


def _seed_level_lines(sig: dict) -> list[str]:
    """The h × seed-block test of each h (the verdict's), the fit behind it, and precision/device warnings."""
    rows = [
        [
            str(t["heads"]),
            ",".join(map(str, t["seeds"])),
            signed(t["mean_difference"]),
            interval(t["ci95"]),
            p_value(t["p_value"]),
            p_value(t["p_adjusted"]),
            t["verdict"] + (" (borderline)" if t.get("borderline") else ""),
            num(t["model_variance"], 3),
            num(t["shared_sentence_variance"], 3),
            factor_text(t["factors"]),
        ]
        for t in sig["seed_level"]
    ]
    first = sig["seed_level"][0]
    factor_notes = [f"- {t['factor_note']}" for t in sig["seed_level"] if t.get("factor_note")]
    return [
        f"Over seeds and test sentences (the verdict's test; measure: {sig.get('measure', MEASURE['name'])}):",
        "",
        md_table(SEED_LEVEL_HEADERS, rows),
        "",
        f"h={BASELINE_HEADS}: seeds {','.join(map(str, first['baseline_seeds']))}; "
        f"{factor_text(first['baseline_factors'])}. Residual standard deviation of the "
        f"h × seed-block fit: {num(sig.get('residual_sd'))} BLEU, {sig.get('df')} degrees of freedom.",
        "",
        *factor_notes,
        *([""] if factor_notes else []),
    ]


CE_HEADERS = [
    "h",
    "seeds",
    f"Δ cross-entropy vs h={BASELINE_HEADS} (nats/token)",
    "95% interval of Δ",
    "p",
    "p Holm",
    "verdict",
    "p Holm, one run left out (range)",
    "verdict changes without",
]


def _cross_entropy_lines(ce: dict) -> list[str]:
    """The primary measure's test of each h against h=8 (lower is better), its trend, and its split."""
    if not ce.get("seed_level"):
        return []
    rows = [
        [
            str(t["heads"]),
            ",".join(map(str, t["seeds"])),
            signed(t["mean_difference"], 4),
            interval(t["ci95"], 4),
            p_value(t["p_value"]),
            p_value(t["p_adjusted"]),
            t["verdict"] + (" (borderline)" if t.get("borderline") else ""),
            interval((ce["leave_one_out"].get(str(t["heads"])) or {}).get("p_holm_leave_one_out"), 3),
            ", ".join((ce["leave_one_out"].get(str(t["heads"])) or {}).get("verdict_changes_without") or []) or "none",
        ]
        for t in ce["seed_level"]
    ]
    trend = ce.get("trend")
    out = [
        f"Cross-entropy, the primary measure: {ce['text']}. Same h × seed-block test as BLEU below; lower is better.",
        "",
        md_table(CE_HEADERS, rows),
        "",
        f"Residual standard deviation of the fit: {num(ce.get('residual_sd'), 4)} nats/token, {ce.get('df')} "
        f"degrees of freedom.",
        "",
    ]
    if trend:
        out += [
            f"Trend against log2 h: {signed(trend['slope_per_doubling'], 4)} nats/token per doubling of h, 95% "
            f"interval {interval(trend['ci95'], 4)}, two-sided p = {trend['p_value']:.2g}.",
            "",
        ]
    return out


SENSITIVITY_HEADERS = [
    "h",
    "p Holm",
    "p Holm over other resampling seeds",
    "p Holm, one run left out (range)",
    "verdict changes without",
    "borderline",
]


def _sensitivity_lines(sensitivity: dict | None, tests: dict[str, dict]) -> list[str]:
    """How firmly each BLEU verdict stands: other resampling seeds of the shared sentence term, and each
    tested run left out in turn (sensitivity.py)."""
    if not sensitivity:
        return []
    rows = [
        [
            h,
            p_value((tests.get(h) or {}).get("p_adjusted")),
            interval(entry["p_holm_resampled"], 3),
            interval(entry["p_holm_leave_one_out"], 3),
            ", ".join(entry["verdict_changes_without"]) or "none",
            "yes" if sensitivity["borderline"].get(h) else "no",
        ]
        for h, entry in sensitivity["by_heads"].items()
    ]
    return [
        f"How firmly the BLEU verdicts stand: the Holm-adjusted p over {sensitivity['resampling_seeds']} other "
        "seeds of the sentence resampling behind the shared term, and with each tested run left out in turn. "
        "A verdict that either changes is borderline.",
        "",
        md_table(SENSITIVITY_HEADERS, rows),
        "",
    ]


def _trend_lines(trend: dict | None) -> list[str]:
    """BLEU per doubling of h, whatever its p (the conclusion quotes it only where significant)."""
    if not trend:
        return []
    return [
        f"Trend against log2 h (h = {', '.join(map(str, trend['heads']))}): "
        f"{signed(trend['slope_per_doubling'])} BLEU per doubling of h, 95% interval "
        f"{interval(trend['ci95'])}, two-sided p = {trend['p_value']:.4f} ({trend['df']} degrees of freedom).",
        "",
    ]


PER_SEED_HEADERS = [
    "h",
    "seed",
    "test BLEU",
    f"h={BASELINE_HEADS} BLEU",
    "Δ BLEU",
    "95% bootstrap interval of Δ",
    "p",
    "p Holm (within the seed)",
]


def _per_seed_lines(sig: dict) -> list[str]:
    """Each h against h=8 of the same seed (paired bootstrap over test sentences)."""
    rows = [
        [
            str(t["heads"]),
            str(t["seed"]),
            num(t["bleu"]),
            num(t["baseline_bleu"]),
            signed(t["difference"]),
            interval(t["difference_ci95"]),
            p_value(t["p_value"]),
            p_value(t["p_holm"]),
        ]
        for t in sig["per_seed"]
    ]
    return ["Each seed against h=8 of the same seed:", "", md_table(PER_SEED_HEADERS, rows), ""]


# ----------------------------------------------------------------------------- what the heads do


def _head_roles_section(report: dict) -> list[str]:
    """Shares of head roles and of prunable heads per h, then the mean head measures (if `heads` ran)."""
    analysed = [row for row in report["by_heads"] if row.get("head_analysis")]
    if not analysed:
        return []
    rows = [
        [
            str(row["heads"]),
            str(len(row["head_analysis"]["runs_with_roles"])),
            *[_share(row["head_analysis"]["role_shares"], role) for role in ROLES],
            percent(row["head_analysis"]["prunable_share"]),
        ]
        for row in analysed
    ]
    return [
        "## What the heads do (`mhatrain heads --roles` and `mhatrain heads` on the runs)",
        "",
        md_table(["h", "runs with roles", *[f"{role} heads" for role in ROLES], "prunable within 1 BLEU"], rows),
        "",
        f"Shares of all heads (every layer and attention kind) over the runs of each h. Classes and their "
        f"thresholds: {ROLE_THRESHOLDS} (see mhatrain/analysis/roles.py).",
        "",
        *_role_measures_table(analysed),
    ]


def _share(shares: dict | None, role: str) -> str:
    return MISSING if not shares else percent(shares[role])


HEAD_MEASURE_NAMES = {
    "entropy_normalised": "entropy (normalised)",
    "confidence": "confidence",
    "neighbour": "strongest neighbour",
    "diagonal": "diagonal",
    "sink": "sink",
}


def _role_measures_table(analysed: list[dict]) -> list[str]:
    """Per h and attention kind, the mean of each head measure over the heads of its runs."""
    rows = [
        [str(row["heads"]), kind, *[fraction(measures.get(name)) for name in STUDY_MEASURES]]
        for row in analysed
        for kind, measures in (row["head_analysis"].get("role_measures") or {}).items()
    ]
    if not rows:
        return []
    return [
        md_table(["h", "attention", *[HEAD_MEASURE_NAMES[name] for name in STUDY_MEASURES]], rows),
        "",
        "Means over every head of the runs of each h: normalised entropy (1 = uniform over the keys), weight "
        "on the strongest key, on the strongest of the previous/same/next token (self-attention), within one "
        "position of the proportional diagonal (cross-attention), and on </s> (enc-self, cross) or <s> "
        "(dec-self).",
        "",
    ]


# ----------------------------------------------------------------------------- beside the paper


def _claims_section(report: dict) -> list[str]:
    """h=8 − h=1 by the explainer article, the paper and this study; the paper's source; BLEU signatures."""
    claims = report["claims"]
    ours = claims["ours"]
    test = (ours or {}).get("seed_test") or {}
    p_text = (
        f" (p = {test['p_value']:.3f}, Holm-adjusted {test['p_adjusted']:.3f}; {test['verdict']})"
        if test and test.get("p_value") is not None
        else ""
    )
    rows = [
        [
            "explainer article",
            f'claim: "{claims["article"]["text"]}"',
            signed(claims["article"]["h8_minus_h1_bleu"], 1),
        ],
        ["paper, Table 3 (A)", "newstest2013 dev BLEU, base model", signed(claims["paper"]["h8_minus_h1_bleu"], 1)],
        [
            "this study",
            "test BLEU, mean over seeds" + p_text,
            signed(ours["test_bleu"]) if ours else "needs finished h=1 and h=8 runs",
        ],
        ["this study", "validation BLEU, mean over seeds", signed(ours["valid_bleu"]) if ours else MISSING],
    ]
    out = [
        "## Beside the paper and the explainer article",
        "",
        md_table(["source", "what", "h=8 − h=1 BLEU"], rows),
        "",
        f"Paper source: {PAPER_SOURCE}.",
        "",
    ]
    if report["bleu_signatures"]:
        out += ["BLEU signature: " + "; ".join(f"`{s}`" for s in report["bleu_signatures"]), ""]
    return out
