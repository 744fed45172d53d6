"""Figures for the head analysis, drawn with matplotlib's Agg backend (no display needed).

Every figure is sized from the shape of its data, so any number of layers, heads and tokens
works; heads are always drawn one by one, never averaged. Figures are built as plain
`Figure` objects on an Agg canvas (no pyplot global state, nothing left open).

Shape legend: L layers · H heads · Tq query length · Tk key length.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import ScalarFormatter

from .curves import TRAIN_LOSS_WINDOW
from .io import atomic_write

MAX_PIXELS = 16_000  # longest side of a saved PNG; dpi shrinks to stay under it
MAX_GRID_WIDTH_IN = 90.0  # the head grid of a 32-head model stays a (wide) poster, not a wall


def _save(fig: Figure, path: Path, width_in: float, height_in: float) -> None:
    dpi = max(30, min(110, int(MAX_PIXELS / max(width_in, height_in))))
    FigureCanvasAgg(fig)
    atomic_write(Path(path), lambda f: fig.savefig(f, format="png", dpi=dpi), binary=True)


def wrap_title(text: str, width_in: float, font_pt: float) -> str:
    """text broken into lines that fit width_in inches at font_pt points (a long sentence in a title)."""
    chars = max(20, int((width_in - 0.3) * 72 / (font_pt * 0.62)))  # 0.62 em: a generous mean glyph width
    lines = []
    for paragraph in text.split("\n"):
        lines += textwrap.wrap(paragraph, chars, break_long_words=True, break_on_hyphens=False) or [""]
    return "\n".join(lines)


def _label_step(n_labels: int, span_pt: float, min_font: float = 4.0) -> tuple[int, float]:
    """Show every k-th of n labels along span_pt points: (k, font size) with font size ≥ min_font."""
    per_label = span_pt / max(n_labels, 1)
    step = max(1, int(np.ceil(min_font / max(per_label * 0.85, 1e-6))))
    return step, float(np.clip(per_label * step * 0.85, min_font, 9.0))


def _ticks(axis_setter, labels_setter, labels: list[str], step: int, size: float, rotation: int = 0):
    positions = list(range(0, len(labels), step))
    axis_setter(positions)
    labels_setter([labels[p] for p in positions], fontsize=size, rotation=rotation)


def attention_grid(
    maps: np.ndarray,
    layer_numbers: list[int],
    query_labels: list[str],
    key_labels: list[str],
    title: str,
    path: Path,
    query_name: str = "query",
    key_name: str = "key",
) -> None:
    """One heatmap per head in a layers × heads grid; maps: [L, H, Tq, Tk] probabilities.

    Every cell uses the same 0..1 colour scale so heads can be compared. Token labels sit on the
    left column (queries) and the bottom row (keys); all cells share them. A long title (a long
    sentence and its translation) is wrapped to the figure's width.
    """
    fig, width, height = attention_grid_figure(
        maps, layer_numbers, query_labels, key_labels, title, query_name, key_name
    )
    _save(fig, path, width, height)


def attention_grid_figure(
    maps: np.ndarray,
    layer_numbers: list[int],
    query_labels: list[str],
    key_labels: list[str],
    title: str,
    query_name: str = "query",
    key_name: str = "key",
) -> tuple[Figure, float, float]:
    maps = np.asarray(maps, dtype=np.float32)
    if maps.ndim != 4:
        raise ValueError(f"attention maps must be [L, H, Tq, Tk], got shape {maps.shape}")
    L, H, Tq, Tk = maps.shape
    if len(layer_numbers) != L or len(query_labels) != Tq or len(key_labels) != Tk:
        raise ValueError("labels do not match the shape of the maps")
    longest = max(Tq, Tk)
    cell = float(np.clip(0.16 * longest, 1.0, 4.0))
    cell = min(cell, MAX_GRID_WIDTH_IN / H)  # many heads: smaller cells
    q_step, q_font = _label_step(Tq, cell * 72)
    k_step, k_font = _label_step(Tk, cell * 72)
    char_in = 0.6 / 72  # approximate width of one character per point of font size
    left = 0.45 + max(map(len, query_labels)) * q_font * char_in + 0.25
    bottom = 0.3 + max(map(len, key_labels)) * k_font * char_in
    right, gap = 0.9, 0.06 + 0.02 * cell
    width = left + H * cell + (H - 1) * gap + right
    title_font = float(np.clip(cell * 6, 6, 11))  # of the head and layer labels
    suptitle = wrap_title(f"{title}\nrows: {query_name} · columns: {key_name}", width, 11)
    top = 0.15 + (suptitle.count("\n") + 1) * 11 * 1.3 / 72 + title_font * 2 / 72  # title lines, then head labels
    height = top + L * cell + (L - 1) * gap + bottom

    fig = Figure(figsize=(width, height))
    axes = fig.subplots(L, H, squeeze=False)
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        bottom=bottom / height,
        top=1 - top / height,
        wspace=gap / cell,
        hspace=gap / cell,
    )
    image = None
    for row in range(L):
        for col in range(H):
            ax = axes[row, col]
            image = ax.imshow(
                maps[row, col], vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", interpolation="nearest"
            )
            ax.tick_params(length=0, pad=1)
            if col == 0:
                _ticks(ax.set_yticks, ax.set_yticklabels, query_labels, q_step, q_font)
                ax.set_ylabel(f"layer {layer_numbers[row]}", fontsize=title_font)
            else:
                ax.set_yticks([])
            if row == L - 1:
                _ticks(ax.set_xticks, ax.set_xticklabels, key_labels, k_step, k_font, rotation=90)
            else:
                ax.set_xticks([])
            if row == 0:
                ax.set_title(f"head {col + 1}", fontsize=title_font)
    fig.suptitle(suptitle, fontsize=11, y=1 - 0.1 / height, va="top")
    cax = fig.add_axes([1 - (right - 0.25) / width, bottom / height, 0.15 / width, (L * cell) / height])
    fig.colorbar(image, cax=cax).ax.tick_params(labelsize=7)
    return fig, width, height


def head_heatmaps(
    rows: list[tuple[str, dict[str, np.ndarray]]],
    path: Path,
    title: str,
    diverging: tuple[bool, ...] | None = None,
    lower_is_important: tuple[bool, ...] | None = None,
) -> None:
    """A grid of [L, H] heatmaps: one row per measure, one column per attention kind.

    rows: (measure name, {kind: [L, H] values}); kinds may have different layer counts.
    diverging[i]: colour row i symmetrically around 0 (for changes that can have either sign).
    lower_is_important[i]: in row i a lower value marks a more important head (a fall in BLEU).
    Red means "this head matters more" in every row, and every panel of a row shares one colour
    scale, so kinds compare. Values are written into the cells when there are few enough to read.
    """
    fig, width, height = head_heatmaps_figure(rows, title, diverging, lower_is_important)
    _save(fig, path, width, height)


def heatmap_scale(values: list[np.ndarray], diverging: bool, lower_is_important: bool) -> tuple[str, float, float]:
    """(colour map, vmin, vmax) shared by every panel of a row: red at the important end, blue where masking helps."""
    finite = np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in values])
    finite = finite[np.isfinite(finite)]
    if diverging:
        bound = float(np.abs(finite).max()) if finite.size else 1.0
        bound = bound or 1.0
        return ("RdBu" if lower_is_important else "RdBu_r"), -bound, bound
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    low = min(low, 0.0) if not lower_is_important else low
    high = high if high > low else low + 1.0
    return ("Reds_r" if lower_is_important else "Reds"), low, high


def head_heatmaps_figure(
    rows: list[tuple[str, dict[str, np.ndarray]]],
    title: str,
    diverging: tuple[bool, ...] | None = None,
    lower_is_important: tuple[bool, ...] | None = None,
) -> tuple[Figure, float, float]:
    kinds = list(rows[0][1])
    shapes = {kind: np.asarray(rows[0][1][kind]).shape for kind in kinds}
    max_layers = max(s[0] for s in shapes.values())
    H = max(s[1] for s in shapes.values())
    # Each panel: a heatmap of map_w × map_h inches inside margins for labels, title and colour bar.
    map_w, map_h = max(2.0, 0.3 * H), max(0.8, 0.3 * max_layers)
    left, right, top, bottom = 0.6, 0.85, 0.35, 0.55
    panel_w, panel_h = left + map_w + right, top + map_h + bottom
    width = panel_w * len(kinds)
    suptitle = wrap_title(
        f"{title}\nred: the head matters more · blue: masking it helps · one colour scale per row",
        width,
        10,
    )
    header = 0.2 + (suptitle.count("\n") + 1) * 10 * 1.3 / 72
    height = panel_h * len(rows) + header
    fig = Figure(figsize=(width, height))  # placed by hand: layout engines are slow with many axes
    for r, (measure, values) in enumerate(rows):
        cmap, vmin, vmax = heatmap_scale(
            list(values.values()), bool(diverging and diverging[r]), bool(lower_is_important and lower_is_important[r])
        )
        for c, kind in enumerate(kinds):
            x0, y0 = c * panel_w + left, height - header - r * panel_h - top - map_h
            ax = fig.add_axes((x0 / width, y0 / height, map_w / width, map_h / height))
            data = np.asarray(values[kind], dtype=np.float64)
            L, Hk = data.shape
            image = ax.imshow(data, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
            head_step = max(1, int(np.ceil(Hk / 16)))
            ax.set_xticks(range(0, Hk, head_step), [str(h + 1) for h in range(0, Hk, head_step)], fontsize=7)
            ax.set_yticks(range(L), [str(layer + 1) for layer in range(L)], fontsize=7)
            ax.set_xlabel("head", fontsize=8)
            ax.set_ylabel("layer", fontsize=8)
            ax.set_title(f"{kind}: {measure}", fontsize=9)
            if L * Hk <= 96:
                for (i, j), value in np.ndenumerate(data):
                    if np.isfinite(value):
                        ax.text(
                            j,
                            i,
                            f"{value:.2g}",
                            ha="center",
                            va="center",
                            fontsize=6,
                            color=_text_colour(image.cmap(image.norm(value))),
                        )
            if c == len(kinds) - 1:  # one scale per row, so one colour bar
                cax = fig.add_axes(((x0 + map_w + 0.1) / width, y0 / height, 0.12 / width, map_h / height))
                fig.colorbar(image, cax=cax).ax.tick_params(labelsize=6)
                if lower_is_important and lower_is_important[r]:
                    cax.invert_yaxis()  # red, the important end, on top in every row
    fig.suptitle(
        suptitle,
        fontsize=10,
        y=1 - 0.12 / height,
        va="top",
    )
    return fig, width, height


def _text_colour(rgba) -> str:
    """Black on light cells, white on dark ones (relative luminance)."""
    r, g, b = rgba[:3]
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def pruning_plot(
    curves: dict[str, list[tuple[float, float]]],
    sizes: dict[str, int],
    metric: str,
    baseline: float,
    path: Path,
    title: str,
) -> None:
    """The metric against the share of heads removed: one line per group of heads.

    curves: group → [(fraction pruned, metric value)]; sizes: group → number of heads in it.
    """
    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
    ax = fig.subplots()
    for group, points in curves.items():
        xs, ys = zip(*points)
        ax.plot(np.array(xs) * 100, ys, marker="o", markersize=3, label=f"{group} ({sizes[group]} heads)")
    ax.axhline(baseline, color="grey", linestyle=":", linewidth=1, label="all heads")
    ax.set_xlabel("heads removed, least important first (%)")
    ax.set_ylabel({"bleu": "BLEU", "loss": "loss (NLL per target token)"}.get(metric, metric))
    ax.set_xlim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    _save(fig, path, 6.4, 4.4)


def head_count_plot(panels: list[dict], path: Path, title: str, baseline: int) -> None:
    """Differences to h = baseline against the number of heads h (log₂ axis), ours and the paper's on one axis.

    panels: one per measure, each {"label": the measure, "ours": {h: [one value per seed]}, "paper": {h: value},
    "paper_label": what the paper measured}. Both are drawn as the difference to their own value at h = baseline
    (ours: the mean over its seeds) on one shared y axis, so an effect of one BLEU is as tall for the paper as
    for us; the levels themselves (another data set and model size) are in the legend.
    """
    fig, width, height = head_count_figure(panels, title, baseline)
    _save(fig, path, width, height)


def head_count_figure(panels: list[dict], title: str, baseline: int) -> tuple[Figure, float, float]:
    width, height = 5.6 * len(panels), 4.6
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        ours, paper = panel["ours"], panel.get("paper") or {}
        head_counts = sorted(set(ours) | set(paper))
        ax.axhline(0.0, color="grey", linewidth=0.8, zorder=0)
        if ours and baseline in ours:
            zero = float(np.mean(ours[baseline]))
            hs = sorted(ours)
            for h in hs:  # every seed, faint, behind the mean
                ax.scatter([h] * len(ours[h]), np.subtract(ours[h], zero), s=14, color="tab:blue", alpha=0.4, lw=0)
            ax.errorbar(
                hs,
                [float(np.mean(ours[h])) - zero for h in hs],
                yerr=[float(np.std(ours[h], ddof=1)) if len(ours[h]) > 1 else 0.0 for h in hs],
                marker="o",
                capsize=4,
                color="tab:blue",
                label=(
                    "ours: mean ± sd over seeds, dots: seeds"
                    if any(len(v) > 1 for v in ours.values())
                    else "ours: one seed per h"
                )
                + f" (h={baseline}: {zero:.2f})",
            )
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
            ps = sorted(paper)
            ax.plot(
                ps,
                [paper[h] - paper[baseline] for h in ps],
                marker="s",
                linestyle="--",
                color="tab:orange",
                label=f"{panel.get('paper_label', 'paper')} (h={baseline}: {paper[baseline]:g})",
            )
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
    fig.suptitle(title, fontsize=10)
    return fig, width, height


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
    _save(fig, path, width, height)


def learning_curves_figure(groups: dict[int, dict] | None, curves: list, title: str) -> tuple[Figure, float, float]:
    width, height = 5.2 * len(CURVE_PANELS), 4.4
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, len(CURVE_PANELS), squeeze=False)[0]
    cmap = matplotlib_colormap(len(groups) if groups is not None else len(curves))
    for ax, (key, label, scale) in zip(axes, CURVE_PANELS):
        lines: list[list[float]] = []  # every drawn series, for the zoom
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


def matplotlib_colormap(n: int) -> list:
    """n distinct colours (tab10, then a continuous map for more)."""
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    return [colormaps["viridis"](i / max(1, n - 1)) for i in range(n)]
