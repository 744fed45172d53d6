"""What the figures must not get wrong: shared scales, lines inside their axes, titles inside the figure."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba

from mhatrain.analysis.figures import attention_grid_figure, head_heatmaps_figure
from mhatrain.study.reports.curves import (
    CURVE_PANELS,
    Curve,
    group_by_heads,
    learning_curves_figure,
    summary_lines,
)
from mhatrain.study.reports.head_count_figure import head_count_figure

KINDS = ("enc-self", "dec-self", "cross")


def _inside(limits: tuple[float, float], values) -> bool:
    low, high = sorted(limits)
    return all(low <= v <= high for v in values)


# ----------------------------------------------------------------------------- report.png


def test_head_count_figure_draws_ours_and_the_paper_as_differences_on_one_axis():
    seeds = {1: [0.7, 1.2, 0.9], 32: [-1.1, -2.0, -2.4]}  # each seed's difference to h=8 of its seed
    delta = {1: 0.93, 8: 0.0, 32: -1.83}
    paper = {1: 24.9, 8: 25.8, 32: 25.4}
    panel = {
        "label": "test BLEU",
        "delta": delta,
        "interval": {1: [0.2, 1.66], 32: [-3.1, -0.56]},
        "seeds": seeds,
        "left_out": {32: [-3.5]},
        "level": "36.7",
        "paper": paper,
        "paper_label": "paper",
    }
    fig, _, _ = head_count_figure([panel, {**panel, "label": "again"}], "title", baseline=8)
    axes = fig.axes
    assert len(axes) == 2  # no twin axes: one y scale per panel, ours and the paper's on it
    ax = axes[0]
    paper_delta = [paper[h] - paper[8] for h in paper]
    assert _inside(ax.get_ylim(), [v for vs in seeds.values() for v in vs] + paper_delta + [-3.5, -3.1, 1.66])
    (paper_line,) = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    np.testing.assert_allclose(np.asarray(paper_line.get_ydata(), float), paper_delta)
    ours = np.asarray([line for line in ax.get_lines() if line.get_marker() == "o"][0].get_ydata(), float)
    np.testing.assert_allclose(ours, [delta[h] for h in sorted(delta)])  # Δ as the tests give it
    hollow = [c for c in ax.collections if type(c).__name__ == "PathCollection" and not len(c.get_facecolor())]
    assert [tuple(c.get_offsets()[0]) for c in hollow] == [(32.0, -3.5)]  # the left-out run, marked as such


def test_head_count_figure_without_a_baseline_run_says_so():
    panel = {"label": "test BLEU", "delta": {}, "seeds": {1: [30.0]}, "paper": {1: 24.9, 8: 25.8}}
    fig, _, _ = head_count_figure([panel], "title", baseline=8)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "no finished h=8 run yet" in texts


# ----------------------------------------------------------------------------- head importance heatmaps


def test_every_panel_of_a_heatmap_row_shares_one_scale_and_red_marks_the_important_end():
    rng = np.random.default_rng(0)
    delta_loss = {k: rng.normal(0.05, 0.05, (2, 4)) * (i + 1) for i, k in enumerate(KINDS)}
    delta_bleu = {k: -np.abs(rng.normal(0, 3, (2, 4))) * (i + 1) for i, k in enumerate(KINDS)}
    delta_bleu["cross"][0, 0] = 0.5  # masking this head helped
    gradient = {k: np.abs(rng.normal(0, 0.01, (2, 4))) * (i + 1) for i, k in enumerate(KINDS)}
    rows = [("Δloss", delta_loss), ("ΔBLEU", delta_bleu), ("gradient", gradient)]
    fig, _, _ = head_heatmaps_figure(
        rows, "title", diverging=(True, True, False), lower_is_important=(False, True, False)
    )
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == len(rows) * len(KINDS)
    for r, (measure, values) in enumerate(rows):
        row = images[r * len(KINDS) : (r + 1) * len(KINDS)]
        assert len({im.get_clim() for im in row}) == 1, measure  # one scale across the kinds
        assert len({im.get_cmap().name for im in row}) == 1, measure
        every = np.concatenate([v.ravel() for v in values.values()])
        important = every.min() if measure == "ΔBLEU" else every.max()
        least = every.max() if measure == "ΔBLEU" else every.min()
        red, green, blue, _ = row[0].cmap(row[0].norm(important))
        assert red > max(green, blue) + 0.2, measure  # the most important head is red in every row
        red, green, blue, _ = row[0].cmap(row[0].norm(least))
        assert red < max(green, blue) + 0.2, measure  # the least important is not
    # The head whose masking helped is blue, as a positive Δloss's opposite is.
    bleu_row = images[len(KINDS) : 2 * len(KINDS)]
    red, _, blue, _ = bleu_row[2].cmap(bleu_row[2].norm(0.5))
    assert blue > red


# ----------------------------------------------------------------------------- learning curves


def _curve(name: str, level: float, steps: int, heads=None, seed=None) -> Curve:
    valid = list(range(100, 100 * steps + 1, 100))
    train = list(range(10, 10 * (10 * steps) + 1, 10))
    return Curve(
        name,
        heads,
        seed,
        valid_steps=valid,
        valid_bleu=[level * 2 + i for i in range(len(valid))],
        valid_ppl=[level * (1 + 10 / (i + 1)) for i in range(len(valid))],
        train_steps=train,
        train_loss=[level * (1 + 20 / (i + 1)) for i in range(len(train))],
        best_step=valid[-1],
    )


def test_curves_of_runs_at_very_different_levels_all_stay_inside_their_axes():
    curves = [_curve("low", 1.0, 10), _curve("high", 6.0, 4)]  # the second run sits far above the first
    fig, _, _ = learning_curves_figure(None, curves, "title")
    for ax, (key, _, _) in zip(fig.axes, CURVE_PANELS):
        for curve in curves:
            values = curve.train_loss_smoothed() if key == "train_loss" else getattr(curve, key)
            assert _inside(ax.get_ylim(), values[len(values) // 2 :]), (key, curve.name)


def test_a_zoomed_axis_says_what_it_cuts_off():
    """The loss panel starts above its axis (the first updates' loss is far above the plateau): a note says
    up to which update and value; a panel that cuts nothing has no note."""
    curve = _curve("run", 1.0, 10)  # loss 21 at update 10, falling to ~1.2
    fig, _, _ = learning_curves_figure(None, [curve], "title")
    panels = dict(zip([key for key, _, _ in CURVE_PANELS], fig.axes))
    top = panels["train_loss"].get_ylim()[1]
    smoothed = curve.train_loss_smoothed()
    last_above = max(step for step, v in zip(curve.train_steps, smoothed) if v > top)
    (note,) = [t.get_text() for t in panels["train_loss"].texts]
    assert note == (
        f"axis cut at {top:.3g}: values up to {max(smoothed):.3g}\n(until update {last_above:,}) lie above it"
    )
    assert not panels["valid_bleu"].texts  # not zoomed
    flat = Curve("flat", valid_steps=[100, 200], valid_bleu=[1.0, 2.0], valid_ppl=[5.0, 5.0])
    flat.train_steps, flat.train_loss = [10, 20, 30], [2.0, 2.0, 2.0]
    fig, _, _ = learning_curves_figure(None, [flat], "title")
    assert not any(ax.texts for ax in fig.axes)


def test_study_curves_draw_each_band_in_its_own_colour_without_blended_fills():
    curves = [_curve(f"h{h}s{s}", 1.0 + 0.1 * h + 0.05 * s, 5, heads=h, seed=s) for h in (1, 8) for s in (1, 2, 3)]
    groups = group_by_heads(curves)
    fig, _, _ = learning_curves_figure(groups, curves, "title")
    loss = fig.axes[[key for key, _, _ in CURVE_PANELS].index("train_loss")]
    assert not [c for c in loss.collections if isinstance(c, PolyCollection)]
    colours = [to_rgba(line.get_color()) for line in loss.get_lines()]
    assert len(colours) == 3 * len(groups)  # mean and two band edges per h
    assert len(set(colours)) == len(groups)
    for group, (h, _) in zip(range(len(groups)), groups.items()):
        means = loss.get_lines()[3 * group].get_ydata()
        np.testing.assert_allclose(means, groups[h]["train_loss"]["mean"])


# ----------------------------------------------------------------------------- attention grids


@pytest.mark.parametrize("n_heads", [1, 4])
def test_the_title_of_a_long_sentence_stays_inside_the_figure(n_heads):
    sentence = " ".join(["The red car likes the blue hat near the young man"] * 4)
    maps = np.full((2, n_heads, 6, 40), 1 / 40)
    fig, _, _ = attention_grid_figure(
        maps, [1, 2], [f"q{i}" for i in range(6)], [f"k{i}" for i in range(40)], f"cross-attention — '{sentence}'"
    )
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    assert fig._suptitle.get_text().replace("\n", " ").count("young man") == 4  # wrapped, nothing dropped
    assert title.x0 >= 0 and title.x1 <= fig.bbox.width and title.y1 <= fig.bbox.height
    head_labels = [ax.title.get_window_extent(renderer) for ax in fig.axes[:n_heads]]
    assert all(label.y1 <= title.y0 for label in head_labels)  # the head labels sit below the title


@pytest.mark.parametrize(
    ("ppl", "trend"),
    [
        ([5.1], "one validation, so no trend yet"),  # one point says nothing about a trend
        ([5.1, 4.2], "validation perplexity still falling at the last validation"),
        ([4.2, 4.3], "validation perplexity not falling at the last validation"),
    ],
)
def test_the_curves_summary_claims_a_trend_only_from_two_validations(ppl, trend):
    steps = [200 * (i + 1) for i in range(len(ppl))]
    curve = Curve("h08-seed1", 8, 1, steps, [20.0] * len(ppl), ppl, best_step=steps[-1])
    (line,) = summary_lines([curve])
    assert line.endswith(trend) and f"best at update {steps[-1]:,}" in line
