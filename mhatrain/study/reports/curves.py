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

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import ScalarFormatter

from ...core.errors import MhatrainError
from ...core.files import read_jsonl
from ...core.plots import save_figure, series_colours
from ...core.rundir import METRICS_FILE, read_summary
from ..grid.directory import is_study, point_dirs, read_record
from ..grid.points import cell_name, grid_cells, parse_point_name


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
    """The run directories of a study's h points that have metrics, in (h, seed) order (the curves are
    means per h: a layout point is no h)."""
    found = point_dirs(study_dir)
    runs = sorted((p.heads, p.seed, d) for p, d in found if p.layout is None and (d / METRICS_FILE).is_file())
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
        if len(c.valid_ppl) < 2:
            trend = "one validation, so no trend yet"
        elif c.valid_ppl[-1] < c.valid_ppl[-2]:
            trend = "validation perplexity still falling at the last validation"
        else:
            trend = "validation perplexity not falling at the last validation"
        best_text = (
            f"best at update {best[0]:,} (valid BLEU {_fmt(best[1])}, PPL {best[2]:.2f})"
            if best
            else "best checkpoint unknown"
        )
        lines.append(
            f"{c.name}: {best_text}; last validation at update {c.valid_steps[-1]:,} (BLEU "
            f"{_fmt(c.valid_bleu[-1])}, PPL {c.valid_ppl[-1]:.2f}); {trend}"
        )
    return lines


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def draw_curves(paths: list[Path], out: Path | None, console) -> list[Path]:
    """`mhatrain curves`: gather, draw one PNG, print the per-run summary; returns the PNGs' paths. A study
    made with --vary gets one PNG per cell, in the cell's folder: its cells' runs are not seeds of one h."""
    cells = _cell_dirs(Path(paths[0])) if len(paths) == 1 and is_study(Path(paths[0])) else []
    if cells:
        if out is not None:
            raise MhatrainError(
                f"curves: {paths[0]} is a study with several cells; each gets CELL/curves.png, so --out does not apply"
            )
        return [png for cell in cells for png in draw_curves([cell], None, console)]
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
    return [Path(out)]


def _cell_dirs(study_dir: Path) -> list[Path]:
    """The folders of a --vary study's cells whose runs have logged metrics (none for a plain study)."""
    cells = grid_cells(read_record(study_dir).get("factors") or {})
    folders = [study_dir / cell_name(cell) for cell in cells if cell]
    return [folder for folder in folders if folder.is_dir() and study_runs(folder)]


CURVE_PANELS = (
    ("valid_bleu", "validation BLEU (greedy)", "linear"),
    ("valid_ppl", "validation perplexity", "log"),
    ("train_loss", f"training loss, label-smoothed\n(mean of {TRAIN_LOSS_WINDOW} logged updates)", "linear"),
)


# Perplexity and loss fall steeply at first: their axes end at this multiple of the lowest value drawn so the
# plateau stays readable, but never below the second half of any line, so no run's line leaves the axes.
CURVE_ZOOM = {"valid_ppl": 4.0, "train_loss": 2.0}


def learning_curves_plot(groups: dict[int, dict] | None, curves: list, path: Path, title: str) -> None:
    """Validation BLEU, validation perplexity and training loss against updates, one panel each.

    groups: per h (from curves.group_by_heads) a mean line with a band over seeds; None draws one
    line per run (curves: curves.Curve). A cross marks each run's best checkpoint.
    """
    fig, width, height = learning_curves_figure(groups, curves, title)
    save_figure(fig, path, width, height)


def learning_curves_figure(groups: dict[int, dict] | None, curves: list, title: str) -> tuple[Figure, float, float]:
    width, height = 5.2 * len(CURVE_PANELS), 4.4
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, len(CURVE_PANELS), squeeze=False)[0]
    cmap = series_colours(len(groups) if groups is not None else len(curves))
    for ax, (key, label, scale) in zip(axes, CURVE_PANELS):
        lines: list[list[float]] = []  # every drawn series, for the zoom
        steps_of: list[list[int]] = []  # the updates of each series in `lines`
        if groups is not None:
            for i, (h, group) in enumerate(groups.items()):
                band = group[key]
                n = len(group["seeds"])
                ax.plot(band["steps"], band["mean"], color=cmap[i], label=f"h={h} ({n} seed{'s' if n > 1 else ''})")
                lines.append(band["mean"])
                if n > 1:  # the band's edges, not a fill: overlapping fills blend into one colour
                    for edge in (band["low"], band["high"]):
                        ax.plot(band["steps"], edge, color=cmap[i], linewidth=0.6, alpha=0.6, linestyle=(0, (4, 2)))
                    lines += [band["low"], band["high"]]
                steps_of += [band["steps"]] * (3 if n > 1 else 1)
                if key != "train_loss":
                    best = [b for b in group["best"] if b is not None]
                    index = 1 if key == "valid_bleu" else 2
                    ax.scatter([b[0] for b in best], [b[index] for b in best], marker="x", color=cmap[i], s=30)
        else:
            for i, curve in enumerate(curves):
                steps = curve.train_steps if key == "train_loss" else curve.valid_steps
                values = curve.train_loss_smoothed() if key == "train_loss" else getattr(curve, key)
                ax.plot(steps, values, color=cmap[i], label=curve.name)
                lines.append(values)
                steps_of.append(steps)
                best = curve.best()
                if best is not None and key != "train_loss":
                    ax.scatter(
                        [best[0]], [best[1] if key == "valid_bleu" else best[2]], marker="x", color=cmap[i], s=30
                    )
        ax.set_yscale(scale)
        if scale == "log":  # plain numbers (5, 6, 10, 20), not 6×10⁰
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter(ScalarFormatter())
        if key in CURVE_ZOOM:
            top = zoom_top(lines, CURVE_ZOOM[key])
            if top is not None:
                ax.set_ylim(top=min(ax.get_ylim()[1], top))
                if (note := cut_note(steps_of, lines, top)) is not None:
                    ax.text(0.98, 0.98, note, transform=ax.transAxes, ha="right", va="top", fontsize=7, color="dimgrey")
        ax.set_xlabel("update")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if groups is not None and any(len(g["seeds"]) > 1 for g in groups.values()):
        handles.append(Line2D([], [], color="grey", linewidth=0.6, linestyle=(0, (4, 2))))
        labels.append("spread over seeds: ± sd (min–max of two)")
    handles.append(Line2D([], [], marker="x", linestyle="none", color="black"))
    labels.append("best checkpoint")
    axes[0].legend(handles, labels, fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=10)
    return fig, width, height


def cut_note(steps_of: list[list[int]], lines: list[list[float | None]], top: float) -> str | None:
    """What a zoomed axis leaves out, said on the panel: the values above `top` and until which update."""
    above = [
        (step, v) for steps, line in zip(steps_of, lines) for step, v in zip(steps, line) if v is not None and v > top
    ]
    if not above:
        return None
    return (
        f"axis cut at {top:.3g}: values up to {max(v for _, v in above):.3g}\n"
        f"(until update {max(step for step, _ in above):,}) lie above it"
    )


def zoom_top(lines: list[list[float | None]], factor: float) -> float | None:
    """Upper y limit: factor × the lowest value drawn, raised to show the second half of every line in full."""
    values = [[v for v in line if v is not None] for line in lines]
    values = [line for line in values if line]
    if not values:
        return None
    low = min(min(line) for line in values)
    if low <= 0:
        return None
    tails = max(max(line[len(line) // 2 :]) for line in values)
    return max(factor * low, tails * 1.05)
