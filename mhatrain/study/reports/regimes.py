"""When do extra heads help? A study varied over other settings (`ablate --vary KEY=V1,V2`) and its map.

Every combination of the varied values is a cell (grid/points.py names its folder and points); each cell holds
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
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console

from ...core import provenance
from ...core.config import Config, apply_override, config_from_dict
from ...core.errors import MhatrainError
from ...core.files import atomic_write, atomic_write_json, atomic_write_text
from ...core.formatting import blank, fraction, interval, md_table, num, p_value, signed
from ...data.tokens import PAD
from ...model.flops import forward_macs
from ...model.sizes import head_size
from ...model.transformer import build_model, count_parameters
from ..grid.directory import Study, point_dirs, read_base_config, read_record, study_cells
from ..grid.points import Cell, cell_labels, cell_name
from ..stats.comparison import BASELINE_HEADS, verdict_of
from ..stats.interaction import METHOD as INTERACTION_METHOD
from ..stats.interaction import interaction
from ..stats.significance import BOOTSTRAP_SAMPLES, seed_interval
from .grid_report import build_report, write

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
        parameters = count_parameters(build_model(m, vocab, PAD))
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


MAP_FILE = "regime-map.yaml"  # optional, beside study.yaml: `left_out: {CELL FOLDER: reason}`

# The map's two measures, the primary first (docs/ablation.md, "The primary outcome"). power_effect: the
# interaction whose power the report states (for cross-entropy, about the base cell's h=1 − h=8 gap).
MEASURES = {
    "cross_entropy": {"label": "cross-entropy", "unit": "nats/token", "digits": 3, "power_effect": 0.03},
    "bleu": {"label": "test BLEU", "unit": "BLEU", "digits": 2, "power_effect": 1.5},
}
CROSS_ENTROPY_SOURCES = {
    "test": "test cross-entropy (nats per reference token) from each run's per-sentence values; each cell's shared "
    "sentence variance v from its own test against h=8",
    "validation": "validation cross-entropy (nats per reference token) at the evaluated checkpoint (metrics.jsonl): "
    "not every run wrote per-sentence test values, so no cell's shared sentence variance is known; v = 0 in every "
    "cell (not included): the cross-entropy tests cover seed noise on the validation sentences only",
}


def left_out_cells(study_dir: Path) -> dict[str, str]:
    """The cells the study keeps as a record but leaves out of its map, with the reason (MAP_FILE)."""
    path = Path(study_dir) / MAP_FILE
    if not path.is_file():
        return {}
    try:
        left_out = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("left_out") or {}
    except (yaml.YAMLError, AttributeError) as exc:
        raise MhatrainError(f"{path}: expected `left_out: {{CELL FOLDER: reason}}` ({exc})") from None
    if not isinstance(left_out, dict):
        raise MhatrainError(f"{path}: expected `left_out: {{CELL FOLDER: reason}}`")
    return {str(name): str(reason) for name, reason in left_out.items()}


def build_varied_report(study_dir: Path, n_samples: int = BOOTSTRAP_SAMPLES) -> dict:
    """Each cell's report (written into its folder), the regime map and the interaction tests, on
    cross-entropy and on test BLEU."""
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
    reasons = left_out_cells(study_dir)
    unknown = sorted(set(reasons) - {cell_name(c) for c in cell_reports})
    if unknown:
        raise MhatrainError(f"{study_dir / MAP_FILE}: no cell folder with points named {', '.join(unknown)}")
    mapped = {cell: sub for cell, sub in cell_reports.items() if cell_name(cell) not in reasons}
    if not mapped:
        raise MhatrainError(f"{study_dir / MAP_FILE} leaves every cell out of the map")
    heads = sorted({run["heads"] for sub in mapped.values() for run in sub["runs"]})
    baseline = BASELINE_HEADS if BASELINE_HEADS in heads else max(heads)
    source = _cross_entropy_source(mapped.values())
    tokenizers = {cell_name(c): _tokenizers(study_dir / cell_name(c), sub) for c, sub in mapped.items()}
    rows = [row for cell, sub in mapped.items() for row in _map_rows(cell, sub, baseline, base, source)]
    seeds = record.get("seeds") or sorted({run["seed"] for sub in cell_reports.values() for run in sub["runs"]})
    reference = cell_name(next(iter(mapped)))
    refused = _other_tokenizers(tokenizers, reference)
    labels = dict(zip([cell_name(c) for c in mapped], cell_labels([dict(c) for c in mapped])))
    all_labels = dict(zip([cell_name(c) for c in cell_reports], cell_labels([dict(c) for c in cell_reports])))
    tests = {
        measure: interaction(
            [
                {"cell": row["cell"], "heads": row["heads"], **row[measure]}
                for row in rows
                if not (measure == "cross_entropy" and row["cell"] in refused)
            ],
            baseline,
            effect=spec["power_effect"],
            design_seeds=len(seeds),
        )
        for measure, spec in MEASURES.items()
    }
    return {
        "study_dir": study_dir.name,
        "factors": record.get("factors") or {},
        "heads": heads,
        "seeds": seeds,
        "baseline_heads": baseline,
        "config": record.get("config"),
        "overrides": record.get("overrides") or [],
        "runs_done": sum(sub["runs_done"] for sub in mapped.values()),
        "runs_total": sum(sub["runs_total"] for sub in mapped.values()),
        "measures": {m: {**spec, "source": source if m == "cross_entropy" else "test"} for m, spec in MEASURES.items()},
        "cross_entropy_source": source,
        "cross_entropy_text": CROSS_ENTROPY_SOURCES.get(source, "no cross-entropy recorded for every tested run"),
        "cells": [
            {
                **_cell_entry(cell, sub, labels),
                "tokenizers": tokenizers[cell_name(cell)],
                "conclusion": sub["claims"]["conclusion"],
            }
            for cell, sub in mapped.items()
        ],
        "left_out_cells": [
            {**_cell_entry(cell, sub, all_labels), "reason": reasons[cell_name(cell)]}
            for cell, sub in cell_reports.items()
            if cell_name(cell) in reasons
        ],
        "tokenizer_notes": [
            f"{labels[name]}: its runs' tokenizer ({_hashes(tokenizers[name])}) is not the reference cell's "
            f"({_hashes(tokenizers[reference])}): per-token cross-entropy is not compared across tokenizers, so the "
            "cell is left out of the cross-entropy interaction tests (its Δ within the cell, on one tokenizer, and its "
            "BLEU, scored on detokenized text, are still compared)"
            for name in refused
        ],
        "regime_map": rows,
        "interaction": tests,
        "interaction_method": INTERACTION_METHOD,
        "reference_cell": reference,
        "_cell_reports": cell_reports,  # written into the cells' folders, not into report.json
    }


def _cell_entry(cell: Cell, sub: dict, labels: dict[str, str]) -> dict:
    """What the varied report says of every cell, in the map or left out of it: its name, label, runs
    and report."""
    return {
        "cell": dict(cell),
        "name": cell_name(cell),
        "label": labels[cell_name(cell)],
        "runs_done": sub["runs_done"],
        "runs_total": sub["runs_total"],
        "report": f"{cell_name(cell)}/report.md",
    }


def _cross_entropy_source(subs) -> str | None:
    """One split for every cell's cross-entropy: the test set where every cell's own test used it (every
    tested run wrote per-sentence values), else the validation set where every tested run has it."""
    sources = [(sub["significance"].get("cross_entropy") or {}).get("source") for sub in subs]
    if sources and all(s == "test" for s in sources):
        return "test"
    tested = [run for sub in subs for run in sub["runs"] if run["tested"]]
    if tested and all(run["valid_nll"] is not None for run in tested):
        return "validation"
    return None


def _tokenizers(folder: Path, sub: dict) -> list[str]:
    """The SHA-256 of the tokenizer(s) that the cell's tested runs trained with (their provenance)."""
    found = {
        (session.get("tokenizer") or {}).get("sha256")
        for run in sub["runs"]
        if run["tested"]
        for session in provenance.read_sessions(folder / run["run_dir"])
    }
    return sorted(h for h in found if h)


def _other_tokenizers(tokenizers: dict[str, list[str]], reference: str) -> list[str]:
    """The cells whose per-token values are not on the reference cell's tokens: trained with another
    tokenizer, or with more than one. A cell or reference without a recorded tokenizer is not refused."""
    ref = tokenizers.get(reference) or []
    return [
        name
        for name, found in tokenizers.items()
        if name != reference and found and ref and (found != ref or len(found) > 1)
    ]


def _hashes(found: list[str]) -> str:
    return ", ".join(h[:12] for h in found) or "unknown"


def _map_rows(cell: Cell, sub: dict, baseline: int, base_config: dict, source: str | None) -> list[dict]:
    """Per h of one cell: what the model costs, then Δ against the baseline on each measure over the
    seeds both have tested, and the cell's own test of it."""
    rows = []
    for h in sorted({r["heads"] for r in sub["runs"]}):
        runs = [r for r in sub["runs"] if r["heads"] == h]
        parameters = sorted({r["parameters"] for r in runs if r["parameters"] is not None})
        rows.append(
            {
                "cell": cell_name(cell),
                "heads": h,
                "d_head": next((r["d_head"] for r in runs if r["d_head"]), None),
                "parameters": parameters[0] if len(parameters) == 1 else (parameters or None),
                "flops_per_token": _flops(base_config, cell, h),
                "cross_entropy": _measure_row(sub, h, baseline, "cross_entropy", source),
                "bleu": _measure_row(sub, h, baseline, "bleu", source),
            }
        )
    return rows


def _measure_row(sub: dict, h: int, baseline: int, measure: str, source: str | None) -> dict:
    """One measure of one (cell, h): its mean level, the per-seed differences to the baseline over the
    seeds both have tested, their mean Δ and interval over seeds, and the cell's own test of Δ (its
    interval, Holm-adjusted p, verdict and the shared sentence variance v that the interaction tests add)."""
    if measure == "bleu":
        metric = "test_bleu"
        by_heads = next((r for r in sub["by_heads"] if r["heads"] == h), None) or {}
        test = by_heads.get("seed_test") or {}
    else:
        metric = {"test": "test_nll", "validation": "valid_nll"}.get(source)
        entry = sub["significance"].get("cross_entropy") or {}
        own = entry.get("source") == source  # the cell's own test is on the split the map uses
        test = next((t for t in entry.get("seed_level") or [] if t["heads"] == h), None) if own else None
        test = test or {}
    values = (
        {(r["heads"], r["seed"]): r[metric] for r in sub["runs"] if r["tested"] and r[metric] is not None}
        if metric
        else {}
    )
    seeds = [s for hh, s in values if hh == h and (baseline, s) in values]
    differences = [values[h, s] - values[baseline, s] for s in seeds]
    adjusted, verdict = verdict_of(by_heads) if measure == "bleu" else (test.get("p_adjusted"), test.get("verdict"))
    if verdict and adjusted is None and h != baseline:
        verdict = "not tested (no seed noise measured)"  # one seed per h: the cell's test did not run
    if measure == "cross_entropy" and source == "validation":
        shared = 0.0  # no per-sentence values: the shared sentence term is not included (CROSS_ENTROPY_SOURCES)
    else:
        shared = test.get("shared_sentence_variance")
    return {
        "source": source if measure == "cross_entropy" else "test",
        "value": round(statistics.fmean(values[h, s] for s in seeds), 4) if seeds else None,
        "seeds": seeds,
        "differences": [round(d, 4) for d in differences],
        "difference": round(statistics.fmean(differences), 4) if differences and h != baseline else None,
        "seed_ci95": list(seed_interval(differences) or []) or None if h != baseline else None,
        "test_ci95": test.get("ci95"),
        "shared_variance": shared,  # the interaction tests' v_c
        "test_p_adjusted": adjusted,
        "verdict": verdict,
    }


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
    baseline = report["baseline_heads"]
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
    labels = _labels(report)
    reference = labels.get(report.get("reference_cell"), report.get("reference_cell"))
    ce, bleu = report["measures"]["cross_entropy"], report["measures"]["bleu"]
    out += [
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
    return "\n".join(out) + "\n"


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
