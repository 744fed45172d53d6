"""The report's table of one row per h, as text cells: the full table (report.md with HEADERS, a log file
or a pipe with SHORT_HEADERS) and the compact one a terminal shows (COMPACT_HEADERS), and the line that
says how many runs are done.
"""

from __future__ import annotations

from ...core.formatting import MISSING, interval, mean_sd, num, p_value, signed
from ..stats.comparison import BASELINE_HEADS, verdict_of

HEADERS = [
    "h",
    "d_k",
    "parameters",
    "runs tested",
    "cross-entropy",
    "Δ cross-entropy vs h=8",
    "p Holm (cross-entropy)",
    "verdict (cross-entropy)",
    "valid PPL",
    "valid BLEU",
    "test BLEU",
    "95% interval over seeds",
    "test chrF",
    "Δ test BLEU vs h=8",
    "95% interval of Δ",
    "p",
    "p Holm",
    "verdict",
    "paper PPL (dev)",
    "paper BLEU (dev)",
    "paper Δ BLEU vs h=8",
    "train s",
    "tokens/s",
]
SHORT_HEADERS = [  # the same columns as HEADERS, named for a log file or a pipe
    "h",
    "d_k",
    "params",
    "runs",
    "CE",
    "Δ CE",
    "CE p Holm",
    "CE verdict",
    "val PPL",
    "val BLEU",
    "test BLEU",
    "95% (seeds)",
    "test chrF",
    "Δ BLEU",
    "Δ 95%",
    "p",
    "p Holm",
    "verdict",
    "paper PPL",
    "paper BLEU",
    "paper Δ",
    "train s",
    "tok/s",
]
COMPACT_HEADERS = ["h", "runs", "Δ CE", "p Holm", "CE", "Δ BLEU", "p Holm", "BLEU"]
COMPACT_VERDICTS = {"no detectable difference": "no diff.", "not tested": "untested"}  # "*": borderline


def row_cells(row: dict) -> list[str]:
    """One h in the full table (HEADERS): ours, the test against h=8, the paper's, the cost."""
    paper = row["paper"] or {}
    is_base = row["heads"] == BASELINE_HEADS
    test = row["seed_test"] or {}
    return [
        str(row["heads"]),
        num(row["d_head"]),
        num(row["parameters"]) if not isinstance(row["parameters"], list) else "varies",
        runs_cell(row),
        *_cross_entropy_cells(row),
        *_measured_cells(row),
        _difference_cell(row),
        interval(test.get("ci95")),
        p_value(test.get("p_value")),
        p_value(test.get("p_adjusted")),
        MISSING if is_base else verdict_text(test),
        num(paper.get("ppl")),
        num(paper.get("bleu"), 1),
        (MISSING if not paper else "baseline" if is_base else signed(paper["bleu_diff_to_h8"], 1)),
        num(row["train_seconds"]["mean"], 0),
        num(row["tokens_per_s"]["mean"], 0),
    ]


def runs_cell(row: dict) -> str:
    """Tested runs of all, and how many finished runs are left out of the tests: '2/3, 1 left out'."""
    left_out = len(row.get("left_out") or [])
    return f"{row['runs_tested']}/{row['runs']}" + (f", {left_out} left out" if left_out else "")


def verdict_text(test: dict) -> str:
    """A test's verdict, marked where one run or the resampling seed could change it."""
    if not test:
        return MISSING
    return test["verdict"] + (" (borderline)" if test.get("borderline") else "")


def _cross_entropy_cells(row: dict) -> list[str]:
    """Cross-entropy ± sd, Δ against h=8, Holm p and verdict (nats per token: 4 decimals)."""
    ce = row.get("cross_entropy") or {}
    test = ce.get("test") or {}
    is_base = row["heads"] == BASELINE_HEADS
    diff = row["diff_to_h8"] or {}
    delta = diff.get({"test": "test_nll", "validation": "valid_nll"}.get(ce.get("source")))
    return [
        mean_sd(ce, 4) if ce.get("n") else MISSING,
        "baseline" if is_base and row["diff_to_h8"] else (MISSING if delta is None else signed(delta, 4)),
        MISSING if is_base else p_value(test.get("p_adjusted")),
        MISSING if is_base else verdict_text(test),
    ]


def _measured_cells(row: dict) -> list[str]:
    """Validation PPL and BLEU, test BLEU with its interval over seeds, test chrF ('pending' before any run)."""
    if not row["runs_tested"]:
        return ["pending" if not row["runs_done"] else MISSING] * 5
    return [
        mean_sd(row["valid_ppl"]),
        mean_sd(row["valid_bleu"]),
        mean_sd(row["test_bleu"]),
        interval(row["test_bleu_seed_ci95"]),
        mean_sd(row["test_chrf"]),
    ]


def _difference_cell(row: dict) -> str:
    """Δ test BLEU against h=8 ('baseline' in h=8's own row)."""
    diff = row["diff_to_h8"]
    if row["heads"] == BASELINE_HEADS and diff is not None:
        return "baseline"
    return signed(diff["test_bleu"]) if diff else MISSING


def compact_cells(row: dict) -> list[str]:
    """One h in the terminal: h, runs, Δ cross-entropy, its adjusted p and verdict, the same for test
    BLEU (verdicts abbreviated, * borderline; report.md has the rest)."""
    is_base = row["heads"] == BASELINE_HEADS
    adjusted, _ = verdict_of(row)
    _, ce_delta, ce_p, _ = _cross_entropy_cells(row)
    left_out = len(row.get("left_out") or [])
    return [
        str(row["heads"]),
        f"{row['runs_tested']}/{row['runs']}" + (f" ({left_out} out)" if left_out else ""),
        "base" if is_base else ce_delta,
        ce_p,
        MISSING if is_base else _compact_verdict((row.get("cross_entropy") or {}).get("test")),
        "base" if is_base else _difference_cell(row),
        MISSING if is_base else p_value(adjusted),
        MISSING if is_base else _compact_verdict(row["seed_test"]),
    ]


def _compact_verdict(test: dict | None) -> str:
    if not test:
        return MISSING
    return COMPACT_VERDICTS.get(test["verdict"], test["verdict"]) + ("*" if test.get("borderline") else "")


def status_line(report: dict) -> str:
    """'12 of 15 runs done; not finished: h32-seed3 (training, update 400), ...'."""
    pending = [p for row in report["by_heads"] for p in row["pending"]]
    line = f"{report['runs_done']} of {report['runs_total']} runs done"
    return line + (f"; not finished: {', '.join(pending)}" if pending else "")
