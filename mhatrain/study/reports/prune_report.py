"""The report of a prune directory (running/prune.py): per penalty λ, the open heads per kind and layer, the
test BLEU, chrF and cross-entropy of the gated model at its last checkpoint, the pruned run's size, and
whether and where its gates settled; report.md, report.json, gate-maps.png (each head's final P(open))
and gate-trajectories.png (P(open) over the fine-tuning updates). Once importance pruning has been
measured at the runs' open-head counts, the comparison of gates against importance pruning (and the grid)
of gates_vs_importance.py: a section of report.md, report.json's "comparison" and gates-vs-importance.png.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console

from ...analysis.figures import gate_maps, gate_trajectories
from ...core.files import atomic_write_json, atomic_write_text
from .gate_study_cost import cost_lines
from .gates_vs_importance import FIGURE, comparison_lines, comparison_rows, draw_comparison

REPORT_MD, REPORT_JSON = "report.md", "report.json"
GATE_MAPS, TRAJECTORIES = "gate-maps.png", "gate-trajectories.png"


def write_report(
    out: Path,
    record: dict,
    outcomes: list[dict],
    histories: list[list[dict]],
    pending: list[str],
    console: Console,
    importance: dict | None = None,
    grid: dict | None = None,
    cost: dict | None = None,
) -> dict:
    """Write report.json and report.md of prune directory `out` and draw its figures; print the table.
    record: its prune.yaml; outcomes: the finished λ runs' outcome.json, with their gate records
    (`histories`, training.metrics.gate_history); pending: the λ runs not finished yet; importance: the
    source's scores at the runs' open-head counts (analysis/importance_counts.py), None until measured;
    grid: a head-count study's points (gates_vs_importance.grid_points) or None; cost: the training cost
    of the source and the λ runs beside the grid's (gate_study_cost.py), None until all have trained."""
    out = Path(out)
    order = sorted(range(len(outcomes)), key=lambda i: outcomes[i]["l0"])  # rows by λ, whatever order they ran in
    outcomes, histories = [outcomes[i] for i in order], [histories[i] for i in order]
    rows = comparison_rows(outcomes, importance) if importance and outcomes else None
    report = {
        "source": record.get("source"),
        "checkpoint": record.get("checkpoint"),
        "window": record.get("window"),
        "min_updates": record.get("min_updates"),
        "max_updates": record.get("max_updates"),
        "overrides": record.get("overrides", []),
        "runs": outcomes,
        "pending": pending,
        "comparison": {"rows": rows, "importance": importance, "grid": grid} if rows else None,
        "kinds_kept": kinds_kept(outcomes),
        "cost": cost,
    }
    atomic_write_json(out / REPORT_JSON, report)
    lines = report_lines(report)
    if outcomes:
        _draw(out, outcomes, histories)
        lines += ["", f"![gate maps]({GATE_MAPS})", "", f"![P(open) over updates]({TRAJECTORIES})"]
    if rows:
        draw_comparison(rows, importance, grid, out / FIGURE)
        lines += ["", *comparison_lines(rows, importance, grid), "", f"![gates against importance pruning]({FIGURE})"]
    if cost:
        lines += ["", *cost_lines(cost)]
    atomic_write_text(out / REPORT_MD, "\n".join(lines) + "\n")
    console.print("\n".join(table_lines(outcomes)), highlight=False)
    console.print(f"report: {out / REPORT_MD}  {out / REPORT_JSON}", highlight=False)
    return report


def report_lines(report: dict) -> list[str]:
    """report.md: what was fine-tuned, how settled is defined, and the table."""
    lines = [
        "# Learned head gates: one fine-tune per L0 penalty λ",
        "",
        f"Source: `{report['source']}` ({report['checkpoint']}); every λ run starts from its weights with all "
        f"gates open, a fresh optimiser and schedule{_sets(report['overrides'])}.",
        f"Settled: the number of open heads (evaluation gate > 0) is the same at every logged update of the "
        f"last {report['window']} updates, from update {report['min_updates']} on; each run stops there, or at "
        f"{report['max_updates']} updates. "
        "BLEU, chrF and cross-entropy (nats per target token, no label smoothing) are the test split's, of the "
        "gated model at its last checkpoint, which the pruned run computes too.",
        "",
        *table_lines(report["runs"]),
    ]
    if report["kinds_kept"]:
        lines += ["", *kind_order_lines(report["kinds_kept"])]
    if report["pending"]:
        lines += ["", f"Not finished yet: {', '.join(report['pending'])} (run the same `mhatrain prune` again)."]
    return lines


def _sets(overrides: list[str]) -> str:
    return f", with {', '.join(f'`--set {item}`' for item in overrides)}" if overrides else ""


def table_lines(outcomes: list[dict]) -> list[str]:
    """One row per λ: its updates and where the gates settled, the open heads of each kind layer by layer
    (bottom first) and in all, the test scores, and the parameters before and after pruning."""
    kinds = list(outcomes[0]["open_heads"]) if outcomes else []
    header = ["λ", "updates", "settled at", *kinds, "open", "BLEU", "chrF", "test CE", "parameters → pruned"]
    rows = [
        [
            f"{o['l0']:g}",
            str(o["updates"]),
            str(o["settled_at"]) if o["settled_at"] is not None else "not settled",
            *(" ".join(map(str, o["open_heads"][kind])) for kind in kinds),
            f"{o['open_total']}/{o['heads_total']}",
            f"{o['test']['bleu']:.2f}",
            f"{o['test']['chrf']:.2f}",
            f"{o['test']['cross_entropy']:.4f}",
            f"{o['parameters']:,} → {o['pruned']['parameters']:,}",
        ]
        for o in outcomes
    ]
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


VOITA_ORDER = (
    "Voita et al. 2019 (WMT EN-RU, 6+6 layers × 8 heads): cross-attention (decoder-encoder) heads are pruned last"
)


def kinds_kept(outcomes: list[dict]) -> list[dict]:
    """Per λ > 0 run: each kind's open heads out of its heads, and the kinds ordered by the share kept
    (most first; ties keep the model's order enc_self, dec_self, cross)."""
    rows = []
    for o in sorted(outcomes, key=lambda o: o["l0"]):
        if o["l0"] == 0:
            continue
        kept = {
            kind: {"open": sum(o["open_heads"][kind]), "heads": sum(len(layer) for layer in o["p_open"][kind])}
            for kind in o["open_heads"]
        }
        order = sorted(kept, key=lambda kind: -kept[kind]["open"] / max(kept[kind]["heads"], 1))
        rows.append({"l0": o["l0"], "kept": kept, "order": order})
    return rows


def kind_order_lines(rows: list[dict]) -> list[str]:
    """report.md's lines on which kind of attention keeps the most heads, per λ, beside Voita et al.'s."""
    lines = ["Kinds by share of heads kept (most first):", ""]
    for row in rows:
        shares = [f"{kind} {row['kept'][kind]['open']}/{row['kept'][kind]['heads']}" for kind in row["order"]]
        if not any(row["kept"][kind]["open"] for kind in row["order"]):
            shares = ["no head kept"]
        lines.append(f"- λ = {row['l0']:g}: {' > '.join(shares)}")
    return [*lines, f"- {VOITA_ORDER}."]


def _draw(out: Path, outcomes: list[dict], histories: list[list[dict]]) -> None:
    names = [f"λ = {o['l0']:g}" for o in outcomes]
    maps = [(name, {kind: np.asarray(p) for kind, p in o["p_open"].items()}) for name, o in zip(names, outcomes)]
    gate_maps(maps, out / GATE_MAPS, "Learned head gates after fine-tuning, per penalty λ (layer × head)")
    panels = []
    for name, o, history in zip(names, outcomes, histories):
        steps = [r["step"] for r in history]
        panels.append((name, steps, {kind: np.asarray([r["p_open"][kind] for r in history]) for kind in o["p_open"]}))
    gate_trajectories(panels, out / TRAJECTORIES, "P(open) of every head over the fine-tuning updates")
