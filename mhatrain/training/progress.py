"""The training progress display: a rich progress bar with loss, learning rate, tokens/s and ETA,
plus one printed line per logged update or validation. The lines say how far along the run is (update
N of M, ETA) themselves, for a log file or a SLURM job's output, where there is no bar."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def clock(seconds: float) -> str:
    """A duration as h:mm:ss."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class TrainDisplay:
    def __init__(self, console: Console | None, total: int, start: int):
        self.console = console or Console()
        self.total, self.start, self.started = total, start, time.monotonic()
        self.progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}  lr {task.fields[lr]}  {task.fields[tps]} tok/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
            disable=not self.console.is_terminal,
        )
        self.task = self.progress.add_task("train", total=total, completed=start, loss="-", lr="-", tps="-")
        self._tokens, self._seconds = 0, 0.0

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def advance(self, step: int, stats: dict | None = None) -> None:
        """Move the bar to `step`; with an update's statistics (once training has read them), show its
        loss and learning rate too."""
        if stats is None:
            self.progress.update(self.task, completed=step)
        else:
            self.progress.update(self.task, completed=step, loss=f"{stats['loss']:.3f}", lr=f"{stats['lr']:.2e}")

    def log(self, record: dict) -> None:
        if record["kind"] == "train":
            self.progress.update(self.task, tps=f"{record['tokens_per_s']:.0f}")
            line = (
                f"update {record['step']:>{len(str(self.total))}} of {self.total}  epoch {record['epoch']:>3}  "
                f"loss {record['loss']:.3f}  lr {record['lr']:.2e}  |g| {record['grad_norm']:.2f}  "
                f"padding {record['padding']:.0%}  {record['tokens_per_s']:.0f} tok/s  ETA {self.eta(record['step'])}"
            )
            if "open_heads" in record:  # learned head gates
                opened = sum(sum(layers) for layers in record["open_heads"].values())
                heads = sum(len(p) for layers in record["p_open"].values() for p in layers)
                line += f"  open heads {opened}/{heads}"
        else:
            bleu = f"  BLEU {record['valid_bleu']:.2f}" if "valid_bleu" in record else ""
            line = (
                f"[bold]valid[/] update {record['step']:>{len(str(self.total))}} of {self.total}  loss {record['valid_loss']:.3f}  "
                f"ppl {record['valid_ppl']:.2f}{bleu}  ({record['valid_seconds']:.0f}s){'  *best*' if record['best'] else ''}"
            )
        self.console.print(line, highlight=False)

    def eta(self, step: int) -> str:
        """Time to the last update at this session's pace so far, validations included (the run may stop
        earlier: train.patience)."""
        done = step - self.start
        if done <= 0:
            return "—"
        return clock((time.monotonic() - self.started) / done * max(0, self.total - step))


def summary_line(summary: dict) -> str:
    """The line `mhatrain train` ends with, from the run's train_summary.json."""
    return (
        f"trained {summary['updates']} updates in {summary['train_seconds']:.0f}s "
        f"({summary['tokens_per_s']:.0f} target tokens/s); validation took {summary['valid_share']:.0%} "
        f"of the time"
    )
