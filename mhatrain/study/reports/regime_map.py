"""The regime map of a varied study, written: report.md (the map, the interaction tests, the cells),
regime-map.csv, report.json, regime-map.png (one shared Δ axis) and the lines on the console;
report_varied_study builds it (regimes.py) and writes each cell's own report into its folder.
"""

from __future__ import annotations

import csv
import io
import textwrap
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console

from ...core.files import atomic_write, atomic_write_json, atomic_write_text
from ...core.formatting import blank, fraction, interval, md_table, num, p_value, signed
from ..grid.costs import COST_LENGTH
from ..grid.points import cell_name
from ..stats.significance import BOOTSTRAP_SAMPLES
from .grid_report import write
from .regimes import MAP_FILE, MEASURES, build_varied_report


def _labels(report: dict) -> dict[str, str]:
    return {cell["name"]: cell.get("label") or cell["name"] for cell in report["cells"]}


def _delta(entry: dict, digits: int) -> str:
    """Δ with the cell's test interval (seeds and sentences), else the interval over seeds."""
    if entry["difference"] is None:
        return "—"
    ci = entry["test_ci95"] or entry["seed_ci95"]
    return (
        f"{signed(entry['difference'], digits)} {interval(ci, digits)}" if ci else signed(entry["difference"], digits)
    )


def _pair_of(report: dict, measure: str, row: dict) -> dict | None:
    tests = report["interaction"][measure]
    return next(
        (p for t in tests if t["heads"] == row["heads"] for p in t["against_reference"] if p["cell"] == row["cell"]),
        None,
    )


def _power_text(pair: dict | None) -> str:
    power = (pair or {}).get("power") or {}
    if not power:
        return "—"
    return f"{fraction(power.get('now'))} / {fraction(power.get('design'))}"


def _both(row: dict, report: dict, key: str, digits: int = 0) -> str:
    """A cost of the h's model and of the baseline's in the same cell: "9,571,072 / 17,836,800"."""
    base = next(
        (r for r in report["regime_map"] if r["cell"] == row["cell"] and r["heads"] == report["baseline_heads"]), {}
    )

    def shown(value):
        if isinstance(value, list):
            return "varies"
        return num(value / 1e6, 1) if key == "flops_per_token" and value else num(value)

    return f"{shown(row[key])} / {shown(base.get(key))}"


MAP_HEADERS = [
    "cell",
    "h",
    "seeds (h, h=8)",
    "d_k (h / h=8)",
    "parameters (h / h=8)",
    "train MFLOPs/token (h / h=8)",
    "Δ cross-entropy [95%]",
    "p Holm, verdict (cell's CE test)",
    "Δ BLEU [95%]",
    "p Holm, verdict (cell's BLEU test)",
]


def _map_cells(row: dict, report: dict, labels: dict[str, str]) -> list[str]:
    ce, bleu = row["cross_entropy"], row["bleu"]
    seeds = bleu["seeds"] if len(bleu["seeds"]) >= len(ce["seeds"]) else ce["seeds"]
    return [
        labels.get(row["cell"], row["cell"]),
        str(row["heads"]),
        f"{len(seeds)} ({','.join(map(str, seeds))})" if seeds else "—",
        _both(row, report, "d_head"),
        _both(row, report, "parameters"),
        _both(row, report, "flops_per_token"),
        _delta(ce, 3),
        f"{p_value(ce['test_p_adjusted'])}, {ce['verdict'] or '—'}",
        _delta(bleu, 2),
        f"{p_value(bleu['test_p_adjusted'])}, {bleu['verdict'] or '—'}",
    ]


INTERACTION_HEADERS = [
    "cell",
    "h",
    "measure",
    "Δ in cell",
    "Δ in reference",
    "difference [95%]",
    "p",
    "p Holm",
    "verdict",
    "power now / at design",
]


def _interaction_rows(report: dict, labels: dict[str, str]) -> list[list[str]]:
    out = []
    for measure, spec in report["measures"].items():
        digits = spec["digits"]
        for test in report["interaction"][measure]:
            for pair in test["against_reference"]:
                difference = signed(pair["difference"], digits)
                if pair.get("ci95"):
                    difference += f" {interval(pair['ci95'], digits)}"
                out.append(
                    [
                        labels.get(pair["cell"], pair["cell"]),
                        str(pair["heads"]),
                        spec["label"],
                        signed(pair["delta"], digits),
                        signed(pair["delta_reference"], digits),
                        difference,
                        p_value(pair["p"]),
                        p_value(pair.get("p_holm")),
                        pair.get("verdict") or "—",
                        _power_text(pair),
                    ]
                )
    return out


def _omnibus_rows(report: dict) -> list[list[str]]:
    out = []
    for measure, spec in report["measures"].items():
        for test in report["interaction"][measure]:
            out.append(
                [
                    spec["label"],
                    str(test["heads"]),
                    str(test["cells"]),
                    str(test["differences"]),
                    interval(test.get("delta_range"), spec["digits"]),
                    num(test["F"], 3),
                    "—" if not test["df"] else f"{test['df'][0]}, {test['df'][1]}",
                    p_value(test["p"]),
                    p_value(test["p_holm"]),
                    test["verdict"],
                ]
            )
    return out


def to_markdown(report: dict) -> str:
    """report.md of a varied study: what was run, the map, the interaction tests, then the cells."""
    labels = _labels(report)
    out = [*_heading(report), *_map_section(report, labels), *_interaction_section(report, labels)]
    return "\n".join([*out, *_cells_section(report)]) + "\n"


def _heading(report: dict) -> list[str]:
    factors = "; ".join(f"{key} ∈ {{{', '.join(map(str, v))}}}" for key, v in report["factors"].items())
    out = [
        f"# Where do extra heads help? {report['study_dir']}",
        "",
        f"Factors: {factors}. Each cell: h ∈ {{{', '.join(map(str, report['heads']))}}} × seeds "
        f"{{{', '.join(map(str, report['seeds']))}}}; {report['runs_done']} of {report['runs_total']} runs of the "
        "mapped cells done.",
        "",
    ]
    if report.get("config"):
        extra = " ".join(f"--set {o}" for o in report["overrides"])
        out += [f"Config: `{report['config']}`{' ' + extra if extra else ''}.", ""]
    return out


def _map_section(report: dict, labels: dict[str, str]) -> list[str]:
    baseline = report["baseline_heads"]
    return [
        f"## Regime map: Δ of h against h={baseline} in each cell, cross-entropy (primary) and test BLEU",
        "",
        md_table(
            MAP_HEADERS,
            [_map_cells(row, report, labels) for row in report["regime_map"] if row["heads"] != baseline],
        ),
        "",
        f"Δ: value(h) − value(h={baseline}), mean over the seeds both have tested (h=1's row: does one head beat "
        f"{baseline}?). Cross-entropy: {report['cross_entropy_text']}; lower is better, so a negative Δ favours h. "
        "BLEU: test BLEU (beam search, loss-selected checkpoint); higher is better. [95%]: the interval of the cell's "
        "own test against h=8 (its h × seed-block test, the main report's), else mean ± t(n−1)·sd/√n over seeds. "
        f"FLOPs: training (6 × forward multiply-accumulates) per target token at {COST_LENGTH}-token sentences. "
        "Per-h levels: regime-map.csv; figure: regime-map.png. The cells' folders are listed at the end.",
        "",
    ]


def _interaction_section(report: dict, labels: dict[str, str]) -> list[str]:
    reference = labels.get(report.get("reference_cell"), report.get("reference_cell"))
    ce, bleu = report["measures"]["cross_entropy"], report["measures"]["bleu"]
    out = [
        f"## Does Δ differ from the reference cell ({reference})? Interaction tests, both measures",
        "",
        md_table(INTERACTION_HEADERS, _interaction_rows(report, labels))
        if _interaction_rows(report, labels)
        else "No other cell to compare yet.",
        "",
        f"Power: the chance that the test calls an interaction of {ce['power_effect']} nats ({ce['label']}) or "
        f"{bleu['power_effect']} BLEU (the difference of a cell's Δ from the reference cell's), computed, not "
        "simulated: the difference normal with the variance the test assumes (the measured pooled spread s² and "
        "shared sentence variances v), s² re-estimated from its χ², two-sided at 0.05 / the pairs in the Holm "
        f"family; at the seeds each cell has now, and at {len(report['seeds'])} seeds per h in every cell. A cell "
        "of fewer than two seeds has no spread of its own: it is not tested, against h=8 or against the reference "
        "cell, and only its power at the design is given.",
        "",
        "All cells at once (omnibus F test per h):",
        "",
        md_table(
            ["measure", "h", "cells", "differences", "range of cell Δ", "F", "df", "p", "p Holm", "verdict"],
            _omnibus_rows(report),
        ),
        "",
    ]
    if report.get("tokenizer_notes"):
        out += ["Tokenizers:", "", *[f"- {note}" for note in report["tokenizer_notes"]], ""]
    out += [f"Method: {report['interaction_method']}", ""]
    return out


def _cells_section(report: dict) -> list[str]:
    out = []
    if report.get("left_out_cells"):
        out += [f"## Cells left out of the map (kept as a record; {MAP_FILE})", ""]
        out += [
            f"- {c['label']}: [{c['name']}]({c['report']}) ({c['runs_done']}/{c['runs_total']} runs): {c['reason']}"
            for c in report["left_out_cells"]
        ]
        out += [""]
    out += ["## Each cell (its own report: tables, tests against h=8, per-length BLEU)", ""]
    out += [
        f"- {c.get('label') or c['name']}: [{c['name']}]({c['report']}) ({c['runs_done']}/{c['runs_total']} runs): "
        f"{c['conclusion']}"
        for c in report["cells"]
    ]
    return out


CSV_MEASURE_FIELDS = [
    "source",
    "value",
    "seeds",
    "diff_to_baseline",
    "seed_ci95_low",
    "seed_ci95_high",
    "test_ci95_low",
    "test_ci95_high",
    "test_p_adjusted",
    "verdict",
    "interaction_difference",
    "interaction_p",
    "interaction_p_holm",
    "power_now",
    "power_design",
]


CSV_PREFIX = {"cross_entropy": "ce", "bleu": "bleu"}


def to_csv(report: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    keys = list(dict.fromkeys(key for cell in report["cells"] for key in cell["cell"]))  # a linked factor's each
    measures = list(report.get("measures") or MEASURES)
    writer.writerow(
        [
            "cell",
            *keys,
            "heads",
            "d_head",
            "parameters",
            "flops_per_token",
            *[f"{CSV_PREFIX[m]}_{field}" for m in measures for field in CSV_MEASURE_FIELDS],
        ]
    )
    values = {c["name"]: c["cell"] for c in report["cells"]}
    for row in report["regime_map"]:
        parameters = row["parameters"] if not isinstance(row["parameters"], list) else ""
        measured = []
        for m in measures:
            entry = row[m]
            pair = _pair_of(report, m, row) if report.get("interaction") else None
            power = (pair or {}).get("power") or {}
            seed_ci, test_ci = entry["seed_ci95"] or ["", ""], entry["test_ci95"] or ["", ""]
            measured += [
                blank(entry["source"]),
                blank(entry["value"]),
                " ".join(map(str, entry["seeds"])),
                blank(entry["difference"]),
                *seed_ci,
                *test_ci,
                blank(entry["test_p_adjusted"]),
                blank(entry["verdict"]),
                blank((pair or {}).get("difference")),
                blank((pair or {}).get("p")),
                blank((pair or {}).get("p_holm")),
                blank(power.get("now")),
                blank(power.get("design")),
            ]
        writer.writerow(
            [
                row["cell"],
                *[values.get(row["cell"], {}).get(key, "") for key in keys],
                row["heads"],
                blank(row["d_head"]),
                blank(parameters),
                blank(row["flops_per_token"]),
                *measured,
            ]
        )
    return buffer.getvalue()


def plot(report: dict, path: Path) -> None:
    """Δ of cross-entropy (left, the primary measure) and of test BLEU (right) with the map's intervals, for
    every cell (one row each) and h (one marker each), on one Δ axis per measure."""
    baseline = report["baseline_heads"]
    cells = [c["name"] for c in report["cells"]]
    labels = [textwrap.fill(c.get("label") or c["name"], 30) for c in report["cells"]]
    heads = [h for h in report["heads"] if h != baseline]
    lines = max((label.count("\n") + 1 for label in labels), default=1)
    height = 1.8 + max(1, len(cells)) * max(0.45 * max(1, len(heads)) ** 0.5, 0.2 * lines + 0.15)
    fig = Figure(figsize=(12.0, height))
    axes = fig.subplots(1, len(report["measures"]), sharey=True, squeeze=False)[0]
    for ax, (measure, spec) in zip(axes, report["measures"].items()):
        ax.axvline(0.0, color="0.5", linewidth=1)
        for k, h in enumerate(heads):
            offset = (k - (len(heads) - 1) / 2) * (0.6 / max(1, len(heads)))
            rows = {row["cell"]: row[measure] for row in report["regime_map"] if row["heads"] == h}
            ys, xs, low, high = [], [], [], []
            for i, cell in enumerate(cells):
                entry = rows.get(cell)
                if entry is None or entry["difference"] is None:
                    continue
                ci = entry["test_ci95"] or entry["seed_ci95"] or [entry["difference"]] * 2
                ys.append(i + offset)
                xs.append(entry["difference"])
                low.append(entry["difference"] - ci[0])
                high.append(ci[1] - entry["difference"])
            ax.errorbar(xs, ys, xerr=[low, high], fmt="o", capsize=3, label=f"h={h}")
        split = {"test": "test ", "validation": "validation "}.get(spec["source"], "")
        better = "lower is better" if measure == "cross_entropy" else "higher is better"
        ax.set_xlabel(f"Δ {split if measure == 'cross_entropy' else ''}{spec['label']}: h − h={baseline} ({better})")
        if heads:
            ax.legend(loc="best", fontsize=8)
    axes[0].set_yticks(range(len(cells)), labels, fontsize=8)
    axes[0].set_ylim(-0.6, len(cells) - 0.4)
    axes[0].invert_yaxis()
    fig.suptitle(
        f"Regime map: {report['study_dir']} ({report['runs_done']}/{report['runs_total']} runs; mean over seeds, "
        "95% interval of the cell's test, else over seeds)",
        fontsize=10,
    )
    fig.tight_layout()
    FigureCanvasAgg(fig)
    atomic_write(Path(path), lambda f: fig.savefig(f, format="png", dpi=110), binary=True)


def show(report: dict, console: Console) -> None:
    baseline = report["baseline_heads"]
    source = report.get("cross_entropy_source") or "no"
    console.print(
        f"Regime map of {report['study_dir']} ({report['runs_done']} of {report['runs_total']} runs done): "
        f"Δ against h={baseline}, {source} cross-entropy (primary) and test BLEU",
        highlight=False,
    )
    labels = _labels(report)
    width = max(map(len, labels.values()), default=0)
    for row in report["regime_map"]:
        if row["heads"] == baseline:
            continue
        ce, bleu = row["cross_entropy"], row["bleu"]
        console.print(
            f"  {labels.get(row['cell'], row['cell']):<{width}} h={row['heads']:<3} "
            f"Δ CE {signed(ce['difference'], 3):>6} ({ce['verdict'] or '—'})  "
            f"Δ BLEU {signed(bleu['difference']):>6} ({bleu['verdict'] or '—'})",
            highlight=False,
        )
    for measure, spec in report["measures"].items():
        for test in report["interaction"][measure]:
            p = "—" if test["p"] is None else f"{test['p']:.3f}"
            console.print(
                f"  {spec['label']}, interaction, h={test['heads']}: p = {p} ({test['verdict']})", highlight=False
            )
            for pair in test.get("against_reference", []):
                console.print(
                    f"    {labels.get(pair['cell'], pair['cell'])} against "
                    f"{labels.get(pair['reference'], pair['reference'])}: {signed(pair['difference'], spec['digits'])}, "
                    f"adjusted p {p_value(pair.get('p_holm'))} ({pair.get('verdict') or '—'}); power now / at "
                    f"design {_power_text(pair)}",
                    highlight=False,
                )
    for note in report.get("tokenizer_notes") or []:
        console.print(f"  {note}", highlight=False)
    for cell in report.get("left_out_cells") or []:
        console.print(f"left out of the map: {cell['label']}: {cell['reason']}", highlight=False)
    for cell in report["cells"]:
        console.print(f"{labels[cell['name']]}: {cell['conclusion']}", highlight=False)


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
