"""The head-count study: grid, study directory, resumable runs, the report and its significance tests."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sacrebleu
import torch
import yaml
from rich.console import Console

from mhatrain.console.command_options import int_list
from mhatrain.core.checkpoint import load_checkpoint
from mhatrain.core.config import load_config
from mhatrain.core.errors import MhatrainError
from mhatrain.data.tokens import PAD
from mhatrain.model.transformer import build_model, count_parameters
from mhatrain.study.grid.directory import EVAL_SPLITS, Study, code_name, point_seconds
from mhatrain.study.grid.points import Point, Slot, check_heads, check_seeds, expand_grid, parse_point_name
from mhatrain.study.reports.grid_report import build_report
from mhatrain.study.reports.markdown import to_markdown
from mhatrain.study.reports.study_report import report_study
from mhatrain.study.running.ablate import plan_slots, run_study

from .conftest import ROOT, TINY, TOY, assert_clean_error, run_cli

HEADS = "1,8"


def study_sets(spm_cache) -> list[str]:
    """Small enough to train two grid points in seconds; checkpoints every 4 updates for the kill test."""
    return [
        f"data.cache_dir={spm_cache}",
        f"data.local_dir={TOY}",
        "train.max_steps=40",
        "train.checkpoint_every=4",
        "train.valid_max_sentences=10",
        "train.log_every=1000",
        "train.early_stop_metric=loss",  # the study's measure: the loss-selected checkpoint
    ]


def cli_sets(spm_cache) -> list[str]:
    return [arg for item in study_sets(spm_cache) for arg in ("--set", item)]


def Silent() -> Console:
    return Console(file=io.StringIO(), width=200)


def parse_heads(text: str, d_model: int) -> list[int]:
    """`ablate --heads TEXT`: the command line's list, then the study's check of its head counts."""
    return check_heads(int_list(text, "--heads", "head counts"), d_model)


def parse_seeds(text: str) -> list[int]:
    return check_seeds(int_list(text, "--seeds", "seeds"))


def dry_run(
    out: Path,
    spm_cache,
    *extra_sets: str,
    heads: str = HEADS,
    seeds: str = "1",
    jobs: int = 1,
    overwrite: bool = False,
    allow_code_change: bool = False,
) -> None:
    grid = int_list(heads, "--heads", "head counts"), int_list(seeds, "--seeds", "seeds")
    sets = [*study_sets(spm_cache), *extra_sets]
    run_study(TINY, *grid, out, sets, jobs, None, True, overwrite, Silent(), allow_code_change=allow_code_change)


def snapshot(directory: Path) -> dict[str, tuple[int, str]]:
    """Every file under `directory`: (modification time in ns, SHA-1 of its bytes)."""
    return {
        str(p.relative_to(directory)): (p.stat().st_mtime_ns, hashlib.sha1(p.read_bytes()).hexdigest())
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = load_checkpoint(a)["model"], load_checkpoint(b)["model"]
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), f"{a} vs {b}: {key}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory, spm_cache) -> Path:
    """An uninterrupted study run with --jobs 2: every point as the subprocess commands of --dry-run."""
    out = tmp_path_factory.mktemp("reference") / "study"
    result = run_cli("ablate", str(TINY), "--heads", HEADS, "--out", str(out), "--jobs", "2", *cli_sets(spm_cache))
    assert result.returncode == 0, result.stderr + result.stdout
    return out


# ----------------------------------------------------------------------------- the grid


def test_grid_is_seed_major_with_one_named_directory_per_point():
    grid = expand_grid([8, 1, 16], [2, 1])
    assert [p.name for p in grid] == ["h01-seed2", "h08-seed2", "h16-seed2", "h01-seed1", "h08-seed1", "h16-seed1"]
    assert Point(128, 3).name == "h128-seed3"
    assert all(parse_point_name(p.name) == p for p in grid)
    assert parse_point_name("h08-seed1-old") is None and parse_point_name("report.md") is None
    assert Point(4, 7).overrides == ["model.n_heads=4", "train.seed=7"]
    assert parse_heads(" 32,1 ,8", 512) == [1, 8, 32]
    assert parse_seeds("3,1,2") == [3, 1, 2]


@pytest.mark.parametrize(
    "text, message",
    [
        ("0", "0 is not a positive number of heads"),
        ("1,-4", "-4 is not a positive number of heads"),
        ("1,x", "'x' is not an integer"),
        ("2.5", "'2.5' is not an integer"),
        ("4,8,4", "4 is given twice"),
        ("3", "3 does not divide model.d_model=64"),
        ("1,,8", "'' is not an integer"),
        ("", "give a comma-separated list"),
    ],
)
def test_invalid_heads_are_rejected(text, message):
    with pytest.raises(MhatrainError, match="^--heads: .*" + message.replace("(", r"\(")):
        parse_heads(text, 64)


def test_invalid_seeds_are_rejected():
    with pytest.raises(MhatrainError, match="--seeds: 1 is given twice"):
        parse_seeds("1,1")
    with pytest.raises(MhatrainError, match="--seeds: -1 is negative"):
        parse_seeds("-1")


def test_invalid_heads_fail_on_the_command_line_before_anything_is_written(tmp_path):
    out = tmp_path / "study"
    result = run_cli("ablate", str(TINY), "--heads", "1,4,48", "--out", str(out))
    assert result.returncode == 2, result.stderr + result.stdout
    assert result.stderr.strip().splitlines() == [
        "error: --heads: 48 does not divide model.d_model=64 (d_k = d_model / h must be a whole number, or set "
        "model.d_head; divisors: 1, 2, 4, 8, 16, 32, 64)"
    ]
    assert not out.exists()


def test_parameters_and_projection_shapes_do_not_depend_on_the_head_count():
    cfg = load_config(TINY).model
    counts = {}
    for h in (1, 2, 4, 8, 16, 32, 64):
        cfg.n_heads = h
        model = build_model(cfg, 64, PAD)
        counts[h] = count_parameters(model)
    assert len(set(counts.values())) == 1, counts


def test_jobs_share_the_cpu_threads_and_the_devices(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert plan_slots(1, [], 0) == [Slot()]  # one job: the config as it is
    assert plan_slots(2, [], 0) == [Slot(threads=4), Slot(threads=4)]
    assert plan_slots(2, [], 1) == [Slot(threads=1), Slot(threads=1)]  # never more than asked
    slots = plan_slots(3, ["cuda:0", "cuda:1"], 0)
    assert slots == [Slot("cuda:0", 2), Slot("cuda:1", 2), Slot("cuda:0", 2)]
    # a slot's values become --set text in its points' commands alone
    assert [slot.overrides for slot in slots[:2]] == [
        ["train.device=cuda:0", "train.threads=2"],
        ["train.device=cuda:1", "train.threads=2"],
    ]
    assert Slot().overrides == []


# ----------------------------------------------------------------------------- the study directory


def test_dry_run_records_the_study_and_prints_each_points_commands(tmp_path, spm_cache, capsys):
    out = tmp_path / "study"
    dry_run(out, spm_cache, heads="1,8,16", seeds="1,2")
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 6
    recorded = yaml.safe_load((out / "study.yaml").read_text())
    assert recorded["heads"] == [1, 8, 16] and recorded["seeds"] == [1, 2]
    for line, point in zip(lines, expand_grid([1, 8, 16], [1, 2])):
        train, *evals = [shlex.split(part) for part in line.split(" && ")]
        run_dir = out / point.name
        assert train[1:4] == ["-m", "mhatrain", "train"] and train[4] == str(out / "base-config.yaml")
        assert train[5:8] == ["--out", str(run_dir), "--resume"]
        sets = train[9::2]
        assert sets == point.overrides
        # The command's config is the point's config, as the in-process path builds it.
        assert load_config(train[4], sets) == load_config(run_dir / "config.yaml")
        assert load_config(run_dir / "config.yaml").model.n_heads == point.heads
        assert [e[3:] for e in evals] == [["eval", str(run_dir), "--split", split] for split in EVAL_SPLITS]


def test_a_study_refuses_another_config_unless_asked_to_overwrite(tmp_path, spm_cache):
    out = tmp_path / "study"
    dry_run(out, spm_cache)
    (out / "h01-seed1" / "last.pt").write_bytes(b"a run of the old config")
    with pytest.raises(
        MhatrainError,
        match=r"holds a study made with a different config \(model\.d_ff: 128 there, "
        r"256 now\); use another --out, or --overwrite",
    ):
        dry_run(out, spm_cache, "model.d_ff=256")
    dry_run(out, spm_cache, "train.threads=2")  # how it runs is not what it computes: accepted
    dry_run(out, spm_cache, heads="1,4,8")  # a grid can grow
    assert yaml.safe_load((out / "study.yaml").read_text())["heads"] == [1, 4, 8]
    assert (out / "h01-seed1" / "last.pt").exists()
    dry_run(out, spm_cache, "model.d_ff=256", overwrite=True)
    assert not (out / "h01-seed1" / "last.pt").exists()
    assert yaml.safe_load((out / "base-config.yaml").read_text())["model"]["d_ff"] == 256
    assert yaml.safe_load((out / "study.yaml").read_text())["heads"] == [1, 8]


def test_a_study_started_by_another_commit_is_refused_unless_allowed(tmp_path, spm_cache):
    """A later commit may compute the update or the validation differently (once: a stale weight stack
    in validation), so every point of a study must come from one code version."""
    out = tmp_path / "study"
    dry_run(out, spm_cache)
    study = yaml.safe_load((out / "study.yaml").read_text())
    (now,) = study["code"]
    other = {**now, "commit": "0" * 40}
    (out / "study.yaml").write_text(yaml.safe_dump({**study, "code": [other]}, sort_keys=False))
    dry_run(out, spm_cache)  # no point has started: nothing was made by the other commit
    assert yaml.safe_load((out / "study.yaml").read_text())["code"] == [now]

    (out / "study.yaml").write_text(yaml.safe_dump({**study, "code": [other]}, sort_keys=False))
    (out / "h08-seed1" / "last.pt").write_bytes(b"a run of the other commit")
    expected = f"its runs were made by {code_name(other)} and this is {code_name(now)}; "
    with pytest.raises(MhatrainError, match=re.escape(expected) + ".*--allow-code-change"):
        dry_run(out, spm_cache)
    assert yaml.safe_load((out / "study.yaml").read_text())["code"] == [other]  # the refusal changed nothing
    dry_run(out, spm_cache, allow_code_change=True)
    assert yaml.safe_load((out / "study.yaml").read_text())["code"] == [other, now]
    dry_run(out, spm_cache)  # both are recorded now: the study goes on
    assert "2 code versions ran this study" in " ".join(build_report(out)["notes"])


def test_a_point_evaluated_by_other_code_is_named_in_the_reports_code_line(reference, tmp_path):
    """Points added or re-evaluated outside `ablate` (study.yaml lists only what `ablate` ran) must not
    leave the report claiming that one commit made every run."""
    study = Path(shutil.copytree(reference, tmp_path / "study"))
    assert "Every run trained and evaluated by commit" in to_markdown(build_report(study))
    test_eval = study / "h08-seed1" / "eval" / "test.beam3.json"
    result = json.loads(test_eval.read_text())
    other = {**result["provenance"]["code"], "commit": "f" * 40}
    test_eval.write_text(json.dumps({**result, "provenance": {**result["provenance"], "code": other}}))
    markdown = to_markdown(build_report(study))
    assert "Every run trained and evaluated by commit" not in markdown
    assert "Code versions that ran this study (study.yaml and the runs' provenance): " in markdown
    assert "f" * 40 in markdown


def test_a_directory_that_is_not_a_study_is_not_used(tmp_path, spm_cache):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(MhatrainError, match="is not empty and holds no study"):
        dry_run(out, spm_cache)


# ----------------------------------------------------------------------------- running, interrupted, resumed


def test_reference_study_ran_every_point_as_the_dry_run_commands(reference, spm_cache, capsys):
    dry_run(reference, spm_cache, jobs=2)  # the same study: prints its commands, changes nothing
    printed = capsys.readouterr().out.strip().splitlines()
    for line, point in zip(printed, expand_grid([1, 8], [1])):
        log = (reference / "logs" / f"{point.name}.log").read_text()
        ran = [entry[2:] for entry in log.splitlines() if entry.startswith("$ ")]
        assert " && ".join(ran) == line
    report = json.loads((reference / "report.json").read_text())
    assert report["runs_done"] == 2
    assert len({run["parameters"] for run in report["runs"]}) == 1  # constant across h, by construction


def test_killed_study_resumes_without_redoing_finished_runs(tmp_path, spm_cache, reference):
    out = tmp_path / "study"
    command = [
        sys.executable,
        "-m",
        "mhatrain",
        "ablate",
        str(TINY),
        "--heads",
        HEADS,
        "--out",
        str(out),
        *cli_sets(spm_cache),
    ]
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    first, second = out / "h01-seed1", out / "h08-seed1"
    deadline = time.time() + 240
    while not ((first / "eval" / "test.beam3.json").exists() and (second / "last.pt").exists()):
        assert proc.poll() is None, "the study finished before it could be interrupted"
        assert time.time() < deadline, "the study did not reach its second run in time"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (second / "train_summary.json").exists()  # killed in the middle of the second run's training
    before = snapshot(first)

    result = run_cli(*command[3:])
    assert result.returncode == 0, result.stderr + result.stdout
    assert "1 of 2 runs already finished: skipped" in result.stdout
    assert "resuming at update" in result.stdout
    # The ETA starts from the finished run's recorded time, and the resumed run's line says that
    # its own clock saw only this session.
    starting = next(
        line for line in result.stdout.splitlines() if line.startswith("grid h08-seed1 (h=8, seed 1) starting")
    )
    assert re.search(r"1/2 runs done, 1 running, 0 left, ETA \d+:\d\d:\d\d$", starting), starting
    assert re.search(
        r"grid h08-seed1 done in \d+:\d\d:\d\d \(resumed; \d+:\d\d:\d\d in all its sessions\)", result.stdout
    ), result.stdout
    study = Study(out, [Point(1, 1), Point(8, 1)], [1, 8], [1], beam=3)
    assert point_seconds(study, Point(1, 1)) == pytest.approx(
        sum(json.loads((first / "eval" / f"{split}.beam3.json").read_text())["decode_seconds"] for split in EVAL_SPLITS)
        + sum(json.loads((first / "train_summary.json").read_text())[key] for key in ("train_seconds", "valid_seconds"))
    )
    assert snapshot(first) == before  # not retrained, not re-evaluated, not even rewritten
    for point in ("h01-seed1", "h08-seed1"):
        for name in ("best.pt", "last.pt"):
            assert_same_weights(reference / point / name, out / point / name)
        for split in EVAL_SPLITS:
            ours, theirs = (
                json.loads((d / point / "eval" / f"{split}.beam3.json").read_text()) for d in (out, reference)
            )
            assert (ours["bleu"], ours["chrf"]) == (theirs["bleu"], theirs["chrf"])
            assert (out / point / "eval" / f"{split}.beam3.hyp.txt").read_text() == (
                reference / point / "eval" / f"{split}.beam3.hyp.txt"
            ).read_text()

    again = run_cli(*command[3:])  # a finished study: nothing to do but the report
    assert again.returncode == 0 and "2 of 2 runs already finished: skipped" in again.stdout
    assert snapshot(first) == before


# ----------------------------------------------------------------------------- the report


def test_report_of_a_finished_study(reference):
    report = report_study(reference, Silent())
    rows = {row["heads"]: row for row in report["by_heads"]}
    assert rows[1]["d_head"] == 64 and rows[8]["d_head"] == 8
    assert rows[1]["parameters"] == rows[8]["parameters"] > 0
    assert rows[8]["diff_to_h8"]["test_bleu"] == 0.0
    assert rows[1]["diff_to_h8"]["test_bleu"] == pytest.approx(
        rows[1]["test_bleu"]["mean"] - rows[8]["test_bleu"]["mean"], abs=0.011
    )
    (test,) = report["significance"]["per_seed"]
    assert test["heads"] == 1 and test["seed"] == 1 and 0 < test["p_value"] <= 1 and test["p_holm"] == test["p_value"]
    assert test["difference_ci95"][0] <= test["difference"] <= test["difference_ci95"][1]
    (level,) = report["significance"]["seed_level"]
    assert level["seeds"] == [1] and level["df"] == 0 and level["p_value"] is None and level["p_adjusted"] is None
    assert level["mean_difference"] == pytest.approx(test["difference"], abs=0.006)
    assert level["verdict"] == "not tested"  # one seed per h: no residual to test against
    ce = report["significance"]["cross_entropy"]  # eval wrote each sentence's NLL: tested on the test set
    assert ce["source"] == "test" and ce["seed_level"][0]["verdict"] == "not tested"
    assert all(run["test_nll"] > 0 and run["test_nll_file"] for run in report["runs"])
    assert rows[1]["diff_to_h8"]["test_nll"] == pytest.approx(rows[1]["test_nll"]["mean"] - rows[8]["test_nll"]["mean"])
    assert all(run["updates"] == run["loss_selected_update"] for run in report["runs"])
    assert report["significance"]["left_out"] == [] and report["measure"]["name"] == "loss-selected checkpoint"
    assert report["significance"]["samples"] == 1000 and report["significance"]["bootstrap_seed"] == 12345
    assert rows[1]["paper"] == {"d_k": 512, "ppl": 5.29, "bleu": 24.9, "bleu_diff_to_h8": -0.9, "ppl_diff_to_h8": 0.37}
    assert report["claims"]["article"]["h8_minus_h1_bleu"] == 2.3
    assert report["claims"]["paper"]["h8_minus_h1_bleu"] == 0.9
    assert report["claims"]["ours"]["test_bleu"] == -rows[1]["diff_to_h8"]["test_bleu"]
    markdown = (reference / "report.md").read_text()
    assert "8 heads beat 1 head by 2.3 BLEU" in markdown and "| 1 | 64 |" in markdown
    per_h = (reference / "report.csv").read_text().splitlines()
    assert per_h[0].startswith("heads,d_k,parameters") and len(per_h) == 3
    assert len((reference / "report-runs.csv").read_text().splitlines()) == 3
    assert (reference / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_second_report_of_unchanged_runs_leaves_every_file_byte_identical(reference, tmp_path):
    """Committed report files must not show as modified after `report` reruns on the same runs."""
    study = Path(shutil.copytree(reference, tmp_path / "study"))
    files = {}
    for attempt in range(2):
        if attempt:
            time.sleep(1.1)  # a clock in the output (a timestamp to the second) would tick over
        result = run_cli("report", str(study))
        assert result.returncode == 0, result.stderr + result.stdout
        files[attempt] = {str(p.relative_to(study)): p.read_bytes() for p in sorted(study.rglob("*")) if p.is_file()}
    assert [name for name in files[0] if files[0][name] != files[1].get(name)] == []
    assert files[0].keys() == files[1].keys()


def test_report_of_a_partial_study_without_h8(tmp_path, spm_cache, reference):
    out = tmp_path / "study"
    dry_run(out, spm_cache, heads="1,2,8", seeds="1,2")
    shutil.rmtree(out / "h01-seed1")
    shutil.copytree(reference / "h01-seed1", out / "h01-seed1")  # finished
    for name in ("last.pt", "metrics.jsonl", "spm.model"):  # h=8 still training
        shutil.copy(reference / "h08-seed1" / name, out / "h08-seed1" / name)
    result = run_cli("report", str(out))
    assert result.returncode == 0, result.stderr + result.stdout
    assert "1 of 6 runs done" in result.stdout
    assert "no finished h=8 run" in result.stdout
    report = json.loads((out / "report.json").read_text())
    status = {run["name"]: run["status"] for run in report["runs"]}
    assert status == {
        "h01-seed1": "done",
        "h01-seed2": "pending",
        "h02-seed1": "pending",
        "h02-seed2": "pending",
        "h08-seed1": "training",
        "h08-seed2": "pending",
    }
    rows = {row["heads"]: row for row in report["by_heads"]}
    assert rows[1]["runs_done"] == 1 and rows[1]["test_bleu"]["std"] is None
    assert all(row["diff_to_h8"] is None for row in rows.values())
    assert report["significance"]["per_seed"] == [] and report["claims"]["ours"] is None
    assert "| 2 | 32 | — | 0/2 | — | — | — | — | pending |" in (out / "report.md").read_text()
    assert (out / "report.png").is_file()


def test_the_report_notes_points_whose_config_differs_in_more_than_h_and_seed(tmp_path, spm_cache):
    out = tmp_path / "study"
    dry_run(out, spm_cache, heads="1,8", seeds="1,2")
    config_file = out / "h08-seed2" / "config.yaml"
    config = yaml.safe_load(config_file.read_text())
    other = "fp32" if config["train"]["precision"] != "fp32" else "bf16"
    was = config["train"]["precision"]
    config["train"]["precision"], config["train"]["threads"] = other, 7  # threads: how it ran, not what
    config_file.write_text(yaml.safe_dump(config))
    notes = build_report(out)["notes"]
    expected = f"train.precision: '{was}' (h01-seed1, h01-seed2, h08-seed1); '{other}' (h08-seed2)"
    assert [n for n in notes if "their config" in n] == [f"points of this study differ in their config's {expected}"]


def test_report_of_a_directory_without_a_study_is_a_clean_error(tmp_path):
    with pytest.raises(MhatrainError, match="holds no study"):
        build_report(tmp_path)
    with pytest.raises(MhatrainError, match="study directory not found"):
        build_report(tmp_path / "missing")


MULTI30K_STUDY = ROOT / "results" / "ablate-multi30k"  # three seeds per h
SEED1_STUDY = MULTI30K_STUDY / "one-seed"  # the first grid, one seed per h, kept as history
CONVERGENCE = MULTI30K_STUDY / "convergence"  # each h's seed-1 run trained on to its plateau
SHARED_MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"


@pytest.mark.skipif(not SHARED_MULTI30K.is_dir(), reason="needs the Multi30k files beside the repository")
@pytest.mark.parametrize(
    ("committed_study", "seeds"),
    [(MULTI30K_STUDY, 3), (SEED1_STUDY, 1), (CONVERGENCE, 1)],
    ids=["3-seed", "1-seed", "convergence"],
)
def test_the_committed_multi30k_study_rebuilds_its_report(tmp_path, monkeypatch, committed_study, seeds):
    """The README's head-count results are what `report` makes of the committed run files."""
    study = tmp_path / "ablate-multi30k"
    shutil.copytree(committed_study, study, ignore=shutil.ignore_patterns("report*", "one-seed", "convergence"))
    monkeypatch.chdir(ROOT)  # base-config.yaml names the data relative to the repository root
    rebuilt = json.loads(json.dumps(report_study(study, Silent())))
    committed = json.loads((committed_study / "report.json").read_text(encoding="utf-8"))
    assert rebuilt["runs_done"] == committed["runs_done"] and rebuilt["runs_total"] == committed["runs_total"]
    for key in ("runs", "by_heads", "significance", "claims"):
        assert rebuilt[key] == committed[key], key
    assert set(range(1, seeds + 1)) <= {run["seed"] for run in rebuilt["runs"]}  # with any seeds added since


@pytest.mark.skipif(not SHARED_MULTI30K.is_dir(), reason="needs the Multi30k files beside the repository")
def test_a_partial_studys_difference_is_over_the_seeds_both_h_have(tmp_path, monkeypatch):
    """h=1 with seeds 1-2 against h=8 with seeds 1-3: Δ in the table is the paired difference the tests
    (and the conclusion) are about, not the mean of two seeds minus the mean of three."""
    study = tmp_path / "partial"
    for point in ("h01-seed1", "h01-seed2", "h08-seed1", "h08-seed2"):
        shutil.copytree(MULTI30K_STUDY / point, study / point)
    # the grid's first h08-seed3, evaluated at its BLEU-selected checkpoint (the study now holds its retrain)
    shutil.copytree(MULTI30K_STUDY / "bleu-selected" / "h08-seed3", study / "h08-seed3")
    monkeypatch.chdir(ROOT)
    report = report_study(study, Silent())
    bleu = {run["name"]: run["test_bleu"] for run in report["runs"]}
    paired = (bleu["h01-seed1"] + bleu["h01-seed2"] - bleu["h08-seed1"] - bleu["h08-seed2"]) / 2
    unpaired = (bleu["h01-seed1"] + bleu["h01-seed2"]) / 2 - sum(bleu[f"h08-seed{s}"] for s in (1, 2, 3)) / 3
    row = next(line for line in (study / "report.md").read_text().splitlines() if line.startswith("| 1 | 256 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert abs(float(cells[13]) - paired) <= 0.011  # the tests use unrounded BLEU
    assert abs(float(cells[13]) - unpaired) > 0.05
    assert f"h=1: {cells[13]} BLEU" in report["claims"]["conclusion"]
    # h08-seed3 was evaluated at a BLEU-selected checkpoint, not the loss-selected one: out of the tests, named
    assert report["significance"]["left_out"] == ["h08-seed3"]
    assert any("h08-seed3 (evaluated update 2,200, lowest validation loss at 2,600)" in n for n in report["notes"])
    assert report["significance"]["seed_level"][0]["baseline_seeds"] == [1, 2]
    runs = {run["name"]: run for run in report["runs"]}
    assert (runs["h01-seed1"]["precision"], runs["h01-seed1"]["device"]) == ("bf16", "AMD EPYC")
    h1 = next(row for row in report["by_heads"] if row["heads"] == 1)
    assert h1["diff_to_h8"]["test_bleu"] == pytest.approx(paired, abs=0.006)  # report.json, the CSV and the claim
    assert report["claims"]["ours"]["test_bleu"] == -h1["diff_to_h8"]["test_bleu"]
    csv_h1 = next(r for r in csv.DictReader((study / "report.csv").open()) if r["heads"] == "1")
    assert float(csv_h1["test_bleu_diff_to_h8"]) == h1["diff_to_h8"]["test_bleu"]
    # BLEU by source length counts the runs the tests count: h08-seed3 is named, and h=1's Δ is over seeds 1-2
    lengths = report["lengths"]
    assert sorted(r["name"] for r in lengths["runs"]) == ["h01-seed1", "h01-seed2", "h08-seed1", "h08-seed2"]
    assert any(note.startswith("h08-seed3: left out") for note in lengths["notes"])
    per_run = {r["name"]: r["bleu"] for r in lengths["runs"]}
    h1_lengths = next(row for row in lengths["by_heads"] if row["heads"] == 1)
    assert h1_lengths["diff_seeds"] == [1, 2]
    for b in range(len(lengths["buckets"])):
        expected = sum(per_run[f"h01-seed{s}"][b] - per_run[f"h08-seed{s}"][b] for s in (1, 2)) / 2
        assert h1_lengths["diff_to_baseline"][b] == pytest.approx(expected, abs=0.006)
    # a bucket's BLEU is sacreBLEU's corpus BLEU of that bucket's sentences
    sources = [line.split() for line in gzip.open(SHARED_MULTI30K / "test_2016_flickr.en.gz", "rt", encoding="utf-8")]
    references = gzip.open(SHARED_MULTI30K / "test_2016_flickr.de.gz", "rt", encoding="utf-8").read().splitlines()
    hypotheses = (study / "h01-seed1" / "eval" / "test.beam4.hyp.txt").read_text(encoding="utf-8").splitlines()
    longest = [i for i, words in enumerate(sources) if len(words) > 19]
    assert lengths["buckets"][-1]["sentences"] == len(longest)
    assert sum(b["sentences"] for b in lengths["buckets"]) == len(references)
    bleu = sacrebleu.corpus_bleu([hypotheses[i] for i in longest], [[references[i] for i in longest]]).score
    assert per_run["h01-seed1"][-1] == pytest.approx(bleu, abs=0.0001)


# ----------------------------------------------------------------------------- export


def _files(directory: Path) -> set[str]:
    return {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}


def test_export_copies_a_study_or_one_run_without_checkpoints_or_absolute_paths(reference, tmp_path):
    study = run_cli("export", str(reference), str(tmp_path / "study"))
    assert study.returncode == 0, study.stderr + study.stdout
    files = _files(tmp_path / "study")
    assert {"study.yaml", "report.md", "h08-seed1/config.yaml", "h08-seed1/metrics.jsonl"} <= files
    assert any(f.startswith("h08-seed1/eval/test.") and f.endswith(".json") for f in files)
    assert not [f for f in files if f.endswith((".pt", ".model"))]
    absolute = re.compile(r"(?<![\w.~/-])" + re.escape(str(reference.parent)))  # not inside ../../tmp/...
    texts = [name for name in files if name.endswith((".yaml", ".json", ".jsonl", ".md", ".csv", ".log", ".txt"))]
    assert "study.yaml" in texts and "h08-seed1/train_summary.json" in texts
    for name in texts:
        assert not absolute.search((tmp_path / "study" / name).read_text(encoding="utf-8")), name
    assert absolute.search((reference / "h08-seed1" / "train_summary.json").read_text(encoding="utf-8"))

    run = run_cli("export", str(reference / "h08-seed1"), str(tmp_path / "run"))
    assert run.returncode == 0, run.stderr + run.stdout
    point = {f.removeprefix("h08-seed1/") for f in files if f.startswith("h08-seed1/")}
    assert _files(tmp_path / "run") == point
    assert (tmp_path / "run" / "config.yaml").read_text() == (
        tmp_path / "study" / "h08-seed1" / "config.yaml"
    ).read_text()

    # Run directories alone, named as grid points, are a study too (e.g. exported runs trained further).
    bare = tmp_path / "bare"
    for point in ("h01-seed1", "h08-seed1"):
        assert run_cli("export", str(reference / point), str(bare / point)).returncode == 0
    curves = run_cli("curves", str(bare), "--out", str(tmp_path / "bare.png"))
    assert curves.returncode == 0 and "h01-seed1: best at update" in curves.stdout, curves.stderr + curves.stdout
    report = run_cli("report", str(bare))
    assert report.returncode == 0, report.stderr + report.stdout
    commit = json.loads((reference / "h08-seed1" / "provenance.json").read_text())["sessions"][0]["code"]["commit"]
    assert f"Every session in the runs' provenance ran commit `{commit}`" in (bare / "report.md").read_text()
    assert run_cli("export", str(bare), str(tmp_path / "again")).returncode == 0
    assert _files(tmp_path / "again") == _files(bare)

    (tmp_path / "neither").mkdir()
    assert_clean_error(run_cli("export", str(tmp_path / "neither"), str(tmp_path / "x")), "neither a study")
    assert_clean_error(run_cli("export", str(tmp_path / "missing"), str(tmp_path / "x")), "not found")


def test_a_study_continues_from_its_exported_files(reference, spm_cache, tmp_path):
    """Exported files hold data.local_dir relative to the export's directory; `ablate` run there on them
    is the same study: finished points are skipped, nothing trains."""
    exported = tmp_path / "exported"
    assert run_cli("export", str(reference), str(exported)).returncode == 0
    base = yaml.safe_load((exported / "base-config.yaml").read_text())
    assert not Path(base["data"]["local_dir"]).is_absolute()
    result = run_cli("ablate", str(TINY), "--heads", HEADS, "--out", str(exported), *cli_sets(spm_cache))
    assert result.returncode == 0, result.stderr + result.stdout
    assert "2 of 2 runs already finished: skipped" in result.stdout
    assert not list(exported.rglob("*.pt"))
    moved_data = shutil.copytree(TOY, tmp_path / "moved-toy")  # the same files in another directory
    elsewhere = [*cli_sets(spm_cache), "--set", f"data.local_dir={moved_data}"]
    moved = run_cli("ablate", str(TINY), "--heads", HEADS, "--out", str(exported), *elsewhere)
    assert_clean_error(moved, "different config (data.local_dir")


# ----------------------------------------------------------------------------- learning curves


def test_curves_of_a_study_and_of_runs(reference, tmp_path):
    result = run_cli("curves", str(reference), "--out", str(tmp_path / "study.png"))
    assert result.returncode == 0, result.stderr + result.stdout
    assert (tmp_path / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for point in ("h01-seed1", "h08-seed1"):
        summary = json.loads((reference / point / "train_summary.json").read_text())
        line = next(line for line in result.stdout.splitlines() if line.startswith(point + ":"))
        assert f"best at update {summary['best_step']:,}" in line
    runs = run_cli(
        "curves", str(reference / "h01-seed1"), str(reference / "h08-seed1"), "--out", str(tmp_path / "runs.png")
    )
    assert runs.returncode == 0 and (tmp_path / "runs.png").is_file()
    assert (reference / "curves.png").is_file()  # the study's report draws them too
    bad = run_cli("curves", str(tmp_path))
    assert bad.returncode != 0 and "no metrics.jsonl" in bad.stderr + bad.stdout
    assert "Traceback" not in bad.stderr


def test_curves_mean_over_seeds_at_the_updates_every_seed_reached():
    from mhatrain.study.reports.curves import Curve, group_by_heads

    a = Curve("h08-seed1", 8, 1, [100, 200, 300], [10.0, 20.0, 30.0], [9.0, 5.0, 4.0], best_step=300)
    b = Curve("h08-seed2", 8, 2, [100, 200], [12.0, 22.0], [8.0, 6.0], best_step=200)
    (group,) = group_by_heads([a, b]).values()
    assert group["valid_bleu"] == {"steps": [100, 200], "mean": [11.0, 21.0], "low": [10.0, 20.0], "high": [12.0, 22.0]}
    assert group["best"] == [(300, 30.0, 4.0), (200, 22.0, 6.0)]


def test_report_shows_head_roles_per_h_when_the_runs_have_them(reference, tmp_path):
    study = tmp_path / "study"
    shutil.copytree(reference, study)
    for point in ("h01-seed1", "h08-seed1"):
        result = run_cli("heads", str(study / point), "--roles", "--max-sentences", "20")
        assert result.returncode == 0, result.stderr + result.stdout
    report = report_study(study, Silent())
    for row in report["by_heads"]:
        analysis = row["head_analysis"]
        assert analysis["runs_with_roles"] == [f"h{row['heads']:02d}-seed1"]
        assert sum(analysis["role_shares"].values()) == pytest.approx(1.0, abs=1e-3)
        assert analysis["prunable_share"] is None  # `mhatrain heads` (importance) was not run
        roles = json.loads((study / f"h{row['heads']:02d}-seed1" / "heads" / "roles-valid.json").read_text())
        cross = [r for r in roles["heads"] if r["kind"] == "cross"]
        assert set(analysis["role_measures"]) == {"enc-self", "dec-self", "cross"}
        assert analysis["role_measures"]["cross"]["diagonal"] == pytest.approx(
            sum(r["diagonal"] for r in cross) / len(cross), abs=1e-4
        )
    text = (study / "report.md").read_text()
    assert "## What the heads do" in text and "| strongest neighbour |" in text


def test_training_loss_is_drawn_as_a_trailing_running_mean():
    from mhatrain.study.reports.curves import Curve, group_by_heads, running_mean

    assert running_mean([4.0, 2.0, 6.0, 0.0], 2) == [4.0, 3.0, 4.0, 3.0]
    assert running_mean([1.0, 2.0, 3.0], 8) == [1.0, 1.5, 2.0]
    curve = Curve("h08-seed1", 8, 1, train_steps=[25, 50, 75], train_loss=[3.0, 1.0, 2.0])
    (group,) = group_by_heads([curve]).values()
    assert group["train_loss"]["mean"] == [3.0, 2.0, 2.0]


@pytest.mark.parametrize(("metric", "warned"), [("bleu", True), ("loss", False)])
def test_ablate_warns_when_the_config_keeps_another_checkpoint_than_the_report_tests(
    tmp_path, spm_cache, metric, warned
):
    """A study whose config keeps best.pt by BLEU would see points left out of its tests: said at the start."""
    result = run_cli(
        "ablate",
        str(TINY),
        "--heads",
        "1,8",
        "--seeds",
        "1",
        "--out",
        str(tmp_path / "study"),
        "--dry-run",
        *cli_sets(spm_cache),
        "--set",
        f"train.early_stop_metric={metric}",
    )
    assert result.returncode == 0, result.stderr
    assert ("warning: train.early_stop_metric=bleu" in result.stderr) == warned
    assert "lowest validation loss" not in result.stdout  # stdout holds the commands alone
