"""Learning curves: validation BLEU, validation perplexity and training loss against updates.

`mhatrain curves RUN_DIR...` draws one line per run; `mhatrain curves STUDY_DIR` draws, per head
count h, the mean over seeds with a band of ± one standard deviation (min–max with two seeds),
and marks each run's best checkpoint (the update `eval` scores). Everything is read from each run's
metrics.jsonl and train_summary.json, so a curve works on a run that is still training.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from .checkpoint import METRICS_FILE, read_summary
from .errors import MhatrainError
from .io import read_jsonl
from .study import is_study, parse_point_name, point_dirs


@dataclass
class Curve:
    """What one run's metrics.jsonl says, by update."""

    name: str
    heads: int | None = None
    seed: int | None = None
    valid_steps: list[int] = field(default_factory=list)
    valid_bleu: list[float | None] = field(default_factory=list)
    valid_ppl: list[float] = field(default_factory=list)
    train_steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    best_step: int | None = None

    def train_loss_smoothed(self) -> list[float]:
        """The training loss as drawn: each logged update's loss is one batch's, so its running mean."""
        return running_mean(self.train_loss, TRAIN_LOSS_WINDOW)

    def best(self) -> tuple[int, float | None, float] | None:
        """(update, validation BLEU, validation perplexity) at the best checkpoint."""
        if self.best_step not in self.valid_steps:
            return None
        i = self.valid_steps.index(self.best_step)
        return self.best_step, self.valid_bleu[i], self.valid_ppl[i]


TRAIN_LOSS_WINDOW = 8  # logged updates in the training loss's running mean (8 × log_every 25 = 200 updates)


def running_mean(values: list[float], window: int) -> list[float]:
    """Mean of each value and the up to window − 1 values before it."""
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def read_curve(run_dir: Path, name: str | None = None) -> Curve:
    run_dir = Path(run_dir)
    records = read_jsonl(run_dir / METRICS_FILE)
    if not records:
        raise MhatrainError(f"{run_dir}: no metrics.jsonl to draw (is it a run directory made by `mhatrain train`?)")
    point = parse_point_name(run_dir.name)
    curve = Curve(name or run_dir.name, point.heads if point else None, point.seed if point else None)
    best_flagged = None
    for record in records:
        if record.get("kind") == "valid" and record.get("valid_ppl") is not None:
            curve.valid_steps.append(record["step"])
            curve.valid_bleu.append(record.get("valid_bleu"))
            curve.valid_ppl.append(record["valid_ppl"])
            if record.get("best"):
                best_flagged = record["step"]
        elif record.get("kind") == "train" and record.get("loss") is not None:
            curve.train_steps.append(record["step"])
            curve.train_loss.append(record["loss"])
    summary = read_summary(run_dir) or {}
    curve.best_step = summary.get("best_step", best_flagged)
    return curve


def study_runs(study_dir: Path) -> list[Path]:
    """The run directories of a study that have metrics, in (h, seed) order."""
    runs = sorted((p.heads, p.seed, d) for p, d in point_dirs(study_dir) if (d / METRICS_FILE).is_file())
    return [d for _, _, d in runs]


def gather_curves(paths: list[Path]) -> tuple[list[Curve], bool]:
    """(curves, grouped by h?) for run directories, or for one study directory."""
    if not paths:
        raise MhatrainError("curves: give run directories or one study directory")
    for path in paths:
        if not Path(path).is_dir():
            raise MhatrainError(f"curves: {path} is not a directory")
    if len(paths) == 1 and is_study(paths[0]):
        runs = study_runs(paths[0])
        if not runs:
            raise MhatrainError(f"{paths[0]}: no run of this study has logged metrics yet")
        return [read_curve(d) for d in runs], True
    if any(is_study(p) for p in paths):
        raise MhatrainError("curves: give one study directory alone, or run directories")
    return [read_curve(Path(p), str(p)) for p in paths], False


def group_by_heads(curves: list[Curve]) -> dict[int, dict]:
    """Per h: the mean and spread over seeds at the updates every seed reached, for each measure."""
    groups: dict[int, list[Curve]] = {}
    for curve in curves:
        groups.setdefault(curve.heads, []).append(curve)
    out = {}
    for h, members in sorted(groups.items()):
        out[h] = {
            "seeds": [c.seed for c in members],
            "valid_bleu": _mean_band([(c.valid_steps, c.valid_bleu) for c in members]),
            "valid_ppl": _mean_band([(c.valid_steps, c.valid_ppl) for c in members]),
            "train_loss": _mean_band([(c.train_steps, c.train_loss_smoothed()) for c in members]),
            "best": [c.best() for c in members],
        }
    return out


def _mean_band(series: list[tuple[list[int], list]]) -> dict:
    """{"steps", "mean", "low", "high"} at the updates present in every series."""
    common = set(series[0][0])
    for steps, _ in series[1:]:
        common &= set(steps)
    steps = sorted(s for s in common if all(v[x.index(s)] is not None for x, v in series))
    columns = [[values[s_steps.index(s)] for s_steps, values in series] for s in steps]
    mean = [statistics.fmean(c) for c in columns]
    if len(series) >= 3:
        sd = [statistics.stdev(c) for c in columns]
        low, high = [m - d for m, d in zip(mean, sd)], [m + d for m, d in zip(mean, sd)]
    else:
        low, high = [min(c) for c in columns], [max(c) for c in columns]
    return {"steps": steps, "mean": mean, "low": low, "high": high}


def summary_lines(curves: list[Curve]) -> list[str]:
    """Per run: the best checkpoint, the last validation, and whether validation loss still fell at the end."""
    lines = []
    for c in curves:
        best = c.best()
        if not c.valid_steps:
            lines.append(f"{c.name}: no validation yet")
            continue
        falling = len(c.valid_ppl) >= 2 and c.valid_ppl[-1] < c.valid_ppl[-2]
        best_text = (
            f"best at update {best[0]:,} (valid BLEU {_fmt(best[1])}, PPL {best[2]:.2f})"
            if best
            else "best checkpoint unknown"
        )
        lines.append(
            f"{c.name}: {best_text}; last validation at update {c.valid_steps[-1]:,} (BLEU "
            f"{_fmt(c.valid_bleu[-1])}, PPL {c.valid_ppl[-1]:.2f}); validation perplexity "
            f"{'still falling' if falling else 'not falling'} at the last validation"
        )
    return lines


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def draw_curves(paths: list[Path], out: Path | None, console) -> Path:
    """`mhatrain curves`: gather, draw one PNG, print the per-run summary; returns the PNG's path."""
    from .plots import learning_curves_plot

    curves, grouped = gather_curves([Path(p) for p in paths])
    if out is None:
        out = Path(paths[0]) / "curves.png" if len(paths) == 1 else Path("curves.png")
    title = (
        f"Learning curves: {Path(paths[0]).name}, mean over seeds per h"
        if grouped
        else f"Learning curves: {', '.join(Path(p).name for p in paths)}"
    )
    learning_curves_plot(group_by_heads(curves) if grouped else None, curves, Path(out), title)
    for line in summary_lines(curves):
        console.print(line, highlight=False)
    console.print(f"curves: {out}", highlight=False)
    return Path(out)
