"""report.md's section on the fixed layouts of `ablate --layout`, and their lines on the terminal: each arm's
means, and each layout against h=8 and h=1 on test cross-entropy (the report's "layouts" entry,
stats/layouts.py). A study without layouts has neither.
"""

from __future__ import annotations

from ...core.formatting import MISSING, interval, md_table, num, p_value, signed

ARM_HEADERS = ["arm", "heads in all", "runs done", "tested seeds", "test BLEU", "test cross-entropy"]
COMPARISON_HEADERS = ["layout", "against", "seeds", "Δ cross-entropy", "95% interval", "p", "p (Holm)", "verdict"]


def to_markdown(layouts: dict | None) -> list[str]:
    """The section's lines (none without layouts)."""
    if not layouts:
        return []
    method = layouts["method"]
    arms = [
        [
            arm["arm"],
            num(arm["heads_total"]),
            f"{arm['runs_done']}/{arm['runs']}",
            ", ".join(map(str, arm["seeds"])) or MISSING,
            num(arm["test_bleu"]),
            num(arm["test_nll"], 4),
        ]
        for arm in layouts["arms"]
    ]
    comparisons = [
        [
            c["layout"],
            c["baseline"],
            ", ".join(map(str, sorted(set(c["seeds"]) & set(c["baseline_seeds"])))) or MISSING,
            signed(c["mean_difference"], 4),
            interval(c["ci95"], 4),
            p_value(c["p_value"]),
            p_value(c["p_holm"]),
            c["verdict"],
        ]
        for c in layouts["comparisons"]
    ]
    reasons = [
        f"- {c['layout']} against {c['baseline']}: not tested: {c['reason']}"
        for c in layouts["comparisons"]
        if c["reason"]
    ]
    defined = [
        f"- {name}: model.heads_per_layer "
        + ", ".join(f"{kind} {counts}" for kind, counts in entry["heads_per_layer"].items())
        + f" (each head of n_heads={entry['n_heads']}'s size)"
        for name, entry in layouts["layouts"].items()
    ]
    return [
        "## Fixed layouts against h=8 and h=1",
        "",
        "Each layout trained from scratch with its heads per layer (`ablate --layout`), an arm of its own: no table "
        f"or test by h counts its runs. Measure: {method['measure']}.",
        "",
        *defined,
        "",
        md_table(ARM_HEADERS, arms),
        "",
        md_table(COMPARISON_HEADERS, comparisons),
        "",
        *([*reasons, ""] if reasons else []),
        f"- test: {method['test']}; the sentence noise shared by an arm's seeds: {layouts['sentence_noise']}",
        f"- correction: {method['correction']}",
        f"- verdict: {method['verdict']}",
        "",
    ]


def terminal_lines(layouts: dict | None) -> list[str]:
    """One line per layout comparison, for the console summary (none without layouts)."""
    if not layouts:
        return []
    return [
        f"layout {c['layout']} against {c['baseline']}: "
        + (
            f"Δ test cross-entropy {signed(c['mean_difference'], 4)} {interval(c['ci95'], 4)}, "
            f"p (Holm) {p_value(c['p_holm'])}: "
            if c["mean_difference"] is not None
            else ""
        )
        + c["verdict"]
        + (f" ({c['reason']})" if c["reason"] else "")
        for c in layouts["comparisons"]
    ]
