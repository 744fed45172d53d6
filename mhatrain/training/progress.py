"""The training progress display: a rich progress bar with loss, learning rate, tokens/s and ETA,
plus one printed line per logged update or validation (readable in log files too)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class TrainDisplay:
    def __init__(self, console: Console | None, total: int, start: int):
        self.console = console or Console()
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
                f"update {record['step']:>6}  epoch {record['epoch']:>3}  loss {record['loss']:.3f}  "
                f"lr {record['lr']:.2e}  |g| {record['grad_norm']:.2f}  padding {record['padding']:.0%}  "
                f"{record['tokens_per_s']:.0f} tok/s"
            )
            if "open_heads" in record:  # learned head gates
                opened = sum(sum(layers) for layers in record["open_heads"].values())
                heads = sum(len(p) for layers in record["p_open"].values() for p in layers)
                line += f"  open heads {opened}/{heads}"
        else:
            bleu = f"  BLEU {record['valid_bleu']:.2f}" if "valid_bleu" in record else ""
            line = (
                f"[bold]valid[/] update {record['step']:>6}  loss {record['valid_loss']:.3f}  "
                f"ppl {record['valid_ppl']:.2f}{bleu}  ({record['valid_seconds']:.0f}s){'  *best*' if record['best'] else ''}"
            )
        self.console.print(line, highlight=False)
