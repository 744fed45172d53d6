"""kill -9 at named points of a real training process, then --resume: bit-identical final weights.

Every kill case runs the same short training (the tiny config with dropout 0.1, so that resuming must
also restore the random state; a checkpoint every 5 updates; validation every 20) as a
`python -m mhatrain train` subprocess with MHATRAIN_FAULT set (see mhatrain/faults.py), checks that
it died by SIGKILL where it was meant to, resumes it without the fault, and compares last.pt and
best.pt (model, optimiser moments, random state, progress) with one uninterrupted run's, tensor by
tensor with torch.equal, as well as the metrics records and the files of the run directory.
Checkpoint saves in this run: last.pt at updates 5, 10, 15; at 20 best.pt then last.pt; ...

Also here: SIGINT saves a checkpoint; a resume before the first checkpoint starts over; a full disk
stops training with a clear error and the last checkpoint intact.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import torch

from mhatrain.core.checkpoint import load_checkpoint

from .conftest import ROOT, TINY, FullDisk, run_cli, train_argv

MAX_STEPS = 40
TIMING = {"train_seconds", "valid_seconds"}  # wall-clock fields of the progress record: may differ


SETS = (
    "model.dropout=0.1",
    f"train.max_steps={MAX_STEPS}",
    "train.checkpoint_every=5",
    "train.valid_every=20",
    "train.valid_max_sentences=20",
    "train.log_every=5",
)


def train_args(out, spm_cache, *flags):
    return train_argv(out, *SETS, spm_cache=spm_cache, flags=flags)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, spm_cache):
    """One uninterrupted run, shared by every kill point."""
    out = tmp_path_factory.mktemp("crash") / "reference"
    result = run_cli(*train_args(out, spm_cache))
    assert result.returncode == 0, result.stderr
    return out


def assert_identical(a, b, where="state"):
    """Same structure, same values; tensors equal bit for bit (dtype included)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            if key not in TIMING:
                assert_identical(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_same_run(run, reference):
    for name in ("last.pt", "best.pt"):
        assert_identical(load_checkpoint(run / name), load_checkpoint(reference / name), name)
    assert load_checkpoint(run / "last.pt")["progress"]["step"] == MAX_STEPS
    # No temporary file survives the resume; the run directory looks like an uninterrupted one.
    assert sorted(p.name for p in run.iterdir()) == sorted(p.name for p in reference.iterdir())
    assert metric_records(run) == metric_records(reference)


def metric_records(run):
    """Kind, update and loss of every metrics.jsonl record: none lost, none repeated."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["kind"], r["step"], r.get("loss", r.get("valid_loss"))) for r in records]


# (MHATRAIN_FAULT, what is happening when the process dies, the update the resume starts from)
KILL_POINTS = [
    ("update:13", "mid-step: update 13 after backward, before the optimiser step", 10),
    ("validation:1", "mid-validation at update 20: loss computed, BLEU decoding not yet", 15),
    ("checkpoint-write:5", "mid-write of last.pt at update 20 (best.pt of update 20 already saved)", 15),
    ("checkpoint-rename:3", "last.pt of update 15 fully written to its temporary file, not renamed", 10),
    ("checkpoint-swap:2", "update 15: old last.pt moved to last.prev.pt, the new one not in place", 10),
]


@pytest.mark.parametrize("fault, moment, resumed_from", KILL_POINTS, ids=[k[0] for k in KILL_POINTS])
def test_kill_9_then_resume_gives_identical_weights(tmp_path, spm_cache, reference, fault, moment, resumed_from):
    run = tmp_path / "run"
    killed = run_cli(*train_args(run, spm_cache), env={"MHATRAIN_FAULT": fault})
    assert killed.returncode == -signal.SIGKILL, f"{moment}: {killed.returncode}\n{killed.stderr}"
    if fault.startswith("checkpoint-"):  # the interrupted write left its temporary file behind
        assert [p for p in run.iterdir() if p.name.startswith(".")], moment

    resumed = run_cli(*train_args(run, spm_cache, "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming at update {resumed_from} " in resumed.stdout, moment
    assert_same_run(run, reference)


GATED = ("--set", "model.head_gates.l0=0.05")  # learned head gates on every kind: their noise is random too


@pytest.fixture(scope="module")
def gated_reference(tmp_path_factory, spm_cache):
    out = tmp_path_factory.mktemp("crash") / "gated"
    result = run_cli(*train_args(out, spm_cache, *GATED))
    assert result.returncode == 0, result.stderr
    return out


def test_kill_9_then_resume_is_exact_with_learned_head_gates(tmp_path, spm_cache, gated_reference):
    """Training samples each gate from torch's random state, and the L0 penalty moves log α: a resume
    must restore both, so that the gates and every weight come out bit for bit as without the kill."""
    run = tmp_path / "run"
    killed = run_cli(*train_args(run, spm_cache, *GATED), env={"MHATRAIN_FAULT": "update:13"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = run_cli(*train_args(run, spm_cache, *GATED, "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming at update 10 " in resumed.stdout
    assert_same_run(run, gated_reference)
    log_alpha = load_checkpoint(run / "last.pt")["model"]["encoder.0.self_attn.gate.log_alpha"]
    assert not torch.equal(log_alpha, torch.full_like(log_alpha, 3.0))  # the gates did train


def test_sigint_saves_a_checkpoint_and_says_how_to_resume(tmp_path, spm_cache):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mhatrain", *train_args(run, spm_cache)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not (run / "metrics.jsonl").exists() and time.time() < deadline:  # written at update 1
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert "received SIGINT: checkpoint saved at update" in stdout and "--resume" in stdout
    assert "Traceback" not in stderr
    state = load_checkpoint(run / "last.pt")
    assert 0 < state["progress"]["step"] < MAX_STEPS and not state["progress"]["finished"]


def test_resume_before_the_first_checkpoint_starts_over_and_cleans_up(tmp_path, spm_cache):
    """A run killed before its first checkpoint has config.yaml, maybe metrics and a partial file."""
    import io

    from rich.console import Console

    from mhatrain.core.config import dump_config, load_config
    from mhatrain.training.loop import train

    config = load_config(
        TINY, [f"data.cache_dir={spm_cache}", "model.dropout=0.1", "train.max_steps=3", "train.valid_bleu=false"]
    )
    fresh, killed = tmp_path / "fresh", tmp_path / "killed"
    train(config, fresh, console=Console(file=io.StringIO()))
    killed.mkdir()
    dump_config(config, killed / "config.yaml")
    (killed / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "loss": 9.9}\n{"kind": "tr')
    (killed / ".last.pt.partial").write_bytes(b"half a checkpoint")
    output = io.StringIO()
    train(config, killed, resume=True, console=Console(file=output, width=200))
    assert "no checkpoint in" in output.getvalue() and "starting from the beginning" in output.getvalue()
    assert "removed .last.pt.partial" in output.getvalue()
    assert_identical(load_checkpoint(killed / "last.pt"), load_checkpoint(fresh / "last.pt"))
    assert metric_records(killed) == metric_records(fresh)
    assert sorted(p.name for p in killed.iterdir()) == sorted(p.name for p in fresh.iterdir())


def test_a_full_disk_stops_training_with_a_clear_error_and_keeps_the_last_checkpoint(tmp_path, spm_cache, monkeypatch):
    import io

    from rich.console import Console

    from mhatrain.core.config import load_config
    from mhatrain.core.errors import MhatrainError
    from mhatrain.training.loop import train

    real_save, saves = torch.save, []

    def save(state, f):  # the third checkpoint (update 15) hits the full disk
        saves.append(1)
        real_save(state, FullDisk(f, 1 << 16) if len(saves) == 3 else f)

    monkeypatch.setattr(torch, "save", save)
    config = load_config(
        TINY,
        [
            f"data.cache_dir={spm_cache}",
            "train.max_steps=20",
            "train.checkpoint_every=5",
            "train.valid_bleu=false",
            "train.log_every=1000",
        ],
    )
    run = tmp_path / "run"
    with pytest.raises(MhatrainError, match=r"cannot write .*\.last\.pt\.partial: No space left on device"):
        train(config, run, console=Console(file=io.StringIO()))
    monkeypatch.undo()
    assert load_checkpoint(run / "last.pt")["progress"]["step"] == 10
    assert load_checkpoint(run / "last.prev.pt")["progress"]["step"] == 5
    assert not [p.name for p in run.iterdir() if p.name.startswith(".")]
