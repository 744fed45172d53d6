"""TensorBoard scalars of a run (train.tensorboard): the records of metrics.jsonl, as they are written.

The event files go to RUN_DIR/tensorboard, so `tensorboard --logdir RUN_DIR` shows one run and
`tensorboard --logdir STUDY_DIR` overlays every grid point of a study. Needs the optional
`tensorboard` package (`pip install 'mhatrain[tensorboard]'`).
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import MhatrainError

BOARD_DIR = "tensorboard"
# metrics.jsonl field → TensorBoard tag, per kind of record
TAGS = {
    "train": {
        "loss": "train/loss",
        "nll": "train/nll",
        "lr": "train/lr",
        "grad_norm": "train/grad_norm",
        "tokens_per_s": "train/tokens_per_s",
        "padding": "train/padding",
    },
    "valid": {"valid_loss": "valid/loss", "valid_ppl": "valid/ppl", "valid_bleu": "valid/bleu"},
}


def check_available() -> None:
    """Fail in one line, before any training, when train.tensorboard is on but the package is missing."""
    try:
        # Here, not at the top: tensorboard is an optional dependency (torch.utils.tensorboard writes with it)
        import tensorboard  # noqa: F401
    except ImportError:
        raise MhatrainError(
            "train.tensorboard needs the tensorboard package: pip install 'mhatrain[tensorboard]' "
            "(or pip install tensorboard)"
        ) from None


class Dashboard:
    """A TensorBoard writer for one run directory."""

    def __init__(self, run_dir: Path, resume_step: int | None = None):
        """resume_step: the update a resumed run continues from; events after it (written before an
        interruption, and about to be written again) are hidden, as metrics.jsonl drops its records."""
        check_available()
        from torch.utils.tensorboard import SummaryWriter  # here: it needs the optional tensorboard package

        purge = resume_step + 1 if resume_step is not None else None
        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / BOARD_DIR), purge_step=purge)

    def log(self, record: dict) -> None:
        """Write a metrics.jsonl record's numbers as scalars at its update."""
        for field, tag in TAGS.get(record.get("kind"), {}).items():
            if isinstance(record.get(field), (int, float)):
                self.writer.add_scalar(tag, record[field], record["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
