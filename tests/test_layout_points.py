"""`ablate --layout NAME=FILE`: a fixed layout of heads per layer (prune's layout.yaml) trained from scratch
as points of the head-count study, reported as an arm of its own against h=8 and h=1."""

from __future__ import annotations

import csv
import io
import shlex
import statistics
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from mhatrain.core.config import load_config
from mhatrain.core.errors import MhatrainError
from mhatrain.inference.trained import load_run
from mhatrain.study.grid.fixed_layouts import read_layouts
from mhatrain.study.grid.points import Layout, Point, expand_grid, parse_point_name
from mhatrain.study.grid.run_records import gather
from mhatrain.study.reports.study_report import report_study
from mhatrain.study.running.ablate import run_study

from .conftest import TINY, assert_clean_error, run_cli
from .test_ablate import study_sets

LAYOUT = {"enc_self": [2, 1], "dec_self": [0, 3], "cross": [4, 1]}  # tiny.yaml: 2 + 2 layers, heads of d_k 16


def write_layout(path: Path, layout: dict = LAYOUT) -> Path:
    """A layout file as `mhatrain prune` writes it: a comment, then model.heads_per_layer."""
    path.write_text("# open heads\n" + yaml.safe_dump({"model": {"heads_per_layer": layout}}, default_flow_style=None))
    return path


def sets(spm_cache) -> list[str]:
    """test_ablate's study settings, at half its updates: six grid points in well under a minute on one core."""
    return [*study_sets(spm_cache), "train.max_steps=20"]


def cli_sets(spm_cache) -> list[str]:
    return [arg for item in sets(spm_cache) for arg in ("--set", item)]


def silent() -> Console:
    return Console(file=io.StringIO(), width=200)


# ----------------------------------------------------------------------------- the grid


def test_layout_point_names_round_trip():
    cell = (("model.norm", "pre"),)
    points = [
        Point.of_layout(Layout("gates"), 3),
        Point.of_layout(Layout("l0-0.03_b"), 12),
        Point.of_layout(Layout("x"), 1, cell),
        Point(8, 1),
    ]
    for point in points:
        assert parse_point_name(point.name) == point
    assert points[0].name == "layout-gates-seed3" and points[2].name == "model.norm=pre/layout-x-seed1"
    assert parse_point_name("layout-gates-seed1").layout.name == "gates"
    assert parse_point_name("layout-gates-seed1").heads == 0  # no h: never pooled with one
    for name in ("layout--seed1", "layout-gates", "layout-a b-seed1", "gates-seed1"):
        assert parse_point_name(name) is None
    # seed-major: each seed's h points, then its layouts
    grid = expand_grid([8, 1], [1, 2], layouts=[Layout("gates", "{}")])
    assert [p.name for p in grid] == [
        "h01-seed1",
        "h08-seed1",
        "layout-gates-seed1",
        "h01-seed2",
        "h08-seed2",
        "layout-gates-seed2",
    ]


def test_every_form_of_a_layout_file_reads_as_the_same_layout(tmp_path):
    config = load_config(TINY)
    forms = {
        "prune.yaml": {"model": {"heads_per_layer": LAYOUT}},
        "top.yaml": {"heads_per_layer": LAYOUT},
        "bare.yaml": LAYOUT,
    }
    for name, data in forms.items():
        (tmp_path / name).write_text(yaml.safe_dump(data))
    layouts = read_layouts([f"a{i}={tmp_path / name}" for i, name in enumerate(forms)], config)
    assert len({layout.setting for layout in layouts}) == 1
    assert layouts[0].override == "model.heads_per_layer={enc_self: [2, 1], dec_self: [0, 3], cross: [4, 1]}"
    with pytest.raises(ValueError, match="study.yaml"):  # a point read back from its name knows no layout
        assert parse_point_name("layout-a0-seed1").overrides is None


def test_dry_run_prints_layout_commands_whose_set_loads_back_to_the_layout(tmp_path, spm_cache, capsys):
    out = tmp_path / "study"
    layout = f"gates={write_layout(tmp_path / 'layout.yaml')}"
    run_study(TINY, [1, 8], [1, 2], out, sets(spm_cache), 1, None, True, False, silent(), layouts=[layout])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 6
    layout_lines = [line for line in lines if "/layout-gates-seed" in line.split(" && ")[0]]
    assert len(layout_lines) == 2
    for seed, line in zip((1, 2), layout_lines):
        train = shlex.split(line.split(" && ")[0])
        run_dir = out / f"layout-gates-seed{seed}"
        assert train[5:8] == ["--out", str(run_dir), "--resume"]
        config = load_config(train[4], train[9::2])
        assert vars(config.model.heads_per_layer) == LAYOUT
        assert config.model.n_heads == 4 and config.train.seed == seed  # the base config's head size
        assert config == load_config(run_dir / "config.yaml")  # laid out as the command will load it
    recorded = yaml.safe_load((out / "study.yaml").read_text())
    assert recorded["layouts"] == {"gates": {"heads_per_layer": LAYOUT, "n_heads": 4}}
    assert recorded["heads"] == [1, 8]


@pytest.mark.parametrize(
    ("option", "fragments"),
    [
        ("bad/name={layout}", ["--layout bad/name=", "not a layout name"]),
        ("gates", ["--layout gates: expected NAME=FILE"]),
        ("gates={missing}", ["file not found", "missing.yaml"]),
        ("gates={three}", ["three.yaml", "model.heads_per_layer.enc_self", "model.n_encoder_layers=2"]),
        ("gates={broken}", ["broken.yaml is not valid YAML"]),
        ("gates={other}", ["other.yaml holds no model.heads_per_layer"]),
        ("gates={negative}", ["negative.yaml", "must not hold a negative head count"]),
    ],
)
def test_a_bad_layout_option_is_one_clean_line(tmp_path, option, fragments):
    files = {
        "layout": write_layout(tmp_path / "layout.yaml"),
        "missing": tmp_path / "missing.yaml",
        "three": write_layout(tmp_path / "three.yaml", {"enc_self": [1, 2, 3]}),
        "broken": tmp_path / "broken.yaml",
        "other": tmp_path / "other.yaml",
        "negative": write_layout(tmp_path / "negative.yaml", {"cross": [1, -1]}),
    }
    files["broken"].write_text("model: [\n")
    files["other"].write_text("model:\n  d_model: 64\n")
    out = tmp_path / "study"
    result = run_cli(
        "ablate", str(TINY), "--heads", "1,8", "--out", str(out), "--dry-run", "--layout", option.format(**files)
    )
    assert_clean_error(result, *fragments)
    assert not (out / "study.yaml").exists()


def test_layout_with_vary_or_a_name_given_twice_is_refused(tmp_path):
    layout = f"gates={write_layout(tmp_path / 'layout.yaml')}"
    base = ["ablate", str(TINY), "--heads", "1,8", "--out", str(tmp_path / "s"), "--dry-run", "--layout", layout]
    assert_clean_error(run_cli(*base, "--vary", "model.norm=pre,post"), "--layout and --vary exclude each other")
    assert_clean_error(run_cli(*base, "--layout", layout), "the name gates is given twice")


def test_a_rerun_that_gives_a_layout_name_another_layout_is_refused(tmp_path, spm_cache):
    out = tmp_path / "study"
    first = write_layout(tmp_path / "first.yaml")
    other = write_layout(tmp_path / "other.yaml", {**LAYOUT, "cross": [1, 1]})
    run_study(TINY, [1, 8], [1], out, sets(spm_cache), 1, None, True, False, silent(), layouts=[f"gates={first}"])
    with pytest.raises(MhatrainError, match=r"holds layout gates as .*cross: \[4, 1\].*cross: \[1, 1\]"):
        run_study(TINY, [1, 8], [1], out, sets(spm_cache), 1, None, True, False, silent(), layouts=[f"gates={other}"])
    # the same layout again, and a new name beside it: the study grows
    run_study(TINY, [1, 8], [1], out, sets(spm_cache), 1, None, True, False, silent(), layouts=[f"gates={first}"])
    run_study(TINY, [1, 8], [1], out, sets(spm_cache), 1, None, True, False, silent(), layouts=[f"b={other}"])
    assert list(yaml.safe_load((out / "study.yaml").read_text())["layouts"]) == ["gates", "b"]


# ----------------------------------------------------------------------------- a real study


@pytest.fixture(scope="module")
def study(tmp_path_factory, spm_cache) -> Path:
    """h=1, h=8 and one layout over two seeds, run as a user runs it."""
    root = tmp_path_factory.mktemp("layouts")
    out = root / "study"
    layout = f"gates={write_layout(root / 'layout.yaml')}"
    argv = ["ablate", str(TINY), "--heads", "1,8", "--seeds", "1,2", "--layout", layout, "--out", str(out)]
    result = run_cli(*argv, *cli_sets(spm_cache))
    assert result.returncode == 0, result.stderr + result.stdout
    again = run_cli(*argv, *cli_sets(spm_cache))  # the same command resumes: nothing left to train
    assert again.returncode == 0 and "6 of 6 runs already finished" in again.stdout, again.stdout + again.stderr
    return out


def test_layout_points_train_the_layout(study):
    for seed in (1, 2):
        model = load_run(study / f"layout-gates-seed{seed}").model
        for kind, counts in LAYOUT.items():
            modules = model.attention_modules(kind)
            assert [m.n_heads for m in modules] == counts
            assert [m.w_q.weight.shape[0] for m in modules] == [16 * n for n in counts]  # n_heads=4's d_k
    assert [m.n_heads for m in load_run(study / "h08-seed1").model.attention_modules("cross")] == [8, 8]


def test_the_report_tests_the_layout_against_h8_and_h1_apart_from_the_tables_per_h(study):
    report = report_study(study, silent())
    _, runs = gather(study, layouts=True)
    layout_runs = [r for r in runs if r.layout == "gates"]
    assert len(layout_runs) == 2 and all(r.tested and r.heads == 4 and r.layout_heads == 11 for r in layout_runs)
    assert [r.layout for r in gather(study)[1]] == [None] * 4  # a caller per h never sees them

    # the tables, tests and files per h count the h points only
    assert [(row["heads"], row["runs_done"]) for row in report["by_heads"]] == [(1, 2), (8, 2)]
    assert report["runs_total"] == 4 and not any("layout" in r for r in report["runs"])
    assert [row["run"] for row in report["significance"]["per_seed"] if "layout" in row["run"]] == []
    assert len((study / "report-runs.csv").read_text().splitlines()) == 5
    assert [row["heads"] for row in csv.DictReader(io.StringIO((study / "report.csv").read_text()))] == ["1", "8"]

    # the layouts entry: each arm's means and each Δ, as a direct computation from the run records gives them
    entry = report["layouts"]
    arms = {arm["arm"]: arm for arm in entry["arms"]}
    assert (
        list(arms) == ["h=8", "h=1", "gates"]
        and arms["gates"]["heads_total"] == 11
        and arms["h=8"]["heads_total"] == 48
    )

    def mean(arm, measure):
        chosen = [r for r in runs if (r.layout or f"h={r.heads}") == arm]
        return statistics.fmean(getattr(r, measure) for r in chosen)

    for arm in arms.values():
        assert arm["seeds"] == [1, 2]
        assert arm["test_bleu"] == pytest.approx(mean(arm["arm"], "test_bleu"), abs=1e-4)
        assert arm["test_nll"] == pytest.approx(mean(arm["arm"], "test_nll"), abs=1e-3)
    comparisons = {(c["layout"], c["baseline"]): c for c in entry["comparisons"]}
    assert list(comparisons) == [("gates", "h=8"), ("gates", "h=1")]
    for (name, baseline), c in comparisons.items():
        assert c["mean_difference"] == pytest.approx(mean(name, "test_nll") - mean(baseline, "test_nll"), abs=1e-3)
        assert c["ci95"][0] <= c["mean_difference"] <= c["ci95"][1] and 0 < c["p_value"] <= c["p_holm"] <= 1
        assert c["verdict"] in ("better", "worse", "no detectable difference") and c["reason"] is None
    assert entry["sentence_noise"] == "included"
    assert [(r["name"], r["layout_heads"]) for r in entry["runs"]] == [
        ("layout-gates-seed1", 11),
        ("layout-gates-seed2", 11),
    ]
    markdown = (study / "report.md").read_text()
    assert "## Fixed layouts against h=8 and h=1" in markdown
    assert f"| gates | h=8 | 1, 2 | {comparisons['gates', 'h=8']['mean_difference']:+.4f} |" in markdown


def test_an_arm_with_one_tested_seed_is_not_tested_and_says_why(study, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    for item in study.iterdir():  # the study without the layout's second seed
        if item.name != "layout-gates-seed2":
            (partial / item.name).symlink_to(item)
    entry = report_study(partial, silent())["layouts"]
    for c in entry["comparisons"]:
        assert c["verdict"] == "not tested" and c["p_value"] is None
        assert "gates has 1 tested seed(s), 2 needed" in c["reason"]


def test_a_six_layer_layout_is_one_unwrapped_setting():
    """YAML wraps flow text at 80 columns: a Multi30k layout's `--set` must stay one line all the same."""
    from mhatrain.study.grid.fixed_layouts import recorded_layout

    layout = {"enc_self": [1, 1, 1, 0, 0, 0], "dec_self": [6, 4, 2, 1, 0, 0], "cross": [1, 0, 5, 5, 5, 3]}
    override = recorded_layout("gates", layout).override
    assert "\n" not in override and yaml.safe_load(override.split("=", 1)[1]) == layout
