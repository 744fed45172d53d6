"""The head-count study's figure: test BLEU (and the other measures) against h, one panel per measure,
each seed a point and the mean over seeds a line, drawn with matplotlib's Agg backend.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ..analysis.figures import save_figure


def head_count_plot(panels: list[dict], path: Path, title: str, baseline: int) -> None:
    """Differences to h = baseline against the number of heads h (log₂ axis), ours and the paper's on one axis.

    panels: one per measure, each {"label": the measure, "ours": {h: [one value per seed]}, "paper": {h: value},
    "paper_label": what the paper measured}. Both are drawn as the difference to their own value at h = baseline
    (ours: the mean over its seeds) on one shared y axis, so an effect of one BLEU is as tall for the paper as
    for us; the levels themselves (another data set and model size) are in the legend.
    """
    fig, width, height = head_count_figure(panels, title, baseline)
    save_figure(fig, path, width, height)


def head_count_figure(panels: list[dict], title: str, baseline: int) -> tuple[Figure, float, float]:
    """The figure of `head_count_plot`, and its width and height in inches."""
    width, height = 5.6 * len(panels), 4.6
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        _head_count_panel(ax, panel, baseline)
    fig.suptitle(title, fontsize=10)
    return fig, width, height


def _head_count_panel(ax, panel: dict, baseline: int) -> None:
    """One measure: ours and the paper's differences to h = baseline on a log₂ axis of h."""
    ours, paper = panel["ours"], panel.get("paper") or {}
    head_counts = sorted(set(ours) | set(paper))
    ax.axhline(0.0, color="grey", linewidth=0.8, zorder=0)
    if ours and baseline in ours:
        _draw_ours(ax, ours, baseline)
    elif ours:
        ax.text(
            0.5,
            0.5,
            f"no finished h={baseline} run yet",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="grey",
        )
    if paper and baseline in paper:
        _draw_paper(ax, paper, baseline, panel.get("paper_label", "paper"))
    ax.set_ylabel(f"{panel['label']}: difference to h={baseline}")
    ax.set_xscale("log", base=2)
    if head_counts:
        ax.set_xticks(head_counts, [str(h) for h in head_counts])
        ax.set_xlim(min(head_counts) / 1.5, max(head_counts) * 1.5)
    ax.minorticks_off()
    ax.set_xlabel("heads h (d_k = d_v = d_model / h)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    if not ours:
        ax.text(0.5, 0.5, "no finished runs yet", transform=ax.transAxes, ha="center", va="center", color="grey")


def _draw_ours(ax, ours: dict[int, list[float]], baseline: int) -> None:
    """Each seed a faint dot, the mean over seeds ± their sd a line, all less our mean at h = baseline."""
    zero = float(np.mean(ours[baseline]))
    hs = sorted(ours)
    for h in hs:  # every seed, faint, behind the mean
        ax.scatter([h] * len(ours[h]), np.subtract(ours[h], zero), s=14, color="tab:blue", alpha=0.4, lw=0)
    several = any(len(v) > 1 for v in ours.values())
    ax.errorbar(
        hs,
        [float(np.mean(ours[h])) - zero for h in hs],
        yerr=[float(np.std(ours[h], ddof=1)) if len(ours[h]) > 1 else 0.0 for h in hs],
        marker="o",
        capsize=4,
        color="tab:blue",
        label=("ours: mean ± sd over seeds, dots: seeds" if several else "ours: one seed per h")
        + f" (h={baseline}: {zero:.2f})",
    )


def _draw_paper(ax, paper: dict[int, float], baseline: int, label: str) -> None:
    """The paper's values as a dashed line, less its value at h = baseline."""
    ps = sorted(paper)
    ax.plot(
        ps,
        [paper[h] - paper[baseline] for h in ps],
        marker="s",
        linestyle="--",
        color="tab:orange",
        label=f"{label} (h={baseline}: {paper[baseline]:g})",
    )
