"""`ablate --vary`: a grid of cells, each with the heads × seeds grid; its record, resume, errors and the
regime map of `report`; and what a point costs when model.d_head decouples the head size from h."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from scipy import stats

from mhatrain.core.config import load_config
from mhatrain.core.errors import MhatrainError
from mhatrain.data.tokens import PAD
from mhatrain.model.transformer import build_model, count_parameters
from mhatrain.study.comparison import verdict_of
from mhatrain.study.interaction import interaction
from mhatrain.study.record import Point, expand_grid, open_study, parse_cell, parse_point_name, point_dirs
from mhatrain.study.regimes import cell_labels, point_cost, to_csv

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
        assert row["seeds"] == [1, 2] and row["differences"] == pytest.approx(expected, abs=1e-4)
        assert row["difference"] == pytest.approx(sum(expected) / 2, abs=1e-4)
        assert (row["test_p_adjusted"], row["verdict"]) == verdict_of(sub["by_heads"][0])  # the cell's test
        assert row["verdict"] is not None and row["test_ci95"][0] <= row["test_ci95"][1]
        assert row["parameters"] == sub["by_heads"][0]["parameters"] and row["flops_per_token"] > 0
    (test,) = report["interaction"]
    assert test["heads"] == 1 and test["cells"] == 2 and test["differences"] == 4 and test["df"] == [1, 2]
    (pair,) = test["against_reference"]  # post-LN against the first level, pre-LN
    assert (pair["cell"], pair["reference"]) == ("model.norm=post", "model.norm=pre")
    rows = {r["cell"]: r for r in report["regime_map"] if r["heads"] == 1}
    assert all(r["shared_variance"] is not None and r["shared_variance"] >= 0 for r in rows.values())
    assert pair["difference"] == pytest.approx(
        rows["model.norm=post"]["difference"] - rows["model.norm=pre"]["difference"], abs=2e-4
    )
    with open(out / "regime-map.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["model.norm"], r["heads"]) for r in rows] == [("pre", "1"), ("pre", "8"), ("post", "1"), ("post", "8")]
    assert (out / "regime-map.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (out / "report.md").read_text()
    assert "## Regime map" in markdown and "## Does Δ differ between cells?" in markdown
    assert "Each cell against the reference cell (norm=pre):" in markdown
    assert "| norm=post | 1 |" in markdown  # the map names cells by their labels
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


def test_a_cell_of_one_seed_takes_the_shared_sentence_variance_of_the_others():
    """A one-seed cell has no test of its own against h=8 to give v; leaving it at 0 would understate its
    variance, so it takes the mean v of the cells that have one."""
    base = {"cell": "a", "heads": 1, "differences": [0.5, 0.9, 0.7], "shared_variance": 0.04}
    one = {"cell": "b", "heads": 1, "differences": [-0.6], "shared_variance": None}
    (test,) = interaction([base, one], baseline=8)
    s2 = sum((x - 0.7) ** 2 for x in base["differences"]) / 2
    variance = s2 * (1 / 3 + 1) + 0.04 + 0.04
    assert test["against_reference"][0]["p"] == pytest.approx(2 * stats.t.sf(1.3 / variance**0.5, 2))


def test_the_regime_csv_has_a_column_for_each_key_of_a_linked_factor():
    cells = [
        {"model.norm": "pre", "model.d_model": "256"},
        {"model.norm": "post", "model.d_model": "512"},
    ]
    names = ["model.norm=pre,model.d_model=256", "model.norm=post,model.d_model=512"]
    empty = dict.fromkeys(["d_head", "parameters", "flops_per_token", "test_bleu", "difference"])
    report = {
        "factors": {"model.norm,model.d_model": ["pre:256", "post:512"]},
        "cells": [{"cell": cell, "name": name} for cell, name in zip(cells, names)],
        "regime_map": [
            {**empty, "cell": name, "heads": h, "seeds": [], "seed_ci95": None, "test_ci95": None}
            | {"test_p_adjusted": None, "verdict": None}
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

    from mhatrain.study.report import report_study

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
