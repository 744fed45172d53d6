"""When do extra heads help? A study varied over other settings (`ablate --vary KEY=V1,V2`) and its map.

Every combination of the varied values is a cell (record.py names its folder and points); each cell holds
the whole heads × seeds grid and is reported as a study of its own by grid_report.build_report, so within a
cell every h is tested against h=8 by exactly the test of the main report. Across cells this module
adds:
  * the regime map: per cell and h, Δ test BLEU = BLEU(h) − BLEU(h=8) over the seeds both have (h=1's row
    is the question "does one head beat eight here?"), with a 95% interval over seeds and the interval,
    adjusted p and verdict of the cell's own test against h=8; as report.md's table, regime-map.csv and
    regime-map.png (one shared Δ axis);
  * an interaction test per h: does Δ differ between cells (see `interaction`);
  * what each point costs: d_k, parameters and training FLOPs per target token, which change with
    d_model, model.d_head and the layer sizes (`point_cost`), also shown by `ablate` before training.
The baseline is h=8 (comparison.BASELINE_HEADS); in a grid without 8 it is the largest h, and the cells'
own tests (against h=8) are then absent.
"""

from __future__ import annotations

import copy
import csv
import io
import statistics
import textwrap
from pathlib import Path

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console

from ..core.config import Config, apply_override, config_from_dict, head_size
from ..core.errors import MhatrainError
from ..core.files import atomic_write, atomic_write_json, atomic_write_text
from ..model.flops import forward_macs
from ..model.transformer import build_model, count_parameters
from .comparison import BASELINE_HEADS, verdict_of
from .grid_report import build_report, write
from .interaction import METHOD as INTERACTION_METHOD
from .interaction import interaction
from .record import Cell, Study, cell_name, grid_cells, point_dirs, read_base_config, read_record
from .significance import BOOTSTRAP_SAMPLES, seed_interval
from .tables import blank, interval, md_table, num, p_value, signed

COST_LENGTH = 20  # tokens per sentence (each side) at which FLOPs per target token are quoted


# ----------------------------------------------------------------------------- what a point costs


def point_cost(config: Config, vocab_size: int | None = None) -> dict:
    """d_k, parameters and training FLOPs per target token (6 × forward multiply-accumulates of a pair of
    COST_LENGTH-token sentences, over COST_LENGTH) of the model a config builds; vocab_size defaults to
    data.vocab_size (the trained tokenizer's may be a little smaller). The model is built on the meta
    device: no memory, no weights."""
    m = config.model
    vocab = vocab_size or config.data.vocab_size
    with torch.device("meta"):
        parameters = count_parameters(build_model(m, vocab))
    lengths = torch.tensor([COST_LENGTH])
    return {
        "d_head": head_size(m.d_model, m.n_heads, m.d_head),
        "parameters": parameters,
        "flops_per_token": 6 * forward_macs(m, vocab, lengths, lengths) // COST_LENGTH,
    }


def plan_lines(study: Study, config: Config) -> list[str]:
    """What `ablate` shows before training a varied study: the cells, and per cell and h the head size,
    parameters and FLOPs per token, the runs' states, and an upper bound of the training compute left."""
    heads = sorted({p.heads for p in study.points})
    seeds = list(dict.fromkeys(p.seed for p in study.points))
    cells = list(dict.fromkeys(p.cell for p in study.points))
    factors = " × ".join(f"{key} ∈ {{{', '.join(values)}}}" for key, values in study.factors.items())
    lines = [
        f"study {study.dir}: {len(cells)} cells ({factors}), each h ∈ {{{', '.join(map(str, heads))}}} × seeds "
        f"{{{', '.join(map(str, seeds))}}} = {len(study.points)} runs; training FLOPs per target token at "
        f"{COST_LENGTH}-token sentences"
    ]
    costs, left = {}, 0.0
    for cell in cells:
        lines.append(f"  {cell_name(cell)}:")
        for h in heads:
            cost = costs[cell, h] = point_cost(_cell_config(config, cell, h))
            states = [study.state(p) for p in study.points if p.cell == cell and p.heads == h]
            shown = ", ".join(f"{states.count(s)} {s}" for s in dict.fromkeys(states))
            lines.append(
                f"    h={h:<3} d_k={cost['d_head']:<4} {cost['parameters']:>12,} parameters "
                f"{cost['flops_per_token'] / 1e6:>9,.1f} MFLOPs/token  {shown}"
            )
            tokens = config.train.max_steps * config.train.max_tokens * config.train.accum_steps
            left += tokens * cost["flops_per_token"] * sum(s in ("pending", "training") for s in states)
    cheapest = min(c["flops_per_token"] for c in costs.values())
    dearest = max(c["flops_per_token"] for c in costs.values())
    lines.append(f"  the dearest point costs {dearest / cheapest:.2f}× the cheapest per token")
    if config.train.max_steps:
        lines.append(
            f"  at most {_flops_text(left)} of training left (train.max_steps × train.max_tokens × "
            f"train.accum_steps target tokens per unfinished run; validation and evaluation not counted)"
        )
    return lines


def _flops_text(flops: float) -> str:
    for unit, scale in (("PFLOPs", 1e15), ("TFLOPs", 1e12), ("GFLOPs", 1e9)):
        if flops >= scale:
            return f"{flops / scale:,.1f} {unit}"
    return f"{flops:,.0f} FLOPs"


def _cell_config(config: Config, cell: Cell, heads: int) -> Config:
    result = copy.deepcopy(config)
    for item in [*(f"{key}={value}" for key, value in cell), f"model.n_heads={heads}"]:
        apply_override(result, item)
    return result


# ----------------------------------------------------------------------------- the report


def is_varied(study_dir: Path) -> bool:
    """A study made with --vary: its record lists factors, or its points live in cell folders."""
    study_dir = Path(study_dir)
    if read_record(study_dir).get("factors"):
        return True
    return study_dir.is_dir() and any(point.cell for point, _ in point_dirs(study_dir))


def study_cells(study_dir: Path) -> list[Cell]:
    """The recorded cells (in grid order), then any other cell folder that holds points."""
    recorded = grid_cells(read_record(study_dir).get("factors") or {})
    found = [point.cell for point, _ in point_dirs(study_dir) if point.cell]
    return [cell for cell in dict.fromkeys([*recorded, *found]) if cell]


def build_varied_report(study_dir: Path, n_samples: int = BOOTSTRAP_SAMPLES) -> dict:
    """Each cell's report (written into its folder), the regime map and the interaction tests."""
    study_dir = Path(study_dir)
    record = read_record(study_dir)
    cells = study_cells(study_dir)
    if not cells:
        raise MhatrainError(f"{study_dir}: its study.yaml lists factors but no cell folder holds grid points")
    base = read_base_config(study_dir)
    cell_reports = {}
    for cell in cells:
        folder = study_dir / cell_name(cell)
        if folder.is_dir() and point_dirs(folder):
            cell_reports[cell] = build_report(folder, n_samples)
    if not cell_reports:
        raise MhatrainError(f"{study_dir}: no cell folder holds grid points yet (run `mhatrain ablate` on it first)")
    heads = sorted({run["heads"] for sub in cell_reports.values() for run in sub["runs"]})
    baseline = BASELINE_HEADS if BASELINE_HEADS in heads else max(heads)
    rows = [row for cell, sub in cell_reports.items() for row in _map_rows(cell, sub, baseline, base)]
    return {
        "study_dir": study_dir.name,
        "factors": record.get("factors") or {},
        "heads": heads,
        "seeds": record.get("seeds") or sorted({run["seed"] for sub in cell_reports.values() for run in sub["runs"]}),
        "baseline_heads": baseline,
        "config": record.get("config"),
        "overrides": record.get("overrides") or [],
        "runs_done": sum(sub["runs_done"] for sub in cell_reports.values()),
        "runs_total": sum(sub["runs_total"] for sub in cell_reports.values()),
        "cells": [
            {
                "cell": dict(cell),
                "name": cell_name(cell),
                "label": label,
                "runs_done": sub["runs_done"],
                "runs_total": sub["runs_total"],
                "conclusion": sub["claims"]["conclusion"],
                "report": f"{cell_name(cell)}/report.md",
            }
            for (cell, sub), label in zip(cell_reports.items(), cell_labels([dict(c) for c in cell_reports]))
        ],
        "regime_map": rows,
        "interaction": interaction(rows, baseline),
        "interaction_method": INTERACTION_METHOD,
        "reference_cell": cell_name(next(iter(cell_reports))),
        "_cell_reports": cell_reports,  # written into the cells' folders, not into report.json
    }


def cell_labels(cells: list[dict[str, str]]) -> list[str]:
    """Short names of cells for the figure and the terminal: the keys whose values differ between the
    cells (every key when they all agree), without their section: "d_model=512, d_ff=2048"."""
    keys = list(dict.fromkeys(key for cell in cells for key in cell))
    differing = [key for key in keys if len({cell.get(key) for cell in cells}) > 1] or keys
    return [", ".join(f"{key.split('.', 1)[-1]}={cell[key]}" for key in differing if key in cell) for cell in cells]


def _map_rows(cell: Cell, sub: dict, baseline: int, base_config: dict) -> list[dict]:
    """Per h of one cell: Δ test BLEU against the baseline over the seeds both have finished."""
    done = {(r["heads"], r["seed"]): r for r in sub["runs"] if r["status"] == "done" and r["test_bleu"] is not None}
    by_heads = {row["heads"]: row for row in sub["by_heads"]}
    rows = []
    for h in sorted({r["heads"] for r in sub["runs"]}):
        runs = [r for r in sub["runs"] if r["heads"] == h]
        seeds = [s for hh, s in done if hh == h and (baseline, s) in done]
        differences = [done[h, s]["test_bleu"] - done[baseline, s]["test_bleu"] for s in seeds]
        parameters = sorted({r["parameters"] for r in runs if r["parameters"] is not None})
        test = (by_heads.get(h) or {}).get("seed_test") or {}  # the cell's own test against h=8
        adjusted_p, verdict = verdict_of(by_heads.get(h) or {})
        if verdict and adjusted_p is None and h != baseline:
            verdict = "not tested (no seed noise measured)"  # one seed per h: the cell's test did not run
        rows.append(
            {
                "cell": cell_name(cell),
                "heads": h,
                "d_head": next((r["d_head"] for r in runs if r["d_head"]), None),
                "parameters": parameters[0] if len(parameters) == 1 else (parameters or None),
                "flops_per_token": _flops(base_config, cell, h),
                "test_bleu": round(statistics.fmean(done[h, s]["test_bleu"] for s in seeds), 4) if seeds else None,
                "seeds": seeds,
                "differences": [round(d, 4) for d in differences],
                "difference": round(statistics.fmean(differences), 4) if differences and h != baseline else None,
                "seed_ci95": list(seed_interval(differences) or []) or None if h != baseline else None,
                "test_ci95": next((test[k] for k in INTERVAL_FIELDS if test.get(k)), None),
                "shared_variance": test.get("shared_sentence_variance"),  # the interaction tests' v_c
                "test_p_adjusted": adjusted_p,
                "verdict": verdict,
            }
        )
    return rows


# The fields of a cell's test against h=8 (comparison.py) that may hold its 95% interval, in order of preference.
INTERVAL_FIELDS = ("ci95", "interval", "bootstrap_ci95")


def _flops(base_config: dict, cell: Cell, heads: int) -> int | None:
    """Training FLOPs per target token of the cell's model with h heads (None without base-config.yaml)."""
    if not base_config:
        return None
    try:
        config = _cell_config(config_from_dict(base_config, "base-config.yaml", check_paths=False), cell, heads)
    except MhatrainError:
        return None
    return point_cost(config)["flops_per_token"]


# ----------------------------------------------------------------------------- writing


MAP_HEADERS = [
    "cell",
    "h",
    "d_k",
    "parameters",
    "train MFLOPs/token",
    "test BLEU",
    "seeds",
    "Δ BLEU vs baseline",
    "95% interval over seeds",
    "95% interval (cell's test)",
    "adjusted p (cell's test)",
    "cell's verdict",
]


def _map_cells(row: dict, baseline: int, labels: dict[str, str]) -> list[str]:
    parameters = row["parameters"]
    return [
        labels.get(row["cell"], row["cell"]),
        str(row["heads"]),
        num(row["d_head"]),
        "varies" if isinstance(parameters, list) else num(parameters),
        num(row["flops_per_token"] / 1e6 if row["flops_per_token"] else None, 1),
        num(row["test_bleu"]),
        ",".join(map(str, row["seeds"])) or "—",
        "baseline" if row["heads"] == baseline else signed(row["difference"]),
        interval(row["seed_ci95"]),
        interval(row["test_ci95"]),
        p_value(row["test_p_adjusted"]),
        row["verdict"] or "—",
    ]


def _pair_cells(pair: dict, labels: dict[str, str]) -> list[str]:
    return [
        str(pair["heads"]),
        labels.get(pair["cell"], pair["cell"]),
        signed(pair["delta"]),
        signed(pair["delta_reference"]),
        signed(pair["difference"]),
        interval(pair.get("ci95")),
        p_value(pair["p"]),
        p_value(pair.get("p_holm")),
        pair.get("verdict") or "—",
    ]


def _labels(report: dict) -> dict[str, str]:
    return {cell["name"]: cell.get("label") or cell["name"] for cell in report["cells"]}


def _interaction_cells(test: dict) -> list[str]:
    return [
        str(test["heads"]),
        str(test["cells"]),
        str(test["differences"]),
        interval(test.get("delta_range")),
        num(test["F"], 3),
        "—" if not test["df"] else f"{test['df'][0]}, {test['df'][1]}",
        p_value(test["p"]),
        p_value(test["p_holm"]),
        test["verdict"],
    ]


def to_markdown(report: dict) -> str:
    baseline = report["baseline_heads"]
    factors = "; ".join(f"{key} ∈ {{{', '.join(map(str, v))}}}" for key, v in report["factors"].items())
    out = [
        f"# Where do extra heads help? {report['study_dir']}",
        "",
        f"Factors: {factors}. Each cell: h ∈ {{{', '.join(map(str, report['heads']))}}} × seeds "
        f"{{{', '.join(map(str, report['seeds']))}}}; {report['runs_done']} of {report['runs_total']} runs done.",
        "",
    ]
    if report.get("config"):
        extra = " ".join(f"--set {o}" for o in report["overrides"])
        out += [f"Config: `{report['config']}`{' ' + extra if extra else ''}.", ""]
    labels = _labels(report)
    reference = labels.get(report.get("reference_cell"), report.get("reference_cell"))
    pairs = [pair for test in report["interaction"] for pair in test.get("against_reference", [])]
    out += [
        f"## Regime map: Δ test BLEU of each h against h={baseline}, per cell",
        "",
        md_table(MAP_HEADERS, [_map_cells(row, baseline, labels) for row in report["regime_map"]]),
        "",
        f"Δ: BLEU(h) − BLEU(h={baseline}), mean over the seeds both have finished (h=1's row: does one head beat "
        f"{baseline}?). Interval over seeds: mean ± t(n−1)·sd/√n of the per-seed differences (training noise). "
        "Cell's test: the interval, adjusted p and verdict of the cell's own test against h=8, the main report's. "
        f"FLOPs: training (6 × forward multiply-accumulates) per target token at {COST_LENGTH}-token sentences. "
        "Figure: regime-map.png; numbers: regime-map.csv. The cells' folders are listed at the end.",
        "",
        "## Does Δ differ between cells? (interaction of h with the factors)",
        "",
        md_table(
            ["h", "cells", "differences", "range of cell Δ", "F", "df", "p", "p Holm", "verdict"],
            [_interaction_cells(test) for test in report["interaction"]],
        ),
        "",
    ]
    if pairs:
        out += [
            f"Each cell against the reference cell ({reference}):",
            "",
            md_table(
                ["h", "cell", "Δ in cell", "Δ in reference", "difference", "95% interval", "p", "p Holm", "verdict"],
                [_pair_cells(pair, labels) for pair in pairs],
            ),
            "",
        ]
    out += [
        f"Method: {report['interaction_method']}",
        "",
        "## Each cell (its own report: tables, tests against h=8, per-length BLEU)",
        "",
    ]
    out += [
        f"- {c.get('label') or c['name']}: [{c['name']}]({c['report']}) ({c['runs_done']}/{c['runs_total']} runs): "
        f"{c['conclusion']}"
        for c in report["cells"]
    ]
    return "\n".join(out) + "\n"


def to_csv(report: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    keys = list(dict.fromkeys(key for cell in report["cells"] for key in cell["cell"]))  # a linked factor's each
    writer.writerow(
        [
            "cell",
            *keys,
            "heads",
            "d_head",
            "parameters",
            "flops_per_token",
            "test_bleu",
            "seeds",
            "diff_to_baseline",
            "seed_ci95_low",
            "seed_ci95_high",
            "test_ci95_low",
            "test_ci95_high",
            "test_p_adjusted",
            "verdict",
        ]
    )
    values = {c["name"]: c["cell"] for c in report["cells"]}
    for row in report["regime_map"]:
        seed_ci, test_ci = row["seed_ci95"] or ["", ""], row["test_ci95"] or ["", ""]
        parameters = row["parameters"] if not isinstance(row["parameters"], list) else ""
        writer.writerow(
            [
                row["cell"],
                *[values.get(row["cell"], {}).get(key, "") for key in keys],
                row["heads"],
                blank(row["d_head"]),
                blank(parameters),
                blank(row["flops_per_token"]),
                blank(row["test_bleu"]),
                " ".join(map(str, row["seeds"])),
                blank(row["difference"]),
                *seed_ci,
                *test_ci,
                blank(row["test_p_adjusted"]),
                blank(row["verdict"]),
            ]
        )
    return buffer.getvalue()


def plot(report: dict, path: Path) -> None:
    """Δ BLEU with its interval for every cell (one row each) and h (one marker each), on one shared axis."""
    baseline = report["baseline_heads"]
    cells = [c["name"] for c in report["cells"]]
    labels = [textwrap.fill(c.get("label") or c["name"], 30) for c in report["cells"]]
    heads = [h for h in report["heads"] if h != baseline]
    lines = max((label.count("\n") + 1 for label in labels), default=1)
    height = 1.6 + max(1, len(cells)) * max(0.45 * max(1, len(heads)) ** 0.5, 0.2 * lines + 0.15)
    fig = Figure(figsize=(9.0, height))
    ax = fig.add_subplot()
    ax.axvline(0.0, color="0.5", linewidth=1)
    for k, h in enumerate(heads):
        offset = (k - (len(heads) - 1) / 2) * (0.6 / max(1, len(heads)))
        rows = {row["cell"]: row for row in report["regime_map"] if row["heads"] == h}
        ys, xs, low, high = [], [], [], []
        for i, cell in enumerate(cells):
            row = rows.get(cell)
            if row is None or row["difference"] is None:
                continue
            ci = row["seed_ci95"] or row["test_ci95"] or [row["difference"]] * 2
            ys.append(i + offset)
            xs.append(row["difference"])
            low.append(row["difference"] - ci[0])
            high.append(ci[1] - row["difference"])
        ax.errorbar(xs, ys, xerr=[low, high], fmt="o", capsize=3, label=f"h={h}")
    ax.set_yticks(range(len(cells)), labels, fontsize=8)
    ax.set_ylim(-0.6, len(cells) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel(f"Δ test BLEU: h − h={baseline} (mean over seeds; 95% interval over seeds, else the cell's test)")
    ax.set_title(f"Regime map: {report['study_dir']} ({report['runs_done']}/{report['runs_total']} runs)")
    if heads:
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    FigureCanvasAgg(fig)
    atomic_write(Path(path), lambda f: fig.savefig(f, format="png", dpi=110), binary=True)


def report_varied_study(study_dir: Path, console: Console, n_samples: int = BOOTSTRAP_SAMPLES) -> dict:
    """`mhatrain report` of a varied study: each cell's report in its folder, then the map at the top."""
    study_dir = Path(study_dir)
    report = build_varied_report(study_dir, n_samples)
    cell_files: dict[str, None] = {}  # the names of the files written in the cells' folders, in order
    cell_reports = report.pop("_cell_reports")
    for cell, sub in cell_reports.items():
        cell_files |= dict.fromkeys(path.name for path in write(sub, study_dir / cell_name(cell)))
    names = ("report.md", "regime-map.csv", "report.json", "regime-map.png")
    top = [study_dir / name for name in names]
    atomic_write_text(top[0], to_markdown(report))
    atomic_write_text(top[1], to_csv(report))
    atomic_write_json(top[2], report)
    plot(report, top[3])
    show(report, console)
    console.print(
        "report: "
        + "  ".join(str(p) for p in top)
        + f"; in the {len(cell_reports)} cells' folders: "
        + "  ".join(cell_files),
        highlight=False,
    )
    return report


def show(report: dict, console: Console) -> None:
    baseline = report["baseline_heads"]
    console.print(
        f"Regime map of {report['study_dir']} ({report['runs_done']} of {report['runs_total']} runs done): "
        f"Δ test BLEU against h={baseline}",
        highlight=False,
    )
    labels = _labels(report)
    width = max(map(len, labels.values()), default=0)
    for row in report["regime_map"]:
        if row["heads"] == baseline:
            continue
        cells = _map_cells(row, baseline, labels)
        label = cells[0]
        console.print(f"  {label:<{width}} h={row['heads']:<3} Δ {cells[7]:>6}  seeds {cells[8]}", highlight=False)
    for test in report["interaction"]:
        p = "—" if test["p"] is None else f"{test['p']:.3f}"
        console.print(f"  interaction, h={test['heads']}: p = {p} ({test['verdict']})", highlight=False)
        for pair in test.get("against_reference", []):
            cells = _pair_cells(pair, labels)
            console.print(
                f"    {cells[1]} against {labels.get(pair['reference'], pair['reference'])}: {cells[4]}, "
                f"adjusted p {cells[7]} ({cells[8]})",
                highlight=False,
            )
    for cell in report["cells"]:
        console.print(f"{labels[cell['name']]}: {cell['conclusion']}", highlight=False)
