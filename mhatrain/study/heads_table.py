"""The report's table of one row per h, as text cells: the full table (report.md with HEADERS, a log file
or a pipe with SHORT_HEADERS) and the compact one a terminal shows (COMPACT_HEADERS), and the line that
says how many runs are done.
"""

from __future__ import annotations

from .comparison import BASELINE_HEADS, verdict_of
from .tables import MISSING, interval, mean_sd, num, p_value, signed

HEADERS = [
    "h",
    "d_k",
    "parameters",
    "runs",
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
COMPACT_HEADERS = ["h", "runs", "test BLEU", f"Δ vs h={BASELINE_HEADS}", "adjusted p", "verdict"]


def row_cells(row: dict) -> list[str]:
    """One h in the full table (HEADERS): ours, the test against h=8, the paper's, the cost."""
    paper = row["paper"] or {}
    is_base = row["heads"] == BASELINE_HEADS
    test = row["seed_test"] or {}
    return [
        str(row["heads"]),
        num(row["d_head"]),
        num(row["parameters"]) if not isinstance(row["parameters"], list) else "varies",
        f"{row['runs_done']}/{row['runs']}",
        *_measured_cells(row),
        _difference_cell(row),
        interval(test.get("ci95")),
        p_value(test.get("p_value")),
        p_value(test.get("p_adjusted")),
        MISSING if is_base else test.get("verdict", MISSING),
        num(paper.get("ppl")),
        num(paper.get("bleu"), 1),
        (MISSING if not paper else "baseline" if is_base else signed(paper["bleu_diff_to_h8"], 1)),
        num(row["train_seconds"]["mean"], 0),
        num(row["tokens_per_s"]["mean"], 0),
    ]


def _measured_cells(row: dict) -> list[str]:
    """Validation PPL and BLEU, test BLEU with its interval over seeds, test chrF ('pending' before any run)."""
    if not row["runs_done"]:
        return ["pending"] * 5
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
    """One h in the terminal: h, runs, test BLEU ± sd, Δ, adjusted p, verdict (report.md has the rest)."""
    is_base = row["heads"] == BASELINE_HEADS
    adjusted, verdict = verdict_of(row)
    return [
        str(row["heads"]),
        f"{row['runs_done']}/{row['runs']}",
        mean_sd(row["test_bleu"]) if row["runs_done"] else "pending",
        _difference_cell(row),
        MISSING if is_base else p_value(adjusted),
        MISSING if is_base or verdict is None else verdict,
    ]


def status_line(report: dict) -> str:
    """'12 of 15 runs done; not finished: h32-seed3 (training, update 400), ...'."""
    pending = [p for row in report["by_heads"] for p in row["pending"]]
    line = f"{report['runs_done']} of {report['runs_total']} runs done"
    return line + (f"; not finished: {', '.join(pending)}" if pending else "")
