"""Figures for the head analysis, drawn with matplotlib's Agg backend (no display needed).

Every figure is sized from the shape of its data, so any number of layers, heads and tokens
works; heads are always drawn one by one, never averaged. Figures are built as plain
`Figure` objects on an Agg canvas (no pyplot global state, nothing left open).

Shape legend: L layers · H heads · Tq query length · Tk key length.
"""

from __future__ import annotations

import re
import textwrap
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ..core.plots import save_figure, series_colours

MAX_GRID_WIDTH_IN = 90.0  # the head grid of a 32-head model stays a (wide) poster, not a wall


# matplotlib warns once per missing glyph and figure
MISSING_GLYPH = re.compile(r"Glyph (\d+) .*missing from (?:current )?font")


@contextmanager
def missing_glyphs() -> Iterator[set[str]]:
    """Collect the characters that the figures drawn inside cannot show (matplotlib's font has no glyph
    for them: they are drawn as empty boxes) into the set it yields, filled when the block ends,
    instead of matplotlib's warning for every glyph of every figure. Other warnings pass through."""
    missing: set[str] = set()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield missing
    for warning in caught:
        found = MISSING_GLYPH.search(str(warning.message))
        if found:
            missing.add(chr(int(found[1])))
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


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
    save_figure(fig, path, width, height)


def attention_grid_figure(
    maps: np.ndarray,
    layer_numbers: list[int],
    query_labels: list[str],
    key_labels: list[str],
    title: str,
    query_name: str = "query",
    key_name: str = "key",
) -> tuple[Figure, float, float]:
    """The figure of `attention_grid`, and its width and height in inches."""
    maps = np.asarray(maps, dtype=np.float32)
    if maps.ndim != 4:
        raise ValueError(f"attention maps must be [L, H, Tq, Tk], got shape {maps.shape}")
    L, H, Tq, Tk = maps.shape
    if len(layer_numbers) != L or len(query_labels) != Tq or len(key_labels) != Tk:
        raise ValueError("labels do not match the shape of the maps")
    g = _grid_layout(L, H, query_labels, key_labels, f"{title}\nrows: {query_name} · columns: {key_name}")
    fig = Figure(figsize=(g.width, g.height))
    axes = fig.subplots(L, H, squeeze=False)
    fig.subplots_adjust(
        left=g.left / g.width,
        right=1 - g.right / g.width,
        bottom=g.bottom / g.height,
        top=1 - g.top / g.height,
        wspace=g.gap / g.cell,
        hspace=g.gap / g.cell,
    )
    image = None
    for row in range(L):
        for col in range(H):
            ax = axes[row, col]
            image = ax.imshow(
                maps[row, col], vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", interpolation="nearest"
            )
            _label_grid_cell(ax, row, col, L, layer_numbers, query_labels, key_labels, g)
    fig.suptitle(g.suptitle, fontsize=11, y=1 - 0.1 / g.height, va="top")
    cax = fig.add_axes([1 - (g.right - 0.25) / g.width, g.bottom / g.height, 0.15 / g.width, (L * g.cell) / g.height])
    fig.colorbar(image, cax=cax).ax.tick_params(labelsize=7)
    return fig, g.width, g.height


@dataclass(frozen=True)
class _GridLayout:
    """The head grid's sizes in inches, and the fonts and label steps that fit them."""

    cell: float  # side of one head's map
    gap: float  # between two maps
    left: float  # margins: query labels and the layer names
    right: float  # the colour bar
    top: float  # the title, then the head names
    bottom: float  # key labels
    width: float
    height: float
    q_step: int  # every q_step-th query label is shown, in q_font points
    q_font: float
    k_step: int  # every k_step-th key label, in k_font points
    k_font: float
    title_font: float  # of the head and layer names
    suptitle: str  # the title, wrapped to the width


def _grid_layout(L: int, H: int, query_labels: list[str], key_labels: list[str], title: str) -> _GridLayout:
    """Cells sized from the longest sequence (smaller with many heads), margins from the longest labels
    and from the title's lines once wrapped to the figure's width."""
    Tq, Tk = len(query_labels), len(key_labels)
    cell = float(np.clip(0.16 * max(Tq, Tk), 1.0, 4.0))
    cell = min(cell, MAX_GRID_WIDTH_IN / H)  # many heads: smaller cells
    q_step, q_font = _label_step(Tq, cell * 72)
    k_step, k_font = _label_step(Tk, cell * 72)
    char_in = 0.6 / 72  # approximate width of one character per point of font size
    left = 0.45 + max(map(len, query_labels)) * q_font * char_in + 0.25
    bottom = 0.3 + max(map(len, key_labels)) * k_font * char_in
    right, gap = 0.9, 0.06 + 0.02 * cell
    width = left + H * cell + (H - 1) * gap + right
    title_font = float(np.clip(cell * 6, 6, 11))
    suptitle = wrap_title(title, width, 11)
    top = 0.15 + (suptitle.count("\n") + 1) * 11 * 1.3 / 72 + title_font * 2 / 72  # title lines, then head names
    height = top + L * cell + (L - 1) * gap + bottom
    return _GridLayout(
        cell, gap, left, right, top, bottom, width, height, q_step, q_font, k_step, k_font, title_font, suptitle
    )


def _label_grid_cell(
    ax,
    row: int,
    col: int,
    L: int,
    layer_numbers: list[int],
    query_labels: list[str],
    key_labels: list[str],
    g: _GridLayout,
) -> None:
    """Token labels on the left column (queries) and the bottom row (keys), head names on the top row."""
    ax.tick_params(length=0, pad=1)
    if col == 0:
        _ticks(ax.set_yticks, ax.set_yticklabels, query_labels, g.q_step, g.q_font)
        ax.set_ylabel(f"layer {layer_numbers[row]}", fontsize=g.title_font)
    else:
        ax.set_yticks([])
    if row == L - 1:
        _ticks(ax.set_xticks, ax.set_xticklabels, key_labels, g.k_step, g.k_font, rotation=90)
    else:
        ax.set_xticks([])
    if row == 0:
        ax.set_title(f"head {col + 1}", fontsize=g.title_font)


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
    save_figure(fig, path, width, height)


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
    """The figure of `head_heatmaps`, and its width and height in inches."""
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
        lower = bool(lower_is_important and lower_is_important[r])
        cmap, vmin, vmax = heatmap_scale(list(values.values()), bool(diverging and diverging[r]), lower)
        for c, kind in enumerate(kinds):
            x0, y0 = c * panel_w + left, height - header - r * panel_h - top - map_h
            ax = fig.add_axes((x0 / width, y0 / height, map_w / width, map_h / height))
            image = _heatmap_panel(ax, values[kind], f"{kind}: {measure}", cmap, vmin, vmax)
        # one scale per row, so one colour bar, beside the row's last panel
        cax = fig.add_axes(((x0 + map_w + 0.1) / width, y0 / height, 0.12 / width, map_h / height))
        fig.colorbar(image, cax=cax).ax.tick_params(labelsize=6)
        if lower:
            cax.invert_yaxis()  # red, the important end, on top in every row
    fig.suptitle(suptitle, fontsize=10, y=1 - 0.12 / height, va="top")
    return fig, width, height


def _heatmap_panel(ax, values: np.ndarray, title: str, cmap: str, vmin: float, vmax: float):
    """One [L, H] heatmap with numbered layers and heads; its values written into the cells when
    there are few enough to read. Returns the image (for the row's colour bar)."""
    data = np.asarray(values, dtype=np.float64)
    L, H = data.shape
    image = ax.imshow(data, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    head_step = max(1, int(np.ceil(H / 16)))
    ax.set_xticks(range(0, H, head_step), [str(h + 1) for h in range(0, H, head_step)], fontsize=7)
    ax.set_yticks(range(L), [str(layer + 1) for layer in range(L)], fontsize=7)
    ax.set_xlabel("head", fontsize=8)
    ax.set_ylabel("layer", fontsize=8)
    ax.set_title(title, fontsize=9)
    if L * H <= 96:
        for (i, j), value in np.ndenumerate(data):
            if np.isfinite(value):
                colour = _text_colour(image.cmap(image.norm(value)))
                ax.text(j, i, f"{value:.2g}", ha="center", va="center", fontsize=6, color=colour)
    return image


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
    save_figure(fig, path, 6.4, 4.4)


def gate_maps(rows: list[tuple[str, dict[str, np.ndarray]]], path: Path, title: str) -> None:
    """Learned head gates: one row per run (a penalty λ), one [L, H] panel per attention kind, each head
    coloured by its P(open) on one fixed scale from 0 (closed for good) to 1."""
    kinds = list(rows[0][1])
    max_layers = max(np.asarray(rows[0][1][kind]).shape[0] for kind in kinds)
    H = max(np.asarray(rows[0][1][kind]).shape[1] for kind in kinds)
    map_w, map_h = max(2.0, 0.3 * H), max(0.8, 0.3 * max_layers)
    left, right, top, bottom = 0.6, 0.85, 0.35, 0.55
    panel_w, panel_h = left + map_w + right, top + map_h + bottom
    width = panel_w * len(kinds)
    suptitle = wrap_title(f"{title}\ncolour: P(open) of each head, 0 (closed) to 1", width, 10)
    header = 0.2 + (suptitle.count("\n") + 1) * 10 * 1.3 / 72
    height = panel_h * len(rows) + header
    fig = Figure(figsize=(width, height))
    for r, (name, values) in enumerate(rows):
        for c, kind in enumerate(kinds):
            x0, y0 = c * panel_w + left, height - header - r * panel_h - top - map_h
            ax = fig.add_axes((x0 / width, y0 / height, map_w / width, map_h / height))
            image = _heatmap_panel(ax, values[kind], f"{name}: {kind}", "Reds", 0.0, 1.0)
        cax = fig.add_axes(((x0 + map_w + 0.1) / width, y0 / height, 0.12 / width, map_h / height))
        fig.colorbar(image, cax=cax).ax.tick_params(labelsize=6)
    fig.suptitle(suptitle, fontsize=10, y=1 - 0.12 / height, va="top")
    save_figure(fig, path, width, height)


def gate_trajectories(panels: list[tuple[str, list[int], dict[str, np.ndarray]]], path: Path, title: str) -> None:
    """Each head's P(open) against updates: one panel per run, one line per head, coloured by its kind.

    panels: (name, updates [N], {kind: [N, L, H] P(open)})."""
    width, height = 6.4, 2.4 * len(panels) + 0.6
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0])
    for ax, (name, steps, values) in zip(axes, panels):
        for colour, (kind, series) in zip(series_colours(len(values)), values.items()):
            flat = np.asarray(series, dtype=np.float64).reshape(len(steps), -1)  # [N, L·H]
            for i in range(flat.shape[1]):
                ax.plot(steps, flat[:, i], color=colour, linewidth=0.8, alpha=0.7, label=kind if i == 0 else None)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("P(open)", fontsize=8)
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    axes[-1].set_xlabel("fine-tuning update")
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path, width, height)
