"""The head-count study's figure: test BLEU (and the other measures) against h, one panel per measure,
each seed a point and the mean over seeds a line, drawn with matplotlib's Agg backend.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from ...core.plots import save_figure


def head_count_plot(panels: list[dict], path: Path, title: str, baseline: int) -> None:
    """Differences to h = baseline against the number of heads h (log₂ axis), ours and the paper's on one axis.

    panels: one per measure, each {"label": the measure, "delta": {h: Δ as the report's tests define it},
    "interval": {h: its 95% interval, or None}, "seeds": {h: [each tested seed's difference to h=baseline
    of the same seed]}, "left_out": {h: [the same for runs left out of the tests]}, "paper": {h: value},
    "paper_label": what the paper measured}. Ours are the numbers of the report's tables (Δ, its interval),
    the paper's are drawn as differences to its own h = baseline on the same y axis, so an effect of one
    BLEU is as tall for the paper as for us.
    """
    fig, width, height = head_count_figure(panels, title, baseline)
    save_figure(fig, path, width, height)


def head_count_figure(panels: list[dict], title: str, baseline: int) -> tuple[Figure, float, float]:
    """The figure of `head_count_plot`, and its width and height in inches."""
    width, height = 5.6 * len(panels), 4.8
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        _head_count_panel(ax, panel, baseline)
    fig.suptitle(title, fontsize=10)
    return fig, width, height


def _head_count_panel(ax, panel: dict, baseline: int) -> None:
    """One measure: ours and the paper's differences to h = baseline on a log₂ axis of h."""
    delta, paper = panel.get("delta") or {}, panel.get("paper") or {}
    head_counts = sorted(set(delta) | set(panel.get("seeds") or {}) | set(paper))
    ax.axhline(0.0, color="grey", linewidth=0.8, zorder=0)
    if delta:
        _draw_ours(ax, panel, baseline)
    else:
        message = "no finished runs yet" if not panel.get("seeds") else f"no finished h={baseline} run yet"
        ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center", color="grey")
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


def _draw_ours(ax, panel: dict, baseline: int) -> None:
    """Δ of each h with its 95% interval (the report's tests), each tested seed a faint dot, each run
    left out of the tests a hollow marker."""
    delta = panel["delta"]
    hs = sorted(delta)
    for h, values in (panel.get("seeds") or {}).items():
        ax.scatter([h] * len(values), values, s=14, color="tab:blue", alpha=0.4, lw=0)
    left_out = [(h, v) for h, values in (panel.get("left_out") or {}).items() for v in values]
    if left_out:
        ax.scatter(
            *zip(*left_out),
            s=30,
            facecolors="none",
            edgecolors="tab:red",
            label="runs left out of the tests (checkpoint not the loss-selected one)",
        )
    intervals = panel.get("interval") or {}
    below = [delta[h] - intervals[h][0] if intervals.get(h) else 0.0 for h in hs]
    above = [intervals[h][1] - delta[h] if intervals.get(h) else 0.0 for h in hs]
    ax.errorbar(
        hs,
        [delta[h] for h in hs],
        yerr=[below, above],
        marker="o",
        capsize=4,
        color="tab:blue",
        label=f"ours: Δ and its 95% interval (h × seed-block test), dots: seeds (h={baseline}: {panel['level']})",
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
        label=f"{label} (h={baseline}: {paper[baseline]:.4g})",
    )
