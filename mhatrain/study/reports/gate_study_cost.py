"""What a prune directory's gate study cost, set beside the head-count grid whose question it answers.

The gate study is the trained source run plus one fine-tune per λ; the grid is every trained point of the
head-count study. Each run's cost is read from its own files: train_summary.json (updates, target tokens,
training seconds, which are wall-clock seconds of the training loop, validation excluded) and
provenance.json (the CPU threads and the machine of its training sessions). Two measures:
    target tokens trained   what the work was, whatever the machine: the ratio that carries over
    core-seconds            training seconds × threads: what it cost on the machines that ran it, which
                            differ in precision, CPU and load (a run trained beside other jobs shows it)
Evaluation is left out on both sides: a test evaluation takes seconds to a minute per run on either.
"""

from __future__ import annotations

from pathlib import Path

from ...core import provenance
from ...core.formatting import num
from ...core.rundir import read_summary
from ..grid.run_records import gather, training_machines


def run_cost(run_dir: Path) -> dict | None:
    """The training cost of one finished run, or None while it has not finished training."""
    summary = read_summary(run_dir)
    if summary is None:
        return None
    environments = [s.get("environment") or {} for s in provenance.read_sessions(run_dir)]
    threads = max((int(e["threads"]) for e in environments if e.get("threads")), default=1)
    seconds = float(summary.get("train_seconds") or 0.0)
    return {
        "updates": int(summary.get("updates") or 0),
        "target_tokens": int(summary.get("target_tokens") or 0),
        "train_seconds": seconds,
        "threads": threads,
        "core_seconds": seconds * threads,
        "machines": sorted(training_machines(run_dir)),
    }


def _total(costs: list[dict]) -> dict:
    return {
        "runs": len(costs),
        **{key: sum(c[key] for c in costs) for key in ("updates", "target_tokens", "train_seconds", "core_seconds")},
        "machines": sorted({m for c in costs for m in c["machines"]}),
    }


def gate_study_cost(source: Path, run_dirs: list[Path], grid_dir: Path | None) -> dict | None:
    """The training cost of the source and the λ runs (`run_dirs`), and of the grid's trained points when
    a grid is given; their ratios. None until the source and every λ run have finished training."""
    parts = [run_cost(Path(source)), *(run_cost(d) for d in run_dirs)]
    if any(part is None for part in parts):
        return None
    cost = {"gate_study": _total(parts), "source": parts[0], "fine_tunes": _total(parts[1:]), "grid": None}
    if grid_dir is not None:
        _, runs = gather(Path(grid_dir))
        trained = [c for r in runs if (c := run_cost(Path(grid_dir) / r.run_dir)) is not None]
        if trained:
            cost["grid"] = _total(trained)
            cost["ratio"] = {
                key: cost["gate_study"][key] / cost["grid"][key]
                for key in ("target_tokens", "core_seconds")
                if cost["grid"][key]
            }
    return cost


def cost_lines(cost: dict) -> list[str]:
    """report.md's section: the table of the three parts and, with a grid, the ratios."""
    rows = [
        ("source (trained from scratch)", cost["source"] | {"runs": 1}),
        ("fine-tunes, one per λ", cost["fine_tunes"]),
    ]
    rows.append(("gate study in all", cost["gate_study"]))
    if cost["grid"]:
        rows.append(("head-count grid, every trained point", cost["grid"]))
    lines = [
        "## What the gate study cost",
        "",
        "Training only, from each run's train_summary.json and provenance.json; core-seconds are training "
        "seconds × CPU threads, on the machines named, which differ in precision and load.",
        "",
        "| | runs | updates | target tokens | training s | core-s | machines |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, part in rows:
        lines.append(
            f"| {name} | {part['runs']} | {part['updates']:,} | {part['target_tokens']:,} | "
            f"{part['train_seconds']:,.0f} | {part['core_seconds']:,.0f} | {', '.join(part['machines'])} |"
        )
    ratio = cost.get("ratio") or {}
    if ratio:
        lines += [
            "",
            f"The gate study trained {num(ratio.get('target_tokens'), 2)}× the grid's target tokens "
            f"({num(ratio.get('core_seconds'), 2)}× its core-seconds on the machines that ran each).",
        ]
    return lines
