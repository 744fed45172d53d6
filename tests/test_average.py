"""Checkpoint averaging: element-wise means, refused across configs, usable by eval."""

from __future__ import annotations

import shutil

import pytest
import torch

from mhatrain.average import average_checkpoints
from mhatrain.checkpoint import load_checkpoint, save_checkpoint
from mhatrain.errors import CheckpointError

from .conftest import run_cli


def test_average_is_the_elementwise_mean(tiny_run, tmp_path):
    state = load_checkpoint(tiny_run / "best.pt")
    shifted = {**state, "model": {k: v + 1.0 if v.is_floating_point() else v for k, v in state["model"].items()}}
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
    made = run_cli("average", str(run), str(run / "best.pt"), str(run / "last.pt"))
    assert made.returncode == 0, made.stderr
    result = run_cli("eval", str(run), "--split", "valid", "--beam", "1", "--checkpoint", "averaged")
    assert result.returncode == 0, result.stderr
    assert "averaged checkpoint" in result.stdout
