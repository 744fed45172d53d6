"""Checkpoint averaging: element-wise means, refused across configs, usable by eval."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mhatrain.core.checkpoint import load_checkpoint, save_checkpoint
from mhatrain.core.errors import CheckpointError
from mhatrain.training.average import average_checkpoints

from .conftest import run_cli


def earlier_update(run: Path) -> Path:
    """A checkpoint of another update than last.pt's (the toy run's last.prev.pt is last.pt's update again)."""
    state = load_checkpoint(run / "last.pt")
    state["model"] = {k: v * 0.99 if v.is_floating_point() else v for k, v in state["model"].items()}
    state["progress"] = {**state["progress"], "step": state["progress"]["step"] - 1}
    save_checkpoint(run / "earlier.pt", state)
    return run / "earlier.pt"


def test_average_is_the_elementwise_mean(tiny_run, tmp_path):
    state = load_checkpoint(tiny_run / "best.pt")
    shifted = {
        **state,
        "model": {k: v + 1.0 if v.is_floating_point() else v for k, v in state["model"].items()},
        "progress": {**state["progress"], "step": state["progress"]["step"] + 1},  # another update
    }
    save_checkpoint(tmp_path / "a.pt", state)
    save_checkpoint(tmp_path / "b.pt", shifted)
    averaged = average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])
    for key, value in state["model"].items():
        torch.testing.assert_close(averaged["model"][key], value + 0.5)


def test_average_refuses_checkpoints_of_another_config(tiny_run, tmp_path):
    state = load_checkpoint(tiny_run / "best.pt")
    other = {**state, "config": {**state["config"], "model": {**state["config"]["model"], "d_ff": 256}}}
    save_checkpoint(tmp_path / "a.pt", state)
    save_checkpoint(tmp_path / "b.pt", other)
    with pytest.raises(CheckpointError, match=r"different config: model\.d_ff"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])


def test_averaged_checkpoint_is_evaluated_through_the_cli(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    made = run_cli("average", str(run), str(earlier_update(run)), str(run / "last.pt"))
    assert made.returncode == 0, made.stderr
    result = run_cli("eval", str(run), "--split", "valid", "--beam", "1", "--checkpoint", "averaged")
    assert result.returncode == 0, result.stderr
    assert "averaged checkpoint" in result.stdout


def test_average_refuses_two_copies_of_one_update(tiny_run, tmp_path):
    """best.pt is often a copy of last.pt or of a snapshot: averaging both would count that update twice."""
    state = load_checkpoint(tiny_run / "last.pt")
    save_checkpoint(tmp_path / "a.pt", state)
    save_checkpoint(tmp_path / "b.pt", state)
    step = state["progress"]["step"]
    with pytest.raises(CheckpointError, match=rf"b\.pt: holds update {step}, as .*a\.pt does"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])


def test_heads_accepts_the_averaged_checkpoint_as_eval_does(tiny_run, tmp_path):
    run = Path(shutil.copytree(tiny_run, tmp_path / "run"))
    assert run_cli("average", str(run), str(earlier_update(run)), str(run / "last.pt")).returncode == 0
    args = ["--checkpoint", "averaged", "--max-sentences", "4"]
    result = run_cli("heads", str(run), "--metric", "loss", *args)
    assert result.returncode == 0, result.stderr
    report = json.loads((run / "heads" / "heads-valid.averaged.json").read_text())
    assert report["checkpoint"] == "averaged" and not (run / "heads" / "heads-valid.json").exists()
    roles = run_cli("heads", str(run), "--roles", *args)
    assert roles.returncode == 0, roles.stderr
    assert (run / "heads" / "roles-valid.averaged.json").is_file()
