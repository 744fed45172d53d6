"""`ablate --vary`: a grid of cells, each with the heads × seeds grid; its record, resume, errors and the
regime map of `report`; and what a point costs when model.d_head decouples the head size from h."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from rich.console import Console
from scipy import stats

from mhatrain.core.config import load_config
from mhatrain.core.errors import MhatrainError
from mhatrain.data.tokens import PAD
from mhatrain.model.transformer import build_model, count_parameters
from mhatrain.study.grid.costs import point_cost
from mhatrain.study.grid.directory import open_study, point_dirs
from mhatrain.study.grid.points import Point, cell_labels, expand_grid, parse_cell, parse_point_name
from mhatrain.study.reports.regime_map import to_csv
from mhatrain.study.stats.comparison import verdict_of
from mhatrain.study.stats.interaction import interaction, power

from .conftest import TINY, TOY, assert_clean_error, run_cli

VARY = ["--vary", "model.norm=pre,post"]
CELLS = ("model.norm=pre", "model.norm=post")


def sets(spm_cache) -> list[str]:
    items = [
        f"data.cache_dir={spm_cache}",
        f"data.local_dir={TOY}",
        "train.max_steps=40",
        "train.valid_max_sentences=10",
        "train.log_every=1000",
    ]
    return [arg for item in items for arg in ("--set", item)]


def files_of(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def varied(tmp_path_factory, spm_cache) -> dict:
    """A study over model.norm ∈ {pre, post} × h ∈ {1, 8}: seed 1 first, then continued with seeds 1,2."""
    out = tmp_path_factory.mktemp("varied") / "study"
    first = run_cli("ablate", str(TINY), *VARY, "--heads", "1,8", "--seeds", "1", "--out", str(out), *sets(spm_cache))
    assert first.returncode == 0, first.stderr + first.stdout
    seed1 = {cell: files_of(out / cell / "h01-seed1") for cell in CELLS}
    second = run_cli(
        "ablate", str(TINY), *VARY, "--heads", "1,8", "--seeds", "1,2", "--out", str(out), *sets(spm_cache)
    )
    assert second.returncode == 0, second.stderr + second.stdout
    return {"out": out, "first": first, "second": second, "seed1": seed1}


# ----------------------------------------------------------------------------- names and grid


def test_points_of_a_cell_live_in_its_folder_and_plain_names_are_unchanged():
    cell = (("model.norm", "pre"), ("model.d_model", "128"))
    point = Point(8, 2, cell)
    assert point.name == "model.norm=pre,model.d_model=128/h08-seed2"
    assert point.overrides == ["model.norm=pre", "model.d_model=128", "model.n_heads=8", "train.seed=2"]
    assert parse_point_name(point.name) == point
    assert Point(8, 2).name == "h08-seed2" and parse_point_name("h08-seed2") == Point(8, 2)
    assert parse_cell("model.norm=pre") == (("model.norm", "pre"),)
    assert parse_cell("logs") is None and parse_cell("h08-seed1") is None
    grid = expand_grid([8, 1], [2, 1], {"model.norm": ["pre", "post"]})
    assert [p.name for p in grid[:4]] == [
        "model.norm=pre/h01-seed2",
        "model.norm=pre/h08-seed2",
        "model.norm=post/h01-seed2",
        "model.norm=post/h08-seed2",
    ]
    assert expand_grid([1], [1]) == [Point(1, 1)]


# ----------------------------------------------------------------------------- the study


def test_a_varied_study_names_its_cells_records_its_factors_and_resumes(varied):
    out = varied["out"]
    record = yaml.safe_load((out / "study.yaml").read_text())
    assert record["factors"] == {"model.norm": ["pre", "post"]}
    assert record["heads"] == [1, 8] and record["seeds"] == [1, 2]
    found = {point.name for point, _ in point_dirs(out)}
    assert found == {f"{cell}/h{h:02d}-seed{s}" for cell in CELLS for h in (1, 8) for s in (1, 2)}
    for cell, norm in zip(CELLS, ("pre", "post")):
        assert yaml.safe_load((out / cell / "h08-seed2" / "config.yaml").read_text())["model"]["norm"] == norm
    assert "4 of 8 runs already finished: skipped" in varied["second"].stdout
    for cell in CELLS:  # the continued study did not retrain, re-evaluate or rewrite the first seed's points
        assert files_of(out / cell / "h01-seed1") == varied["seed1"][cell]
    # pre-LN has a final LayerNorm in each stack that post-LN has not: 2 × 2 × 64 parameters more
    summaries = {
        cell: json.loads((out / cell / "h01-seed1" / "train_summary.json").read_text())["parameters"] for cell in CELLS
    }
    assert summaries["model.norm=pre"] - summaries["model.norm=post"] == 256


def test_the_report_tests_each_cell_and_maps_the_regimes(varied):
    out = varied["out"]
    report = json.loads((out / "report.json").read_text())
    assert [cell["name"] for cell in report["cells"]] == list(CELLS)
    assert [cell["label"] for cell in report["cells"]] == ["norm=pre", "norm=post"]
    assert report["baseline_heads"] == 8 and report["runs_done"] == 8
    for cell in CELLS:  # each cell is reported as a study of its own, with the main report's test against h=8
        sub = json.loads((out / cell / "report.json").read_text())
        assert sub["runs_done"] == 4
        assert sub["by_heads"][0]["heads"] == 1 and sub["by_heads"][0]["seed_test"] is not None
        assert "## By number of heads" in (out / cell / "report.md").read_text()
        row = next(r for r in report["regime_map"] if r["cell"] == cell and r["heads"] == 1)
        bleu = {(run["heads"], run["seed"]): run["test_bleu"] for run in sub["runs"]}
        expected = [bleu[1, seed] - bleu[8, seed] for seed in (1, 2)]
        assert row["bleu"]["seeds"] == [1, 2] and row["bleu"]["differences"] == pytest.approx(expected, abs=1e-4)
        assert row["bleu"]["difference"] == pytest.approx(sum(expected) / 2, abs=1e-4)
        assert (row["bleu"]["test_p_adjusted"], row["bleu"]["verdict"]) == verdict_of(sub["by_heads"][0])
        assert row["bleu"]["verdict"] is not None and row["bleu"]["test_ci95"][0] <= row["bleu"]["test_ci95"][1]
        assert row["parameters"] == sub["by_heads"][0]["parameters"] and row["flops_per_token"] > 0
        # cross-entropy, the primary measure: eval wrote per-sentence values, so the map uses the test set and
        # each cell's own cross-entropy test (its interval, Holm p, verdict and shared sentence variance)
        nll = {(run["heads"], run["seed"]): run["test_nll"] for run in sub["runs"]}
        ce = row["cross_entropy"]
        assert ce["source"] == "test" and sub["significance"]["cross_entropy"]["source"] == "test"
        assert ce["differences"] == pytest.approx([nll[1, s] - nll[8, s] for s in (1, 2)], abs=1e-4)
        own = sub["significance"]["cross_entropy"]["seed_level"][0]
        assert (ce["test_p_adjusted"], ce["verdict"], ce["test_ci95"]) == (
            own["p_adjusted"],
            own["verdict"],
            own["ci95"],
        )
        assert ce["shared_variance"] == own["shared_sentence_variance"] and ce["shared_variance"] >= 0
    assert report["cross_entropy_source"] == "test" and list(report["measures"]) == ["cross_entropy", "bleu"]
    for measure in ("cross_entropy", "bleu"):
        (test,) = report["interaction"][measure]
        assert test["heads"] == 1 and test["cells"] == 2 and test["differences"] == 4 and test["df"] == [1, 2]
        (pair,) = test["against_reference"]  # post-LN against the first level, pre-LN
        assert (pair["cell"], pair["reference"]) == ("model.norm=post", "model.norm=pre")
        rows = {r["cell"]: r[measure] for r in report["regime_map"] if r["heads"] == 1}
        assert all(r["shared_variance"] is not None and r["shared_variance"] >= 0 for r in rows.values())
        assert pair["difference"] == pytest.approx(
            rows["model.norm=post"]["difference"] - rows["model.norm=pre"]["difference"], abs=2e-4
        )
        effect = {"cross_entropy": 0.03, "bleu": 1.5}[measure]
        assert pair["power"]["effect"] == effect and pair["power"]["design_seeds"] == 2
        assert 0 < pair["power"]["now"] <= 1 and pair["power"]["now"] == pair["power"]["design"]  # 2 seeds = design
    with open(out / "regime-map.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["model.norm"], r["heads"]) for r in rows] == [("pre", "1"), ("pre", "8"), ("post", "1"), ("post", "8")]
    assert (out / "regime-map.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rows[0]["ce_source"] == "test" and rows[0]["ce_diff_to_baseline"] and rows[0]["bleu_diff_to_baseline"]
    assert rows[2]["ce_interaction_p_holm"] and rows[2]["bleu_power_design"] and not rows[0]["ce_interaction_p"]
    markdown = (out / "report.md").read_text()
    assert "## Regime map: Δ of h against h=8 in each cell, cross-entropy (primary) and test BLEU" in markdown
    assert "## Does Δ differ from the reference cell (norm=pre)? Interaction tests, both measures" in markdown
    assert markdown.index("| norm=post | 1 | cross-entropy |") < markdown.index("| norm=post | 1 | test BLEU |")
    assert "| norm=post | 1 | 2 (1,2) |" in markdown  # the map names cells by their labels
    assert "Regime map of study" in varied["second"].stdout  # ablate ends with the report
    # the closing line names each cell's files once, not once per cell
    assert "in the 2 cells' folders: report.md  report.csv" in varied["second"].stdout
    assert varied["second"].stdout.count("report-runs.csv") == 1


def test_cells_are_labelled_by_the_settings_that_tell_them_apart():
    linked = [
        {"model.norm": "pre", "train.lr_factor": "0.4", "model.d_model": "256"},
        {"model.norm": "pre", "train.lr_factor": "0.4", "model.d_model": "512"},
        {"model.norm": "post", "train.lr_factor": "0.8", "model.d_model": "256"},
    ]
    assert cell_labels(linked) == [
        "norm=pre, lr_factor=0.4, d_model=256",
        "norm=pre, lr_factor=0.4, d_model=512",
        "norm=post, lr_factor=0.8, d_model=256",
    ]
    assert cell_labels(linked[:2]) == ["d_model=256", "d_model=512"]
    assert cell_labels(linked[:1]) == ["norm=pre, lr_factor=0.4, d_model=256"]  # alone: every setting


def test_the_interaction_test_is_a_one_way_anova_of_the_per_seed_differences():
    rows = [
        {"cell": "a", "heads": 1, "differences": [0.5, 0.9, 0.7]},
        {"cell": "b", "heads": 1, "differences": [-0.4, 0.1, -0.2, 0.0]},
        {"cell": "c", "heads": 1, "differences": [1.5, 1.1]},
        {"cell": "a", "heads": 8, "differences": []},
    ]
    (test,) = interaction(rows, baseline=8)
    expected = stats.f_oneway([0.5, 0.9, 0.7], [-0.4, 0.1, -0.2, 0.0], [1.5, 1.1])
    assert test["F"] == pytest.approx(expected.statistic, abs=1e-4) and test["p"] == pytest.approx(expected.pvalue)
    assert test["df"] == [2, 6] and test["delta_range"] == [-0.125, 1.3]
    one_seed = [{"cell": "a", "heads": 1, "differences": [1.0]}, {"cell": "b", "heads": 1, "differences": [0.5]}]
    (untestable,) = interaction(one_seed, baseline=8)  # no cell with two seeds: no within-cell variance
    assert untestable["p"] is None and untestable["verdict"] == "untestable"


def test_each_cell_is_tested_against_the_reference_cell_with_the_pooled_spread():
    """Without shared sentence noise a cell against the reference is the pooled two-sample t-test (over
    every cell's spread); a cell's shared sentence variance v widens it; Holm runs over every pair."""
    a, b, c = [0.5, 0.9, 0.7], [-0.4, 0.1, -0.2, 0.0], [1.5, 1.1, 1.2]
    two = [{"cell": "a", "heads": 1, "differences": a}, {"cell": "b", "heads": 1, "differences": b}]
    (test,) = interaction(two, baseline=8)
    (pair,) = test["against_reference"]
    t = stats.ttest_ind(b, a, equal_var=True)
    assert (pair["cell"], pair["reference"]) == ("b", "a") and pair["difference"] == pytest.approx(-0.825, abs=1e-4)
    assert pair["p"] == pytest.approx(t.pvalue) and test["F"] == pytest.approx(t.statistic**2, abs=1e-3)
    assert pair["ci95"][0] < pair["difference"] < pair["ci95"][1] < 0
    assert pair["verdict"] == "Δ smaller than in the reference cell"  # p ≈ 0.002, one pair: Holm changes nothing
    shared = [{**row, "shared_variance": 0.05} for row in two]
    (wider,) = interaction(shared, baseline=8)
    s2 = (sum((x - 0.7) ** 2 for x in a) + sum((x + 0.125) ** 2 for x in b)) / 5
    variance = s2 * (1 / 3 + 1 / 4) + 0.1
    expected = 2 * stats.t.sf(0.825 / variance**0.5, 5)
    assert wider["against_reference"][0]["p"] == pytest.approx(expected) and expected > pair["p"]
    assert wider["p"] == pytest.approx(expected, rel=1e-6)  # two cells: the omnibus F is the pair's t squared
    three = [*two, {"cell": "c", "heads": 1, "differences": c}, {"cell": "a", "heads": 8, "differences": []}]
    (test3,) = interaction(three, baseline=8)
    pairs = test3["against_reference"]
    assert [p["cell"] for p in pairs] == ["b", "c"] and all(p["df"] == 7 for p in pairs)
    raw = sorted(p["p"] for p in pairs)
    assert sorted(p["p_holm"] for p in pairs) == pytest.approx([2 * raw[0], max(2 * raw[0], raw[1])])


def test_a_cell_of_one_seed_is_not_tested_but_its_power_at_the_design_is_stated():
    """A one-seed cell has no spread of its own: its Δ is not tested against the reference (and stays out of
    the Holm family and the omnibus test), while its power at the design's seeds uses the pooled spread and,
    lacking a test of its own against h=8, the other cells' mean shared sentence variance v."""
    base = {"cell": "a", "heads": 1, "differences": [0.5, 0.9, 0.7], "shared_variance": 0.04}
    one = {"cell": "b", "heads": 1, "differences": [-0.6], "shared_variance": None}
    (test,) = interaction([base, one], baseline=8, effect=1.5, design_seeds=3)
    (pair,) = test["against_reference"]
    assert pair["p"] is None and pair["verdict"] == "not tested (one seed in this cell)"
    assert pair["difference"] == pytest.approx(-1.3) and test["p"] is None and test["verdict"] == "untestable"
    s2 = sum((x - 0.7) ** 2 for x in base["differences"]) / 2
    # one pair: Holm's level is 0.05; the design: 2 cells × 3 seeds − 2 cells = 4 df, v = 0.04 in both cells
    expected = power(1.5, s2, (3, 3), (0.04, 0.04), 4, 0.05)
    assert pair["power"]["now"] is None and pair["power"]["design"] == pytest.approx(expected, abs=1e-3)
    untrained = {"cell": "c", "heads": 1, "differences": []}  # a cell laid out, nothing trained: power before training
    (test,) = interaction([base, untrained], baseline=8, effect=1.5, design_seeds=3)
    (pair,) = test["against_reference"]
    assert (pair["delta"], pair["verdict"]) == (None, "not tested (no seed tested yet)")
    assert pair["power"]["design"] == pytest.approx(expected, abs=1e-3)


def test_without_shared_variance_the_power_is_the_noncentral_t():
    critical = stats.t.ppf(0.975, 6)
    noncentrality = 0.5 / (0.09 * (1 / 3 + 1 / 5)) ** 0.5
    expected = stats.nct.sf(critical, 6, noncentrality) + stats.nct.cdf(-critical, 6, noncentrality)
    assert power(0.5, 0.09, (3, 5), (0.0, 0.0), 6, 0.05) == pytest.approx(expected, abs=1e-4)
    assert power(0.0, 0.09, (3, 5), (0.0, 0.0), 6, 0.05) == pytest.approx(0.05, abs=1e-4)  # no effect: the level


def test_the_power_of_the_interaction_test_is_the_rate_at_which_it_calls_an_effect():
    """The analytic power (noncentral t) against the rejection rate of the test itself on simulated
    per-seed differences with the same spread and shared variance, with and without an interaction."""
    rng = np.random.default_rng(5)
    sd, v, seeds, effect = 0.3, 0.01, 3, 0.6

    def rate(delta: float, studies: int = 1500) -> float:
        called = 0
        for _ in range(studies):
            rows = [
                {"cell": c, "heads": 1, "differences": list(rng.normal(mean + rng.normal(0, v**0.5), sd, seeds))}
                | {"shared_variance": v}
                for c, mean in (("a", 0.0), ("b", delta))
            ]
            (test,) = interaction(rows, baseline=8)
            called += test["against_reference"][0]["p_holm"] < 0.05
        return called / studies

    analytic = {delta: power(delta, sd**2, (seeds, seeds), (v, v), 2 * seeds - 2, 0.05) for delta in (0.0, effect)}
    assert 0.2 < analytic[effect] < 0.9  # neither trivially 0 nor 1
    assert analytic[0.0] < 0.04  # a known v makes the t reference conservative: below the level
    # Monte Carlo sd ≈ 0.004 at no effect, 0.012 at the effect; the noncentral t alone (v taken as
    # estimated) would say 0.05 and 0.37: outside both tolerances
    assert rate(0.0) == pytest.approx(analytic[0.0], abs=0.015)
    assert rate(effect) == pytest.approx(analytic[effect], abs=0.035)
    rows = [{"cell": c, "heads": 1, "differences": [-sd, 0.0, sd], "shared_variance": v} for c in "ab"]
    (test,) = interaction(rows, baseline=8, effect=effect, design_seeds=seeds)  # s² = sd² exactly
    assert test["against_reference"][0]["power"]["now"] == pytest.approx(analytic[effect], abs=1e-3)


def _copy_study(varied, tmp_path) -> Path:
    return Path(shutil.copytree(varied["out"], tmp_path / "study"))


def test_a_cell_trained_with_another_tokenizer_is_left_out_of_the_cross_entropy_interaction(varied, tmp_path):
    """Per-token cross-entropy is on each tokenizer's tokens: a cell whose runs recorded another tokenizer is
    not compared with the reference cell on it (one line says why), while its BLEU still is."""
    study = _copy_study(varied, tmp_path)
    for path in (study / "model.norm=post").glob("h0*-seed*/provenance.json"):
        record = json.loads(path.read_text())
        for session in record["sessions"]:
            session["tokenizer"]["sha256"] = "f" * 64  # as if its tokenizer were fit on fewer pairs
        path.write_text(json.dumps(record))
    result = run_cli("report", str(study))
    assert result.returncode == 0 and "Traceback" not in result.stderr + result.stdout, result.stderr
    report = json.loads((study / "report.json").read_text())
    (note,) = report["tokenizer_notes"]
    assert note.startswith("norm=post: its runs' tokenizer (ffffffffffff) is not the reference cell's (")
    assert "per-token cross-entropy is not compared across tokenizers" in note
    (ce,) = report["interaction"]["cross_entropy"]
    (bleu,) = report["interaction"]["bleu"]
    assert ce["cells"] == 1 and ce["against_reference"] == [] and ce["p"] is None
    assert bleu["cells"] == 2 and bleu["against_reference"][0]["p"] is not None
    row = next(r for r in report["regime_map"] if r["cell"] == "model.norm=post" and r["heads"] == 1)
    assert row["cross_entropy"]["difference"] is not None  # its Δ within the cell is on one tokenizer
    assert "not compared across tokenizers" in (study / "report.md").read_text()
    assert "not compared across tokenizers" in result.stdout


def test_without_per_sentence_values_the_map_uses_validation_cross_entropy_with_no_shared_term(varied, tmp_path):
    study = _copy_study(varied, tmp_path)
    for path in study.glob("model.norm=*/h0*-seed*/eval/test.*.json"):
        record = json.loads(path.read_text())
        record.pop("cross_entropy", None)  # as the committed points' eval wrote them
        path.write_text(json.dumps(record))
    assert run_cli("report", str(study)).returncode == 0
    report = json.loads((study / "report.json").read_text())
    assert report["cross_entropy_source"] == "validation"
    assert "v = 0 in every cell (not included)" in report["cross_entropy_text"]
    for row in report["regime_map"]:
        sub = json.loads((study / row["cell"] / "report.json").read_text())
        valid = {(r["heads"], r["seed"]): r["valid_nll"] for r in sub["runs"]}
        ce = row["cross_entropy"]
        assert ce["source"] == "validation" and ce["shared_variance"] == 0.0
        if row["heads"] == 1:
            assert ce["differences"] == pytest.approx([valid[1, s] - valid[8, s] for s in (1, 2)], abs=1e-4)
    markdown = (study / "report.md").read_text()
    assert "Cross-entropy: validation cross-entropy" in markdown and "not included" in markdown


def test_a_cell_named_in_regime_map_yaml_leaves_the_map_with_its_reason(varied, tmp_path):
    study = _copy_study(varied, tmp_path)
    (study / "regime-map.yaml").write_text("left_out:\n  model.norm=post: under-trained at this budget\n")
    result = run_cli("report", str(study))
    assert result.returncode == 0, result.stderr
    report = json.loads((study / "report.json").read_text())
    assert [c["name"] for c in report["cells"]] == ["model.norm=pre"]
    assert {row["cell"] for row in report["regime_map"]} == {"model.norm=pre"}
    (left,) = report["left_out_cells"]
    assert (left["name"], left["reason"], left["runs_done"]) == ("model.norm=post", "under-trained at this budget", 4)
    assert all(t["against_reference"] == [] for m in ("cross_entropy", "bleu") for t in report["interaction"][m])
    assert (study / "model.norm=post" / "report.md").is_file()  # its own report stays, as a record
    markdown = (study / "report.md").read_text()
    assert "## Cells left out of the map" in markdown and "under-trained at this budget" in markdown
    assert "left out of the map: norm=post: under-trained at this budget" in result.stdout
    (study / "regime-map.yaml").write_text("left_out:\n  model.norm=sideways: typo\n")
    assert_clean_error(
        run_cli("report", str(study)), "regime-map.yaml: no cell folder with points named model.norm=sideways"
    )


def test_training_keeps_a_tokenizer_placed_in_its_run_directory(varied, tmp_path, spm_cache):
    """Cell (d) of the regime study (study-data.sh) trains on a quarter of the pairs with the full training
    set's tokenizer, placed in each point's folder: `train` must use it, not fit one on the kept pairs."""
    full = varied["out"] / "model.norm=pre" / "h01-seed1" / "spm.model"
    quarter = ["--set", "data.max_train_examples=12", "--set", "train.max_steps=2", *sets(spm_cache)]
    placed, fitted = tmp_path / "placed", tmp_path / "fitted"
    placed.mkdir()
    shutil.copy(full, placed / "spm.model")
    for out in (placed, fitted):
        result = run_cli("train", str(TINY), "--out", str(out), *quarter)
        assert result.returncode == 0, result.stderr
    digest = json.loads((placed / "provenance.json").read_text())["sessions"][0]["tokenizer"]["sha256"]
    assert digest == hashlib.sha256(full.read_bytes()).hexdigest()
    assert (fitted / "spm.model").read_bytes() != full.read_bytes()  # without it: a tokenizer of the 12 pairs


def test_the_regime_csv_has_a_column_for_each_key_of_a_linked_factor():
    cells = [
        {"model.norm": "pre", "model.d_model": "256"},
        {"model.norm": "post", "model.d_model": "512"},
    ]
    names = ["model.norm=pre,model.d_model=256", "model.norm=post,model.d_model=512"]
    measure = dict.fromkeys(["source", "value", "difference", "seed_ci95", "test_ci95", "test_p_adjusted", "verdict"])
    report = {
        "factors": {"model.norm,model.d_model": ["pre:256", "post:512"]},
        "cells": [{"cell": cell, "name": name} for cell, name in zip(cells, names)],
        "regime_map": [
            {"cell": name, "heads": h, "d_head": None, "parameters": None, "flops_per_token": None}
            | {"cross_entropy": {**measure, "seeds": []}, "bleu": {**measure, "seeds": []}}
            for name in names
            for h in (1, 8)
        ],
    }
    rows = list(csv.DictReader(io.StringIO(to_csv(report))))
    assert [(r["model.norm"], r["model.d_model"], r["heads"]) for r in rows] == [
        ("pre", "256", "1"),
        ("pre", "256", "8"),
        ("post", "512", "1"),
        ("post", "512", "8"),
    ]


def test_dry_run_shows_the_cells_and_their_cost(tmp_path, spm_cache):
    out = tmp_path / "study"
    result = run_cli(
        "ablate", str(TINY), "--vary", "model.d_head=8,32", "--heads", "1,3", "--out", str(out), "--dry-run"
    )
    assert result.returncode == 0, result.stderr
    commands = result.stdout.strip().splitlines()
    assert len(commands) == 4 and all("--set model.d_head=" in line for line in commands)
    assert "2 cells (model.d_head ∈ {8, 32})" in result.stderr and "MFLOPs/token" in result.stderr
    assert "model.d_head=32:" in result.stderr and "d_k=32" in result.stderr
    assert not any((out / cell / "h01-seed1" / "best.pt").exists() for cell in ("model.d_head=8", "model.d_head=32"))


def test_a_linked_factor_sets_its_keys_together_in_each_cell(tmp_path):
    """--vary K1,K2=A1:A2,B1:B2 makes one cell per level, not the 2 × 2 combinations of its keys."""
    out = tmp_path / "study"
    vary = "model.d_model,model.d_ff=32:64,48:96"
    result = run_cli("ablate", str(TINY), "--vary", vary, "--heads", "1,8", "--out", str(out), "--dry-run")
    assert result.returncode == 0, result.stderr
    commands = result.stdout.strip().splitlines()
    assert len(commands) == 4  # 2 cells × 2 h × 1 seed
    pairs = {(setting(line, "model.d_model"), setting(line, "model.d_ff")) for line in commands}
    assert pairs == {("32", "64"), ("48", "96")}
    assert "2 cells (model.d_model,model.d_ff ∈ {32:64, 48:96})" in result.stderr
    assert "model.d_model=48,model.d_ff=96:" in result.stderr and "97,920 parameters" in result.stderr
    assert parse_cell("model.d_model=48,model.d_ff=96") == (("model.d_model", "48"), ("model.d_ff", "96"))


def setting(command: str, key: str) -> str:
    """The value a printed grid command gives `key` with --set."""
    return command.split(f"--set {key}=")[1].split()[0]


def test_a_point_costs_what_its_model_has_when_d_head_is_set():
    for d_head, heads in ((None, 4), (32, 4), (32, 3)):
        settings = [f"model.n_heads={heads}", f"model.d_head={'null' if d_head is None else d_head}"]
        config = load_config(TINY, settings, check_paths=False)
        cost = point_cost(config, vocab_size=64)
        assert cost["parameters"] == count_parameters(build_model(config.model, 64, PAD))
        assert cost["d_head"] == (d_head or 64 // heads)
    wide, paper = load_config(TINY, ["model.d_head=32"], check_paths=False), load_config(TINY, check_paths=False)
    assert point_cost(wide)["flops_per_token"] > point_cost(paper)["flops_per_token"]  # 4 × 32 > d_model = 64


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "vary, fragments",
    [
        ("model.nope=1,2", ["--vary model.nope=1,2", "unknown key 'model.nope'"]),
        ("model.norm=sideways", ["--vary model.norm=sideways", "'model.norm' must be one of post, pre"]),
        ("model.norm", ["--vary model.norm", "expected KEY=V1,V2"]),
        ("model.n_heads=2,4", ["--vary model.n_heads=2,4", "set per grid point by --heads"]),
        ("train.seed=1,2", ["set per grid point by --seeds"]),
        ("model.norm=pre,pre", ["pre is given twice"]),
        ("data.local_dir=a/b", ["'a/b' is not a value"]),
        ("model.d_model,model.d_ff=32:64,48", ["'48' has 1 value(s) for 2 keys"]),
        ("model.d_model,model.nope=32:64", ["unknown key 'model.nope'"]),
        ("model.norm=pre,post --vary model.norm,model.d_ff=pre:64", ["model.norm is varied twice"]),
        ("model.d_model=64,36", ["--heads: 8 does not divide model.d_model=36 in cell model.d_model=36"]),
    ],
)
def test_bad_vary_options_fail_in_one_line_before_anything_is_written(tmp_path, vary, fragments):
    out = tmp_path / "study"
    options = [part for one in vary.split(" --vary ") for part in ("--vary", one)]
    result = run_cli("ablate", str(TINY), *options, "--heads", "1,8", "--out", str(out))
    assert_clean_error(result, *fragments)
    assert not out.exists()


def test_a_study_gains_cells_from_new_levels_of_its_factors(tmp_path):
    """New values of the recorded keys add cells (the recorded ones first); other keys are refused."""
    config = load_config(TINY)
    out = tmp_path / "study"

    def open_with(factors: dict[str, list[str]]):
        points = expand_grid([1, 8], [1], factors)
        return open_study(
            out, config, TINY, [], [1, 8], [1], points, overwrite=False, console=Console(), factors=factors
        )

    open_with({"model.d_model,model.d_ff": ["32:64"]})
    study = open_with({"model.d_model,model.d_ff": ["48:96", "32:64"]})
    assert study.factors == {"model.d_model,model.d_ff": ["32:64", "48:96"]}
    record = yaml.safe_load((out / "study.yaml").read_text())
    assert record["factors"] == {"model.d_model,model.d_ff": ["32:64", "48:96"]}
    config_48 = yaml.safe_load((out / "model.d_model=48,model.d_ff=96" / "h08-seed1" / "config.yaml").read_text())
    assert (config_48["model"]["d_model"], config_48["model"]["d_ff"]) == (48, 96)
    with pytest.raises(MhatrainError, match="vary the same keys"):
        open_with({"model.d_model": ["32"]})
    assert yaml.safe_load((out / "study.yaml").read_text())["factors"] == record["factors"]


def test_a_study_refuses_other_factors(varied, spm_cache):
    out = varied["out"]
    before = files_of(out)
    for other, fragment in (
        (["--vary", "model.d_head=8,16"], "with --vary model.d_head=8,16: vary the same keys"),
        ([], "without --vary: vary the same keys"),
    ):
        command = ["ablate", str(TINY), *other, "--heads", "1,8", "--out", str(out), "--dry-run", *sets(spm_cache)]
        result = run_cli(*command)
        assert_clean_error(result, f"{out} holds a study with --vary model.norm=pre,post", fragment)
    assert {k: v for k, v in files_of(out).items() if k != "provenance.json"} == {
        k: v for k, v in before.items() if k != "provenance.json"
    }


def test_report_of_a_cell_folder_alone_is_a_plain_study(varied, tmp_path):
    """A cell's folder is laid out as a study: `report` works on it by itself."""
    from rich.console import Console

    from mhatrain.study.reports.study_report import report_study

    cell = tmp_path / CELLS[0]
    shutil.copytree(varied["out"] / CELLS[0], cell)
    report = report_study(cell, Console(file=io.StringIO()))
    assert report["runs_done"] == 4 and [row["heads"] for row in report["by_heads"]] == [1, 8]


def test_curves_of_a_varied_study_draw_each_cell_by_itself(varied, tmp_path):
    """A cell's runs are not seeds of one h: `curves` draws each cell into its own folder."""
    study = Path(shutil.copytree(varied["out"], tmp_path / "study"))
    for cell in CELLS:
        (study / cell / "curves.png").unlink(missing_ok=True)
    result = run_cli("curves", str(study))
    assert result.returncode == 0, result.stderr
    for cell in CELLS:
        assert (study / cell / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"curves: {study / cell / 'curves.png'}" in result.stdout
    assert not (study / "curves.png").exists()
    assert_clean_error(run_cli("curves", str(study), "--out", str(tmp_path / "c.png")), "each gets CELL/curves.png")


def test_export_copies_every_cell(varied, tmp_path):
    exported = tmp_path / "exported"
    assert run_cli("export", str(varied["out"]), str(exported)).returncode == 0
    for cell in CELLS:
        assert (exported / cell / "report.md").is_file()
        assert (exported / cell / "h08-seed2" / "eval" / "test.beam3.json").is_file()
        assert not list((exported / cell).rglob("*.pt"))
    assert (exported / "regime-map.csv").is_file() and (exported / "study.yaml").is_file()


def test_the_regime_readme_map_is_the_committed_reports():
    """The regime study README's map (Δ, interval and Holm p on both measures, power at the design) is
    the committed reports' numbers: results/regimes-multi30k (base, (b)) and results/regimes-dhead ((c))."""
    root = Path(__file__).resolve().parents[1] / "results"
    readme = (root / "regimes-multi30k" / "README.md").read_text(encoding="utf-8").replace("−", "-")
    section = readme[readme.index("### The map on both measures") : readme.index("What the tests support")]
    rows = {
        cells[0]: cells
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| cell")
        for cells in [[c.strip() for c in line.strip().strip("|").split("|")]]
    }
    main = json.loads((root / "regimes-multi30k" / "report.json").read_text())
    dhead = json.loads((root / "regimes-dhead" / "report.json").read_text())

    def h1(report, cell_prefix):
        return next(r for r in report["regime_map"] if r["heads"] == 1 and r["cell"].endswith(cell_prefix))

    def power(report, measure):
        (pair,) = report["interaction"][measure][0]["against_reference"]
        return pair["power"]["design"]

    base = h1(main, "model.d_model=256,model.d_ff=1024")
    for column, measure, digits in ((4, "cross_entropy", 3), (5, "bleu", 2)):
        entry = base[measure]
        low, high = entry["test_ci95"]
        shown = (
            f"{entry['difference']:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}], {entry['test_p_adjusted']:.3f}"
        )
        assert rows["base (d_model 256)"][column] == shown
    wide = h1(main, "model.d_model=512,model.d_ff=2048")
    assert rows["(b) d_model 512"][4] == f"{wide['cross_entropy']['difference']:.3f}, not tested"
    assert rows["(b) d_model 512"][5] == f"{wide['bleu']['difference']:.2f}, not tested"
    assert wide["bleu"]["verdict"].startswith("not tested") and len(wide["bleu"]["seeds"]) == 1
    for name, report in (("(b) d_model 512", main), ("(c) d_head 64", dhead)):
        assert rows[name][7] == f"{power(report, 'cross_entropy'):.2f} / {power(report, 'bleu'):.2f}"
