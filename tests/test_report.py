"""The report as a terminal shows it: a table narrow enough to read, the full one in report.md."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console

from mhatrain.study.terminal import show

from .conftest import ROOT

COMMITTED_REPORT = ROOT / "results" / "ablate-multi30k" / "report.json"  # five h, three seeds each


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(COMMITTED_REPORT.read_text(encoding="utf-8"))


def shown(report: dict, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    show(report, console)
    return console.file.getvalue()


def table_rows(text: str) -> dict[str, list[str]]:
    """The table's data rows by their first cell (h), each as its cells."""
    rows = {}
    for line in text.splitlines():
        if not line.startswith("│"):
            continue
        cells = [cell.strip() for cell in line.strip("│").split("│")]
        if cells[0].isdigit():
            rows[cells[0]] = cells
    return rows


@pytest.mark.parametrize("width", [80, 100, 140])
def test_the_terminal_table_shows_every_h_and_its_verdict(report, width):
    text = shown(report, width)
    assert max(len(line) for line in text.splitlines() if line.startswith(("│", "┃"))) <= width
    rows = table_rows(text)
    assert list(rows) == [str(row["heads"]) for row in report["by_heads"]]
    for row in report["by_heads"]:
        cells = rows[str(row["heads"])]
        assert f"{row['runs_done']}/{row['runs']}" in cells
        assert f"{row['test_bleu']['mean']:.2f} ± {row['test_bleu']['std']:.2f}" in cells
        verdict = (row["seed_test"] or {}).get("verdict")
        if verdict is not None:
            assert " ".join(cells).count(verdict) == 1
    assert len({tuple(cells) for cells in rows.values()}) == len(rows)


def test_the_terminal_table_names_its_columns_and_points_to_the_full_one(report):
    text = shown(report, 100)
    header = next(line for line in text.splitlines() if line.startswith("┃"))
    assert re.findall(r"┃\s*([^┃]*?)\s*(?=┃)", header) == [
        "h",
        "runs",
        "test BLEU",
        "Δ vs h=8",
        "adjusted p",
        "verdict",
    ]
    assert "report.md" in text
    assert f"Head-count study: {report['study_dir']}" in text


def test_a_log_file_keeps_the_full_table(report):
    log = Console(file=io.StringIO(), width=100, color_system=None)  # not a terminal
    show(report, log)
    header = next(line for line in log.file.getvalue().splitlines() if line.startswith("┃"))
    assert "paper BLEU" in header and "test chrF" in header


@pytest.mark.parametrize("columns", [80, 120])
def test_a_pipe_keeps_to_the_width_columns_asks_for(report, columns, monkeypatch):
    """`COLUMNS=100 mhatrain report STUDY | less`: the table that fits (the compact one), prose wrapped."""
    monkeypatch.setenv("COLUMNS", str(columns))
    piped = Console(file=io.StringIO(), color_system=None, soft_wrap=True)  # as the CLI's, not a terminal
    assert not piped.is_terminal and piped.width == columns
    show(report, piped)
    text = piped.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= columns
    assert table_rows(text).keys() == {str(row["heads"]) for row in report["by_heads"]}
    assert "report.md" in text


def test_a_pipe_with_room_for_the_full_table_gets_it(report, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    piped = Console(file=io.StringIO(), color_system=None, soft_wrap=True)
    show(report, piped)
    header = next(line for line in piped.file.getvalue().splitlines() if line.startswith("┃"))
    assert "paper BLEU" in header and "test chrF" in header
    assert max(len(line) for line in piped.file.getvalue().splitlines()) <= 400


def test_the_readme_answer_is_the_committed_report(report):
    """The README's head-count table and trend are the committed report's numbers, not an older study's."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    answer = readme[readme.index("<!-- answer -->") : readme.index("<!-- /answer -->")]
    rows = _answer_rows(answer)
    for test in report["significance"]["seed_level"]:
        _, tested, delta, interval, p_holm = rows[str(test["heads"])]
        assert int(tested) == len(test["seeds"]), test["heads"]
        assert float(delta) == pytest.approx(test["mean_difference"], abs=0.006), test["heads"]
        low, high = (float(x) for x in interval.strip("[]").replace("−", "-").split(","))
        assert (low, high) == pytest.approx(test["ci95"], abs=0.006), test["heads"]
        assert float(p_holm) == pytest.approx(test["p_adjusted"], abs=0.006), test["heads"]
    trend = report["significance"]["trend"]
    low, high = trend["ci95"]
    assert f"BLEU falls by {-trend['slope_per_doubling']:.2f} per doubling of h" in answer
    assert f"(95% interval −{-low:.2f} to −{-high:.2f}," in answer


def _answer_rows(answer: str) -> dict[str, list[str]]:
    """The README's answer table: h → [h, runs tested, Δ, interval, p (Holm)] (d_k and the paper dropped)."""
    rows = {}
    for line in answer.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0].isdigit():
            rows[cells[0]] = [cells[0], cells[2], cells[3].replace("−", "-").replace("+", ""), cells[4], cells[5]]
    return rows
