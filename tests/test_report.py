"""The report as a terminal shows it: a table narrow enough to read, the full one in report.md."""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pytest
from rich.console import Console

from mhatrain.study.reports.by_heads import bleu_interval
from mhatrain.study.reports.grid_report import plot_panels
from mhatrain.study.reports.head_count_figure import head_count_figure
from mhatrain.study.reports.terminal import show

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
        assert cells[1].startswith(f"{row['runs_tested']}/{row['runs']}")
        assert (" (1 out)" in cells[1]) == bool(row["left_out"])
        if row["heads"] != 8:
            assert float(cells[2]) == pytest.approx(row["cross_entropy"]["test"]["mean_difference"], abs=5e-5)
            assert float(cells[5]) == pytest.approx(row["seed_test"]["mean_difference"], abs=0.005)
            for cell, test in ((cells[4], row["cross_entropy"]["test"]), (cells[7], row["seed_test"])):
                assert cell.rstrip("*").replace("no diff.", "no detectable difference") == test["verdict"]
                assert cell.endswith("*") == test["borderline"]
    assert len({tuple(cells) for cells in rows.values()}) == len(rows)


def test_the_terminal_table_names_its_columns_and_points_to_the_full_one(report):
    text = shown(report, 100)
    header = next(line for line in text.splitlines() if line.startswith("┃"))
    assert re.findall(r"┃\s*([^┃]*?)\s*(?=┃)", header) == [
        "h",
        "runs",
        "Δ CE",
        "p Holm",
        "CE",
        "Δ BLEU",
        "p Holm",
        "BLEU",
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
    """The README's two head-count tables (cross-entropy, then BLEU), their trends and verdicts are the
    committed report's numbers, not an older study's."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    answer = readme[readme.index("<!-- answer -->") : readme.index("<!-- /answer -->")].replace("−", "-")
    sig = report["significance"]
    for marker, tests, digits in (
        ("Δ cross-entropy", sig["cross_entropy"]["seed_level"], 4),
        ("Δ test BLEU", sig["seed_level"], 2),
    ):
        rows = _answer_rows(answer, marker)
        for test in tests:
            h, _, tested, delta, interval, p_holm, verdict = rows[str(test["heads"])][:7]
            assert int(tested) == len(test["seeds"]), test["heads"]
            assert float(delta.replace("+", "")) == pytest.approx(test["mean_difference"], abs=0.6 * 10**-digits)
            low, high = (float(x) for x in interval.strip("[]").replace("+", "").split(","))
            assert (low, high) == pytest.approx(test["ci95"], abs=0.6 * 10**-digits), test["heads"]
            if p_holm.startswith("<"):
                assert test["p_adjusted"] < float(p_holm.strip("< "))
            else:
                assert float(p_holm) == pytest.approx(test["p_adjusted"], abs=0.006), test["heads"]
            assert verdict == test["verdict"] + (" (borderline)" if test["borderline"] else ""), test["heads"]
    trend, ce_trend = sig["trend"], sig["cross_entropy"]["trend"]
    assert f"BLEU falls by {-trend['slope_per_doubling']:.2f} per doubling of h" in answer
    assert f"(95% interval -{-trend['ci95'][0]:.2f} to -{-trend['ci95'][1]:.2f}," in answer
    assert f"Cross-entropy rises by {ce_trend['slope_per_doubling']:.3f} nats per" in answer
    low, high = sig["sensitivity"]["by_heads"]["1"]["p_holm_resampled"]
    assert f"{low:.3f}–{high:.3f}" in answer


def _answer_rows(answer: str, marker: str) -> dict[str, list[str]]:
    """The rows (by h) of the README answer's table whose header holds `marker`."""
    lines = answer.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| heads h") and marker in line)
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells
    return rows


def md_rows(text: str, header_start: str) -> tuple[list[str], dict[str, list[str]]]:
    """A report.md table's header and its rows by first cell (h), found by the header's first cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells
    return header, rows


def test_the_figure_the_tables_and_report_json_tell_one_story(report):
    """report.png plots what report.json, report.md, report.csv and the terminal give: the same Δ per h for
    both measures, over the same runs; a left-out run is drawn only as such."""
    study = COMMITTED_REPORT.parent
    panels = plot_panels(report)
    fig, _, _ = head_count_figure(panels, "title", baseline=8)
    md_header, md = md_rows((study / "report.md").read_text(encoding="utf-8"), "| h | d_k |")
    csv_rows = {r["heads"]: r for r in csv.DictReader((study / "report.csv").open(encoding="utf-8"))}
    terminal = table_rows(shown(report, 100))
    columns = {  # measure: (its Δ column in report.md, in report.csv, its test in a row, in the terminal)
        "validation cross-entropy (nats/token)": ("Δ cross-entropy vs h=8", "valid_nll_diff_to_h8", 2),
        "test BLEU": ("Δ test BLEU vs h=8", "test_bleu_diff_to_h8", 5),
    }
    assert [p["label"] for p in panels] == list(columns)
    for ax, panel in zip(fig.axes, panels):
        md_column, csv_column, terminal_column = columns[panel["label"]]
        ours = next(line for line in ax.get_lines() if line.get_marker() == "o")
        plotted = dict(zip(np.asarray(ours.get_xdata(), int), np.asarray(ours.get_ydata(), float)))
        for row in report["by_heads"]:
            h = row["heads"]
            test = (row["cross_entropy"]["test"] if "cross" in panel["label"] else row["seed_test"]) or {}
            expected = 0.0 if h == 8 else test["mean_difference"]
            digits = 4 if "cross" in panel["label"] else 2
            assert plotted[h] == pytest.approx(expected, abs=1e-4), (panel["label"], h)
            if h != 8:
                assert float(md[str(h)][md_header.index(md_column)]) == pytest.approx(expected, abs=0.6 * 10**-digits)
                assert float(csv_rows[str(h)][csv_column]) == pytest.approx(expected, abs=1e-3)
                assert float(terminal[str(h)][terminal_column]) == pytest.approx(expected, abs=0.6 * 10**-digits)
                low, high = test["ci95"]  # the error bar is the test's interval
                assert panel["interval"][h] == [low, high]
        dots = sum(len(v) for v in panel["seeds"].values())
        hollow = sum(len(v) for v in panel["left_out"].values())
        tested = sum(row["runs_tested"] for row in report["by_heads"]) - report["by_heads"][2]["runs_tested"]
        assert dots == tested  # every tested run of every h but h=8, paired with h=8 of its seed
        assert hollow == len(report["significance"]["left_out"]) == 2
    for row in report["by_heads"]:
        assert md[str(row["heads"])][md_header.index("runs tested")].startswith(f"{row['runs_tested']}/")
        tested = [r for r in report["runs"] if r["heads"] == row["heads"] and r["tested"]]
        assert row["test_bleu"]["n"] == len(tested) == row["runs_tested"]  # the mean is over the tested runs


def test_no_level_interval_of_bleu_leaves_its_range(report):
    for row in report["by_heads"]:
        if row["test_bleu_seed_ci95"]:
            low, high = row["test_bleu_seed_ci95"]
            assert 0.0 <= low <= high <= 100.0
    assert bleu_interval((86.08, 111.11)) == (86.08, 100.0)
