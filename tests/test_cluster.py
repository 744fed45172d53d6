"""Grids as jobs through submitit (`ablate --executor`): the local executor runs the same code path as SLURM."""

from __future__ import annotations

import json

from mhatrain.study.running.cluster import job_name, jobs_record

from .conftest import TINY, assert_clean_error, run_cli
from .test_ablate import snapshot


def test_a_study_runs_as_jobs_and_a_rerun_resubmits_only_unfinished_points(tmp_path, spm_cache):
    out = tmp_path / "study"
    sets = [
        arg
        for item in (
            f"data.cache_dir={spm_cache}",
            "train.max_steps=8",
            "train.valid_max_sentences=5",
            "train.tensorboard=true",
        )
        for arg in ("--set", item)
    ]
    command = ["ablate", str(TINY), "--heads", "1,8", "--out", str(out), "--executor", "local", "--cpus", "1", *sets]
    first = run_cli(*command)
    assert first.returncode == 0, first.stderr + first.stdout
    assert "2 of 2 runs done" in first.stdout
    jobs = jobs_record(out)
    assert set(jobs) == {"h01-seed1", "h08-seed1"}
    for name, job_id in jobs.items():
        log = (out / "jobs" / job_id / f"{job_id}_0_log.out").read_text()
        assert f"train {out / 'base-config.yaml'} --out {out / name} --resume" in log and "--set train.threads=1" in log
        assert (out / name / "eval" / "test.beam3.json").is_file()
        assert any((out / name / "tensorboard").iterdir())  # `tensorboard --logdir STUDY` overlays the points
    report = json.loads((out / "report.json").read_text())
    assert report["runs_done"] == 2 and {r["name"]: r["status"] for r in report["runs"]} == {
        "h01-seed1": "done",
        "h08-seed1": "done",
    }

    (out / "h08-seed1" / "eval" / "test.beam3.json").unlink()
    untouched = snapshot(out / "h01-seed1")
    again = run_cli(*command)
    assert again.returncode == 0, again.stderr + again.stdout
    assert "1 of 2 runs already finished: skipped" in again.stdout
    resubmitted = jobs_record(out)
    assert resubmitted["h01-seed1"] == jobs["h01-seed1"] and resubmitted["h08-seed1"] != jobs["h08-seed1"]
    job_id = resubmitted["h08-seed1"]
    log = (out / "jobs" / job_id / f"{job_id}_0_log.out").read_text()
    commands = [line for line in log.splitlines() if line.startswith("$ ")]
    assert len(commands) == 1 and commands[0].endswith(f"eval {out / 'h08-seed1'} --split test")  # only what is missing
    assert (out / "h08-seed1" / "eval" / "test.beam3.json").is_file()
    assert snapshot(out / "h01-seed1") == untouched
    assert json.loads((out / "report.json").read_text())["runs_done"] == 2


def test_executor_options_are_checked_before_anything_runs(tmp_path):
    study = ["ablate", str(TINY), "--heads", "1,8", "--out", str(tmp_path / "study")]
    assert_clean_error(
        run_cli(*study, "--partition", "gpu"), "--partition, --time, --gpus and --cpus go with --executor"
    )
    assert_clean_error(run_cli(*study, "--executor", "local", "--jobs", "2"), "--jobs applies to runs on this machine")
    assert_clean_error(run_cli(*study, "--executor", "pbs"), "--executor must be slurm or local, got 'pbs'")
    assert_clean_error(run_cli(*study, "--executor", "slurm", "--time", "0"), "--time must be positive")
    assert_clean_error(run_cli(*study, "--executor", "slurm", env={"PATH": str(tmp_path)}), "no sbatch command here")
    assert not (tmp_path / "study").exists()


def test_job_names_keep_to_letters_digits_and_dashes_for_points_of_a_varied_study():
    name = job_name("regimes", "model.norm=post,model.d_model=512/h08-seed1")
    assert name == "mhatrain-regimes-model.norm_post_model.d_model_512_h08-seed1"
    assert job_name("ablate-multi30k", "h08-seed1") == "mhatrain-ablate-multi30k-h08-seed1"
