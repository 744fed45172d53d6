"""TensorBoard scalars (train.tensorboard): the same numbers as metrics.jsonl, read back from the event files."""

from __future__ import annotations

import json

import pytest

from mhatrain.training.tensorboard_log import TAGS

from .conftest import TINY, assert_clean_error, run_cli, train_argv


def read_board(run_dir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of RUN_DIR/tensorboard, as TensorBoard itself reads the event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def from_metrics(run_dir) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for field, tag in TAGS[record["kind"]].items():
            series.setdefault(tag, []).append((record["step"], record[field]))
    return series


def test_tensorboard_scalars_equal_metrics_jsonl_across_a_crash_and_resume(tmp_path, spm_cache):
    out = tmp_path / "run"
    sets = ("train.log_every=3", "train.valid_every=6", "train.valid_max_sentences=5", "train.max_steps=18")
    # killed in update 17: the events of update 15 are written, the last checkpoint is update 12's
    killed = run_cli(
        *train_argv(out, *sets, spm_cache=spm_cache, flags=("--tensorboard",)), env={"MHATRAIN_FAULT": "update:17"}
    )
    assert killed.returncode != 0 and read_board(out)["train/loss"][-1][0] == 15
    resumed = run_cli(*train_argv(out, "train.tensorboard=true", *sets, spm_cache=spm_cache, flags=("--resume",)))
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    board, metrics = read_board(out), from_metrics(out)
    assert set(board) == {
        "train/loss",
        "train/nll",
        "train/lr",
        "train/grad_norm",
        "train/tokens_per_s",
        "train/padding",
        "valid/loss",
        "valid/ppl",
        "valid/bleu",
    }
    assert set(board) == set(metrics)
    assert [step for step, _ in board["valid/bleu"]] == [6, 12, 18]
    assert [step for step, _ in board["train/loss"]] == [1, 3, 6, 9, 12, 15, 18]  # 15 once: the first is purged
    for tag, series in metrics.items():  # event files hold float32
        assert [step for step, _ in board[tag]] == [step for step, _ in series], tag
        assert [value for _, value in board[tag]] == pytest.approx([value for _, value in series], rel=1e-6), tag


def test_tensorboard_without_the_package_is_a_one_line_error_before_training(tmp_path):
    fake = tmp_path / "site" / "tensorboard"  # a tensorboard that cannot be imported, ahead on the path
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'tensorboard'\")\n")
    env = {"PYTHONPATH": str(fake.parent)}
    result = run_cli(*train_argv(tmp_path / "run", flags=("--tensorboard",)), env=env)
    assert_clean_error(result, "train.tensorboard needs the tensorboard package: pip install 'mhatrain[tensorboard]'")
    assert not (tmp_path / "run").exists()
    study = run_cli(
        "ablate",
        str(TINY),
        "--heads",
        "1,8",
        "--out",
        str(tmp_path / "study"),
        "--set",
        "train.tensorboard=true",
        env=env,
    )
    assert_clean_error(study, "train.tensorboard needs the tensorboard package")
    assert not (tmp_path / "study").exists()
