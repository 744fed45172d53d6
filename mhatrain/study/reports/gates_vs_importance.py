"""Learned gates against importance pruning at equal open-head counts, and both beside the head-count grid:
the part of a prune directory's report (prune_report.py) that answers "does a gate choose better heads
than an importance ranking, and better than training fewer heads from scratch?".

    gates        each λ run (running/prune.py's outcome.json): its open heads, test cross-entropy and BLEU;
    importance   the source run with the same number of heads open, the least important ones masked
                 (analysis/importance_counts.py), scored on the same split with the same decoding;
    grid         a head-count study (`mhatrain ablate`), optional: per h, the mean over its tested seeds
                 of test BLEU and cross-entropy at h heads in every attention module: separate trainings.

Each Δ is against its own reference: a gate run's against the λ = 0 run (fine-tuned as long, no heads
closed), importance pruning's against the unpruned source; beside the grid's h = 1, both are given as
score − h = 1's mean.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from ...core.config import ModelConfig
from ...core.plots import save_figure
from ..grid.directory import read_base_config
from ..grid.run_records import gather
from .by_heads import describe

FIGURE = "gates-vs-importance.png"
MEASURES = (("cross_entropy", "test cross-entropy (nats/token)"), ("bleu", "test BLEU"))


# ----------------------------------------------------------------------------- the grid's points


def grid_points(study_dir: Path) -> dict:
    """Per h of a head-count study that has tested runs: total heads (h × attention modules of its base
    config), and the mean over seeds of test BLEU and test cross-entropy (the runs its report counts)."""
    grid, runs = gather(Path(study_dir))
    model = {**vars(ModelConfig()), **(read_base_config(Path(study_dir)).get("model") or {})}
    modules = model["n_encoder_layers"] + 2 * model["n_decoder_layers"]  # enc-self; dec-self and cross
    points = []
    for h in grid["heads"]:
        tested = [r for r in runs if r.heads == h and r.tested]
        bleu, nll = describe({r.seed: r.test_bleu for r in tested}), describe({r.seed: r.test_nll for r in tested})
        if bleu["n"] or nll["n"]:
            points.append(
                {
                    "heads": h,
                    "open": h * modules,
                    "bleu": bleu["mean"],
                    "bleu_seeds": bleu["n"],
                    "cross_entropy": nll["mean"],
                    "cross_entropy_seeds": nll["n"],
                }
            )
    return {"study": str(study_dir), "modules": modules, "points": points}


# ----------------------------------------------------------------------------- rows


def comparison_rows(outcomes: list[dict], importance: dict) -> list[dict]:
    """Per λ run (in λ order): its open heads and scores, its Δ to the λ = 0 run (None without one), and
    importance pruning's scores at the same count with their Δ to the unpruned source."""
    base = next((o for o in outcomes if o["l0"] == 0), None)
    unpruned = importance["points"].get(str(importance["heads_total"]))
    rows = []
    for o in sorted(outcomes, key=lambda o: o["l0"]):
        gates = {m: o["test"][m] for m, _ in MEASURES}
        masked = importance["points"].get(str(o["open_total"]))
        rows.append(
            {
                "l0": o["l0"],
                "open": o["open_total"],
                "heads_total": o["heads_total"],
                "gates": gates,
                "gates_delta": _delta(gates, base["test"] if base else None),
                "importance": {m: masked[m] for m, _ in MEASURES} if masked else None,
                "importance_delta": _delta(masked, unpruned),
            }
        )
    return rows


def _delta(scores: dict | None, reference: dict | None) -> dict | None:
    if scores is None or reference is None:
        return None
    return {m: round(scores[m] - reference[m], 4) for m, _ in MEASURES}


def grid_row(grid: dict | None, heads: int) -> dict | None:
    """The grid's point of h = `heads`, where it has one."""
    return next((p for p in (grid or {}).get("points", []) if p["heads"] == heads), None)


# ----------------------------------------------------------------------------- report.md


def comparison_lines(rows: list[dict], importance: dict, grid: dict | None) -> list[str]:
    """The section of report.md: what each Δ is against, the table per λ, and the grid's h = 1."""
    unpruned = importance["points"][str(importance["heads_total"])]
    lines = [
        "## Gates against importance pruning, at equal open heads",
        "",
        f"Importance pruning: the source run ({importance['checkpoint']}) with its least important heads masked, "
        f"as many as each λ run closed, in the order of `mhatrain heads` (gradient importance normalised per "
        f"layer, on the first {importance['order_sentences']} pairs of '{importance['order_split']}'), scored on "
        f"'{importance['split']}' with beam {importance['beam']}, alpha {importance['alpha']}, as the gates are. "
        f"Unpruned source: test CE {unpruned['cross_entropy']:.4f}, BLEU {unpruned['bleu']:.2f}.",
        "Gates' Δ is against the λ = 0 run (fine-tuned as long, every head open); importance pruning's Δ is "
        "against the unpruned source. CE: test cross-entropy in nats per target token (lower is better).",
        "",
        *_table(
            ["λ", "open heads", "gates CE", "gates ΔCE", "gates BLEU", "gates ΔBLEU"]
            + ["importance CE", "importance ΔCE", "importance BLEU", "importance ΔBLEU"],
            [
                [
                    f"{r['l0']:g}",
                    f"{r['open']}/{r['heads_total']}",
                    *_pair(r["gates"], r["gates_delta"], "cross_entropy"),
                    *_pair(r["gates"], r["gates_delta"], "bleu"),
                    *_pair(r["importance"], r["importance_delta"], "cross_entropy"),
                    *_pair(r["importance"], r["importance_delta"], "bleu"),
                ]
                for r in rows
            ],
        ),
    ]
    return lines + _grid_lines(rows, grid)


def _grid_lines(rows: list[dict], grid: dict | None) -> list[str]:
    if grid is None:
        return ["", "No head-count grid given (`--grid STUDY_DIR` adds its points)."]
    shown = ", ".join(
        f"h={p['heads']}: {p['open']} heads, CE {_number(p['cross_entropy'], 4)} ({p['cross_entropy_seeds']} seeds), "
        f"BLEU {_number(p['bleu'], 2)} ({p['bleu_seeds']} seeds)"
        for p in grid["points"]
    )
    lines = [
        "",
        f"Grid: `{grid['study']}`, separate trainings with h heads in each of its {grid['modules']} attention "
        f"modules, the mean over the seeds its report counts: {shown or 'no tested runs yet'}.",
    ]
    one = grid_row(grid, 1)
    if one is None:
        return lines
    lines += [
        "",
        f"Against the grid's h=1 ({one['open']} heads, trained from scratch): score − h=1's mean.",
        "",
        *_table(
            ["λ", "open heads", "gates ΔCE", "gates ΔBLEU", "importance ΔCE", "importance ΔBLEU"],
            [
                [f"{r['l0']:g}", f"{r['open']}/{r['heads_total']}"]
                + [_difference(r[side], one, m) for side in ("gates", "importance") for m, _ in MEASURES]
                for r in rows
            ],
        ),
    ]
    return lines


def _pair(scores: dict | None, delta: dict | None, measure: str) -> list[str]:
    digits = 4 if measure == "cross_entropy" else 2
    value = _number(scores[measure], digits) if scores else "–"
    return [value, f"{delta[measure]:+.{digits}f}" if delta else "–"]


def _difference(scores: dict | None, point: dict, measure: str) -> str:
    if scores is None or point[measure] is None:
        return "–"
    digits = 4 if measure == "cross_entropy" else 2
    return f"{scores[measure] - point[measure]:+.{digits}f}"


def _number(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


# ----------------------------------------------------------------------------- the figure


def draw_comparison(rows: list[dict], importance: dict, grid: dict | None, path: Path) -> None:
    """Test CE and test BLEU against open heads: the gate runs (one point per λ), importance pruning at the
    same counts with the unpruned source, and the grid's points where given (those of no more heads than
    the source has: the table lists the others)."""
    width, height = 11.0, 4.6
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, len(MEASURES), squeeze=False)[0]
    total = importance["heads_total"]
    masked = sorted((p for p in importance["points"].values()), key=lambda p: p["open"])
    for ax, (measure, label) in zip(axes, MEASURES):
        gates = sorted(rows, key=lambda r: r["open"])
        ax.plot([r["open"] for r in gates], [r["gates"][measure] for r in gates], "o-", label="learned gates (per λ)")
        for r in gates:
            ax.annotate(
                f"λ={r['l0']:g}",
                (r["open"], r["gates"][measure]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
        ax.plot(
            [p["open"] for p in masked], [p[measure] for p in masked], "s--", label="importance pruning of the source"
        )
        points = [p for p in (grid or {}).get("points", []) if p[measure] is not None and p["open"] <= total]
        if points:
            ax.plot(
                [p["open"] for p in points],
                [p[measure] for p in points],
                "D",
                color="grey",
                label="grid h × modules (separate trainings, mean over seeds)",
            )
            for p in points:
                ax.annotate(
                    f"h={p['heads']}",
                    (p["open"], p[measure]),
                    fontsize=7,
                    xytext=(3, -9),
                    textcoords="offset points",
                    color="grey",
                )
        ax.set_xlabel(f"open heads (of {total})")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("Learned gates against importance pruning at equal open heads", fontsize=10)
    save_figure(fig, path, width, height)
