"""`mhatrain prune`: learned head gates fine-tuned from a trained run, one run per L0 penalty, until the
gates settle; evaluated, pruned and reported; resumable, locked, and exact after kill -9.

The tiny run's gates start at P(open) ≈ 0.98 and move by about the learning rate per update, so these
runs use a high learning rate (train.lr_factor=3): λ = 1 closes every head within ~100 updates, λ = 0
closes none. What is measured is the machinery, not a good pruned model.
"""

from __future__ import annotations

import json
import signal

import pytest
import torch

from mhatrain.core.checkpoint import load_checkpoint
from mhatrain.inference.trained import load_run
from mhatrain.model.pruning import pruned_layout
from mhatrain.study.grid.directory import study_lock
from mhatrain.study.running.prune import settled

from .conftest import ROOT, TINY, assert_clean_error, run_cli, set_args
from .test_crash import assert_identical, metric_records

SETTINGS = ("--window", "40", "--min-updates", "120", "--max-updates", "200")
# log α at the weights' rate: the tiny schedule (lr_factor 3, short warmup) already moves the gates within a window
SETS = ("train.lr_factor=3", "train.warmup_steps=20", "model.head_gates.lr_scale=1")


def prune_argv(source, out, l0="0,1", *more):
    return ["prune", str(source), "--l0", l0, "--out", str(out), *SETTINGS, *set_args(*SETS), *more]


@pytest.fixture(scope="module")
def pruned(tmp_path_factory, tiny_run):
    out = tmp_path_factory.mktemp("prune") / "p"
    result = run_cli(*prune_argv(tiny_run, out))
    assert result.returncode == 0, result.stdout + result.stderr
    return out, result


def report_runs(out):
    return {run["l0"]: run for run in json.loads((out / "report.json").read_text())["runs"]}


def test_prune_fine_tunes_each_penalty_and_a_large_one_closes_more_heads(pruned, tiny_run):
    out, result = pruned
    runs = report_runs(out)
    assert set(runs) == {0.0, 1.0}
    assert runs[0.0]["open_total"] == runs[0.0]["heads_total"] == 24  # 2 layers × 3 kinds × 4 heads
    assert runs[1.0]["open_total"] < runs[0.0]["open_total"]
    assert runs[0.0]["settled_at"] == 120  # nothing moves without a penalty: settled at the first check
    assert runs[1.0]["settled_at"] > 120  # heads closed in the window before: it went on until the count held
    for run in runs.values():
        assert set(run["test"]) >= {"bleu", "chrf", "cross_entropy"} and run["test"]["cross_entropy"] > 0
        assert run["open_heads"].keys() == {"enc_self", "dec_self", "cross"}
    # The table is in report.md and on the console, with both figures.
    report = (out / "report.md").read_text()
    assert "| λ | updates | settled at |" in report and "| 1 | " in report and "open" in result.stdout
    assert (out / "gate-maps.png").stat().st_size > 0 and (out / "gate-trajectories.png").stat().st_size > 0


def test_each_run_starts_from_the_source_weights_with_a_fresh_optimiser(pruned, tiny_run):
    out, _ = pruned
    sessions = json.loads((out / "l0=1" / "provenance.json").read_text())["sessions"]
    assert sessions[0]["init_from"] == str((tiny_run / "best.pt").resolve())
    first = next(json.loads(line) for line in (out / "l0=0" / "metrics.jsonl").read_text().splitlines())
    trained = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    last_train_loss = [r["loss"] for r in trained if r["kind"] == "train"][-1]
    assert first["step"] == 1 and first["loss"] < 2 * last_train_loss  # a trained model, not a new one (~4)


def test_p_open_of_every_head_is_recorded_over_updates(pruned):
    out, _ = pruned
    records = [json.loads(line) for line in (out / "l0=1" / "metrics.jsonl").read_text().splitlines()]
    gated = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in gated] == [1, *range(20, runs_updates(out, 1.0) + 1, 20)]
    assert all(len(r["p_open"]["cross"]) == 2 and len(r["p_open"]["cross"][0]) == 4 for r in gated)
    assert gated[0]["p_open"]["enc_self"][0][0] > 0.9 > gated[-1]["p_open"]["enc_self"][0][0]


def runs_updates(out, l0):
    return report_runs(out)[l0]["updates"]


def test_the_pruned_run_keeps_the_open_heads_and_loads(pruned):
    out, _ = pruned
    runs = report_runs(out)
    gated = load_run(out / "l0=1", "last", strict=True)
    assert runs[1.0]["pruned"]["heads_per_layer"] == {k: list(v) for k, v in vars(pruned_layout(gated.model)).items()}
    assert runs[1.0]["pruned"]["heads_per_layer"] == runs[1.0]["open_heads"]
    assert runs[1.0]["pruned"]["parameters"] < runs[0.0]["pruned"]["parameters"]
    assert load_run(out / "pruned" / "l0=1", "best", strict=True).config.model.head_gates is None


def test_a_rerun_skips_finished_penalties(pruned, tiny_run):
    out, _ = pruned
    before = {p: p.read_bytes() for p in out.glob("l0=*/outcome.json")}
    last = load_checkpoint(out / "l0=1" / "last.pt")
    result = run_cli(*prune_argv(tiny_run, out))
    assert result.returncode == 0, result.stderr
    assert "2 of 2 λ runs already finished: skipped" in result.stdout
    assert "fine-tuning" not in result.stdout and "resuming" not in result.stdout
    assert {p: p.read_bytes() for p in out.glob("l0=*/outcome.json")} == before
    assert "importance pruning" not in result.stdout  # its counts are in importance.json: not measured again
    assert_identical(load_checkpoint(out / "l0=1" / "last.pt"), last)


# ----------------------------------------------------------------------------- gates against importance pruning


def test_importance_pruning_at_n_open_heads_masks_the_heads_that_heads_removes_first(tmp_path, tiny_run):
    """The order is `mhatrain heads`' all-kinds pruning order (its prune_rank), and n open heads mask
    exactly the total − n first of it, with `heads`' own masks."""
    from mhatrain.analysis.importance import Head, gates_without
    from mhatrain.analysis.importance_counts import gates_with_open, importance_order

    result = run_cli("heads", str(tiny_run), "--metric", "loss", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    records = json.loads((tmp_path / "heads-valid.json").read_text())["heads"]
    by_rank = sorted(records, key=lambda r: r["prune_rank"])
    heads_order = [Head(r["kind"], r["layer"] - 1, r["head"] - 1) for r in by_rank]
    run = load_run(tiny_run)
    order = importance_order(run)
    assert order == heads_order and len(order) == 24  # the tiny model: 2 layers × 3 kinds × 4 heads
    for n in (24, 17, 5, 0):
        gates = gates_with_open(run.model, order, n)
        closed = sum(int((t == 0).sum()) for t in vars(gates).values() if t is not None)
        assert closed == 24 - n
        expected = gates_without(run.model, heads_order[: 24 - n], torch.device("cpu"))
        assert all(torch.equal(a, b) for a, b in zip(vars(gates).values(), vars(expected).values()))
    with pytest.raises(ValueError):
        gates_with_open(run.model, order, 25)


def test_the_report_sets_gates_beside_importance_pruning_at_the_same_counts(pruned):
    out, _ = pruned
    runs = report_runs(out)
    importance = json.loads((out / "importance.json").read_text())
    assert importance["heads_total"] == 24 and len(importance["order"]) == 24
    counts = {run["open_total"] for run in runs.values()}
    assert set(importance["points"]) == {str(n) for n in counts | {24}}
    for n, point in importance["points"].items():
        assert point["open"] == int(n) and point["removed"] == 24 - int(n)
        assert point["cross_entropy"] > 0 and 0 <= point["bleu"] <= 100
    comparison = json.loads((out / "report.json").read_text())["comparison"]
    rows = {row["l0"]: row for row in comparison["rows"]}
    assert {row["open"] for row in rows.values()} == counts
    assert rows[0.0]["gates_delta"] == {"cross_entropy": 0.0, "bleu": 0.0}  # λ = 0 against itself
    assert rows[0.0]["importance_delta"] == {"cross_entropy": 0.0, "bleu": 0.0}  # all 24 open: the source
    strong = rows[1.0]
    assert strong["importance"]["cross_entropy"] == importance["points"][str(strong["open"])]["cross_entropy"]
    assert strong["gates"]["cross_entropy"] == runs[1.0]["test"]["cross_entropy"]
    report = (out / "report.md").read_text()
    assert f"| 1 | {strong['open']}/24 | " in report and "| 0 | 24/24 | " in report
    assert "against the λ = 0 run" in report and "against the unpruned source" in report
    assert "No head-count grid given" in report
    assert (out / "gates-vs-importance.png").stat().st_size > 0


def test_the_grid_gives_each_h_at_h_heads_in_every_attention_module():
    """The committed Multi30k study: 6 + 6 layers, so 18 attention modules; h = 1 at 18 heads."""
    from mhatrain.study.reports.gates_vs_importance import grid_points, grid_row

    grid = grid_points(ROOT / "results" / "ablate-multi30k")
    assert grid["modules"] == 18 and grid["points"]
    assert all(point["open"] == 18 * point["heads"] for point in grid["points"])
    one = grid_row(grid, 1)
    assert one["open"] == 18 and one["bleu_seeds"] >= 3 and 0 < one["bleu"] < 100


def test_each_penalty_writes_its_layout_for_a_control_trained_from_scratch(pruned):
    import yaml

    from mhatrain.core.config import load_config

    out, _ = pruned
    for run in report_runs(out).values():
        text = (out / run["run"] / "layout.yaml").read_text()
        assert yaml.safe_load(text) == {"model": {"heads_per_layer": run["pruned"]["heads_per_layer"]}}
        setting = text.splitlines()[2].split("--set '")[1].rstrip("'")  # the command the file shows
        layout = load_config(TINY, [setting]).model.heads_per_layer
        assert vars(layout) == run["open_heads"] == run["pruned"]["heads_per_layer"]


def test_the_grid_h1_row_compares_both_with_the_separately_trained_model():
    from mhatrain.study.reports.gates_vs_importance import comparison_lines

    rows = [
        {"l0": 0.0, "open": 24, "heads_total": 24, "gates": {"cross_entropy": 2.0, "bleu": 30.0}},
        {"l0": 0.1, "open": 6, "heads_total": 24, "gates": {"cross_entropy": 2.5, "bleu": 25.0}},
    ]
    rows[0].update(gates_delta=None, importance={"cross_entropy": 2.1, "bleu": 29.0}, importance_delta=None)
    rows[1].update(gates_delta=None, importance=None, importance_delta=None)
    importance = {"heads_total": 24, "points": {"24": {"cross_entropy": 2.1, "bleu": 29.0}}, "checkpoint": "best"}
    importance.update(order_sentences=500, order_split="valid", split="test", beam=4, alpha=0.6)
    point = {"heads": 1, "open": 6, "bleu": 26.0, "bleu_seeds": 3, "cross_entropy": 2.25, "cross_entropy_seeds": 3}
    lines = comparison_lines(rows, importance, {"study": "s", "modules": 6, "points": [point]})
    assert "| 0.1 | 6/24 | +0.2500 | -1.00 | – | – |" in lines  # gates − h=1; no importance point at 6
    assert "| 0 | 24/24 | -0.2500 | +4.00 | -0.1500 | +3.00 |" in lines
    assert any("h=1: 6 heads, CE 2.2500 (3 seeds), BLEU 26.00 (3 seeds)" in line for line in lines)


def test_a_second_copy_is_refused_with_one_line(pruned, tiny_run):
    out, _ = pruned
    with study_lock(out, "prune"):
        result = run_cli(*prune_argv(tiny_run, out))
    assert_clean_error(result, "another `mhatrain prune` is running on", str(out))


@pytest.mark.parametrize("fault", ["update:50", "update:130"])  # in the 2nd window; in the 3rd, after a head closed
def test_kill_9_then_rerun_gives_the_uninterrupted_result(tmp_path, pruned, tiny_run, fault):
    reference, _ = pruned
    out = tmp_path / "p"
    killed = run_cli(*prune_argv(tiny_run, out, "1"), env={"MHATRAIN_FAULT": fault})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    resumed = run_cli(*prune_argv(tiny_run, out, "1"))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming at update" in resumed.stdout
    run, ref = out / "l0=1", reference / "l0=1"
    for name in ("last.pt", "best.pt"):
        assert_identical(load_checkpoint(run / name), load_checkpoint(ref / name), name)
    assert metric_records(run) == metric_records(ref)
    gates = [json.loads(line).get("p_open") for line in (run / "metrics.jsonl").read_text().splitlines()]
    ref_gates = [json.loads(line).get("p_open") for line in (ref / "metrics.jsonl").read_text().splitlines()]
    assert gates == ref_gates
    outcome, ref_outcome = (json.loads((d / "outcome.json").read_text()) for d in (run, ref))
    assert outcome == ref_outcome
    pruned_weights = load_checkpoint(out / "pruned" / "l0=1" / "best.pt")["model"]
    ref_weights = load_checkpoint(reference / "pruned" / "l0=1" / "best.pt")["model"]
    assert pruned_weights.keys() == ref_weights.keys()
    assert all(torch.equal(pruned_weights[k], ref_weights[k]) for k in ref_weights)


@pytest.mark.parametrize(
    "args, fragments",
    [
        (("--l0", "0,-1"), ("--l0: -1 is not a penalty",)),
        (("--l0", "0,abc"), ("--l0: 'abc' is not a number",)),
        (("--l0", "0.1,0.10"), ("--l0: 0.10 is given twice",)),
        (("--l0", "nan"), ("--l0: nan is not a penalty",)),
        (("--l0", ","), ("--l0: give a comma-separated list",)),
        (("--window", "30", "--max-updates", "60"), ("--window 30 must be a multiple of train.log_every=20",)),
        (("--max-updates", "100"), ("--max-updates 100 must be a multiple of --window 40",)),
        (("--min-updates", "200", "--max-updates", "80"), ("--min-updates 200 is above --max-updates 80",)),
        (("--set", "model.head_gates.l0=0.5"), ("prune sets model.head_gates.l0 itself",)),
        (("--grid", "no-such-study"), ("--grid no-such-study: not a head-count study directory",)),
    ],
)
def test_bad_options_get_one_line(tmp_path, tiny_run, args, fragments):
    argv = ["prune", str(tiny_run), "--out", str(tmp_path / "p"), "--window", "40", "--min-updates", "0"]
    argv += ["--max-updates", "160", *args]
    result = run_cli(*argv)
    assert_clean_error(result, *fragments)
    assert not (tmp_path / "p").exists()  # nothing written


def test_a_source_without_a_selected_checkpoint_is_refused(tmp_path, tiny_run):
    source = tmp_path / "half"
    source.mkdir()
    (source / "config.yaml").write_text((tiny_run / "config.yaml").read_text())
    assert_clean_error(run_cli("prune", str(source), "--out", str(tmp_path / "p")), "has no best.pt")
    assert_clean_error(run_cli("prune", str(tmp_path / "none"), "--out", str(tmp_path / "p")), "not a run directory")


def rec(step, counts, p=0.98):
    return {"step": step, "open_heads": {"enc_self": counts}, "p_open": {"enc_self": [[p, 0.01], [0.9, 0.0]]}}


def test_settled_means_the_same_open_count_and_still_gates_over_the_whole_window():
    history = [rec(20, [2, 2]), rec(40, [2, 1]), rec(60, [2, 1]), rec(80, [2, 1], 0.97), rec(100, [2, 1], 0.9)]
    assert settled(history, 80, 40) == 80  # 3 open at 40, 60 and 80; P(open) moved by 0.01 < 0.02
    assert settled(history, 60, 40) is None  # 4 at 20, 3 at 60
    assert settled(history, 100, 40) is None  # the count held, but a gate moved from 0.98 to 0.9
    assert settled(history, 120, 40) is None  # nothing logged at 120 yet


def test_a_window_at_a_time_trains_as_one_uninterrupted_run(tmp_path, pruned, tiny_run):
    """The λ runs resume between windows, so comparing a killed prune with an uninterrupted one cannot see a
    resume that differs from going on: one `train` of as many updates from the same weights must give the
    same weights, Adam moments and random state (validation, which the windows add, changes none of them)."""
    import io
    import shutil

    from rich.console import Console

    from mhatrain.study.running.prune import PrunePlan, run_config
    from mhatrain.training.loop import train

    out, _ = pruned
    updates = report_runs(out)[1.0]["updates"]
    plan = PrunePlan(tiny_run, out, [1.0], 40, 120, 200, list(SETS))
    whole = tmp_path / "whole"
    whole.mkdir()
    shutil.copyfile(tiny_run / "spm.model", whole / "spm.model")
    train(run_config(plan, 1.0, updates), whole, console=Console(file=io.StringIO()), init_from=plan.checkpoint)
    a, b = load_checkpoint(whole / "last.pt"), load_checkpoint(out / "l0=1" / "last.pt")
    for key in ("model", "optimizer", "rng"):
        assert_identical(a[key], b[key], key)


def test_the_report_orders_the_kinds_by_heads_kept_beside_voita(pruned):
    out, _ = pruned
    runs = report_runs(out)
    (row,) = json.loads((out / "report.json").read_text())["kinds_kept"]  # λ = 0 has no order to give
    assert row["l0"] == 1.0
    for kind, kept in row["kept"].items():
        assert kept == {"open": sum(runs[1.0]["open_heads"][kind]), "heads": 8}  # 2 layers × 4 heads
    shares = [row["kept"][kind]["open"] for kind in row["order"]]
    assert shares == sorted(shares, reverse=True) and sorted(row["order"]) == sorted(runs[1.0]["open_heads"])
    report = (out / "report.md").read_text()
    shown = " > ".join(f"{k} {row['kept'][k]['open']}/8" for k in row["order"]) if any(shares) else "no head kept"
    assert f"- λ = 1: {shown}" in report and "Voita et al. 2019" in report


def test_the_kinds_are_listed_most_kept_first_and_a_run_that_closed_every_head_says_so():
    from mhatrain.study.reports.prune_report import kind_order_lines, kinds_kept

    def outcome(l0, enc, dec, cross):
        open_heads = {"enc_self": enc, "dec_self": dec, "cross": cross}
        return {
            "l0": l0,
            "open_heads": open_heads,
            "p_open": {k: [[0.5] * 4 for _ in v] for k, v in open_heads.items()},
        }

    rows = kinds_kept(
        [
            outcome(0.3, [0, 0], [0, 0], [0, 0]),
            outcome(0.0, [4, 4], [4, 4], [4, 4]),
            outcome(0.1, [1, 0], [2, 2], [3, 4]),
        ]
    )
    assert [row["l0"] for row in rows] == [0.1, 0.3]  # by λ, without λ = 0
    lines = kind_order_lines(rows)
    assert "- λ = 0.1: cross 7/8 > dec_self 4/8 > enc_self 1/8" in lines and "- λ = 0.3: no head kept" in lines


def test_the_cost_of_the_gate_study_sums_its_runs_training_and_sets_it_beside_the_grid(pruned, tiny_run):
    from mhatrain.study.reports.gate_study_cost import gate_study_cost

    out, _ = pruned
    cost = json.loads((out / "report.json").read_text())["cost"]
    summaries = [json.loads((d / "train_summary.json").read_text()) for d in (tiny_run, out / "l0=0", out / "l0=1")]
    assert cost["gate_study"]["runs"] == 3 and cost["grid"] is None  # no --grid given
    assert cost["gate_study"]["target_tokens"] == sum(s["target_tokens"] for s in summaries)
    assert cost["gate_study"]["updates"] == sum(s["updates"] for s in summaries)
    assert cost["gate_study"]["train_seconds"] == pytest.approx(sum(s["train_seconds"] for s in summaries))
    assert "## What the gate study cost" in (out / "report.md").read_text()

    grid_dir = ROOT / "results" / "ablate-multi30k"
    with_grid = gate_study_cost(tiny_run, [out / "l0=0", out / "l0=1"], grid_dir)
    points = [json.loads(p.read_text()) for p in grid_dir.glob("h*-seed*/train_summary.json")]
    assert with_grid["grid"]["runs"] == len(points) == 21
    assert with_grid["grid"]["target_tokens"] == sum(p["target_tokens"] for p in points)
    assert with_grid["ratio"]["target_tokens"] == pytest.approx(
        cost["gate_study"]["target_tokens"] / with_grid["grid"]["target_tokens"]
    )
