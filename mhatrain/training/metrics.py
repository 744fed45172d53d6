"""A run's metrics.jsonl, as training writes it: one record per logged update ("kind": "train") and per
validation ("kind": "valid"), mirrored as TensorBoard scalars with train.tensorboard; on a resume, the
records past the checkpoint are dropped (they will be written again).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.files import append_jsonl, atomic_write_text, read_jsonl
from ..core.rundir import METRICS_FILE
from .tensorboard_log import Dashboard


class MetricsLog:
    """metrics.jsonl, and the same records as TensorBoard scalars when `board` is on (train.tensorboard,
    rank 0). resume_step: the update a resumed run continues from (see Dashboard)."""

    def __init__(self, run_dir: Path, board: bool, resume_step: int | None):
        self.path = run_dir / METRICS_FILE
        self.board = Dashboard(run_dir, resume_step) if board else None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.board is not None:
            self.board.close()

    def write(self, record: dict) -> None:
        append_jsonl(self.path, record)
        if self.board is not None:
            self.board.log(record)


def validated_at(run_dir: Path, step: int) -> bool:
    """Whether metrics.jsonl holds a validation of update `step`."""
    for record in read_jsonl(run_dir / METRICS_FILE):
        if record.get("kind") == "valid" and record.get("step") == step:
            return True
    return False


def gate_history(run_dir: Path) -> list[dict]:
    """The train records that hold learned head gates (p_open, open_heads: Transformer.gate_record), in
    update order."""
    records = [r for r in read_jsonl(Path(run_dir) / METRICS_FILE) if r.get("kind") == "train" and "open_heads" in r]
    return sorted(records, key=lambda r: r["step"])


def truncate_metrics(run_dir: Path, step: int) -> None:
    """Drop records written after the checkpoint we resume from (they will be written again)."""
    path = run_dir / METRICS_FILE
    if path.is_file():
        kept = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
