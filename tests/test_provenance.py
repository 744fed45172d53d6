"""Provenance: what code, software, machine, command and data produced a run, a study and an evaluation."""

from __future__ import annotations

import copy
import hashlib
import json
import platform
import shutil
import subprocess
import sys

import torch

from mhatrain.core.provenance import code_version, cpu_model, read_sessions

from .conftest import ROOT, TINY, TOY, run_cli, set_args, train_argv


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def quick(steps: int = 4) -> tuple[str, ...]:
    """Settings of a run of a few updates, validated on 5 sentences."""
    return (f"train.max_steps={steps}", "train.valid_max_sentences=5")


def quick_train(out, spm_cache, steps: int = 4, flags: tuple[str, ...] = ()) -> list[str]:
    return train_argv(out, *quick(steps), spm_cache=spm_cache, flags=flags)


def test_a_run_records_its_provenance_and_a_resume_appends_a_session(tmp_path, spm_cache):
    out = tmp_path / "run"
    first = run_cli(*quick_train(out, spm_cache))
    assert first.returncode == 0, first.stderr + first.stdout
    (session,) = read_sessions(out)
    assert session["command"] == "mhatrain " + " ".join(quick_train(out, spm_cache))
    assert session["code"] == code_version() and session["code"]["commit"]  # the tests run in a checkout
    env = session["environment"]
    assert (env["python"], env["torch"], env["cpu"]) == (platform.python_version(), torch.__version__, cpu_model())
    assert env["cuda"] == torch.version.cuda and env["device"] == env["device_name"] == "cpu" and env["threads"] == 1
    assert session["data"]["train"]["sha256"] == {
        str(TOY / f"train.{lang}"): sha256(TOY / f"train.{lang}") for lang in ("en", "de")
    }
    assert session["data"]["valid"]["pairs"] == 100
    assert session["tokenizer"]["sha256"] == sha256(out / "spm.model")
    assert session["resumed"] is False and session["processes"] == 1

    resumed = run_cli(*quick_train(out, spm_cache, steps=6, flags=("--resume",)))
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    kept, second = read_sessions(out)
    assert kept == session and second["resumed"] is True and "--resume" in second["command"]
    finished = run_cli(*quick_train(out, spm_cache, steps=6, flags=("--resume",)))
    assert "nothing to do" in finished.stdout and len(read_sessions(out)) == 2  # a session that trained nothing: none

    evaluated = run_cli("eval", str(out), "--split", "test", "--beam", "1")
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads((out / "eval" / "test.beam1.json").read_text())
    recorded = report["provenance"]
    assert recorded["command"] == f"mhatrain eval {out} --split test --beam 1"
    assert recorded["data"]["test"]["sha256"] == {
        str(TOY / f"test.{lang}"): sha256(TOY / f"test.{lang}") for lang in ("en", "de")
    }
    assert recorded["tokenizer"]["sha256"] == session["tokenizer"]["sha256"]
    assert recorded["environment"]["torch"] == torch.__version__


def test_report_summarises_provenance_and_notes_points_that_differ(tmp_path, spm_cache):
    out = tmp_path / "study"
    made = run_cli(
        "ablate", str(TINY), "--heads", "1,8", "--out", str(out), *set_args(f"data.cache_dir={spm_cache}", *quick())
    )
    assert made.returncode == 0, made.stderr + made.stdout
    commit = code_version()["commit"][:12]
    summary = next(line for line in made.stdout.splitlines() if line.startswith("provenance: "))
    assert f"code {commit}" in summary and f"torch {torch.__version__}" in summary and f"CPU {cpu_model()}" in summary
    assert "data train sha256 " in summary and "data test sha256 " in summary and "tokenizer sha256 " in summary
    assert "differs" not in summary and "points of this study differ" not in made.stdout
    (study_session,) = read_sessions(out)
    assert study_session["command"].startswith("mhatrain ablate ") and study_session["dry_run"] is False

    # h=8 continued on another machine, with another torch and a changed training file
    record = json.loads((out / "h08-seed1" / "provenance.json").read_text())
    other = copy.deepcopy(record["sessions"][0])
    other["environment"]["torch"] = "9.9.9"
    other["data"]["train"]["sha256"][str(TOY / "train.en")] = "0" * 64
    record["sessions"].append(other)
    (out / "h08-seed1" / "provenance.json").write_text(json.dumps(record))
    reported = run_cli("report", str(out))
    assert reported.returncode == 0, reported.stderr + reported.stdout
    notes = [line for line in reported.stdout.splitlines() if line.startswith("note: points of this study differ")]
    assert notes[0] == (
        f"note: points of this study differ in torch: {torch.__version__} (h01-seed1, h08-seed1); 9.9.9 (h08-seed1)"
    )
    assert notes[1].startswith("note: points of this study differ in data train: sha256 ") and len(notes) == 2
    report = json.loads((out / "report.json").read_text())
    assert report["provenance"]["differs"] == ["torch", "data train"]
    assert "torch differs" in (out / "report.md").read_text()


def test_a_change_anywhere_in_the_package_marks_the_code_dirty(tmp_path):
    """Results record whether the code that made them was committed: a change outside mhatrain/core counts."""
    shutil.copytree(ROOT / "mhatrain", tmp_path / "mhatrain", ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "copy"]):
        subprocess.run([*git, *args], cwd=tmp_path, check=True, capture_output=True)
    probe = "import json; from mhatrain.core.provenance import code_version; print(json.dumps(code_version()))"

    def dirty() -> bool:
        out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True, capture_output=True, text=True)
        return json.loads(out.stdout)["dirty"]

    assert dirty() is False
    with open(tmp_path / "mhatrain" / "study" / "reports" / "curves.py", "a", encoding="utf-8") as f:
        f.write("# changed\n")
    assert dirty() is True
