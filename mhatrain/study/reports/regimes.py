"""When do extra heads help? A study varied over other settings (`ablate --vary KEY=V1,V2`) and its map.

Every combination of the varied values is a cell (grid/points.py names its folder and points); each cell holds
the whole heads × seeds grid and is reported as a study of its own by grid_report.build_report, so within a
cell every h is tested against h=8 by exactly the test of the main report. Across cells this module
builds (regime_map.py writes it):
  * the regime map: per cell and h, Δ = value(h) − value(h=8) over the seeds both have, for cross-entropy
    (the primary measure) and test BLEU (h=1's row is the question "does one head beat eight here?"),
    with a 95% interval over seeds and the interval, adjusted p and verdict of the cell's own test
    against h=8, and what the point costs (grid/costs.py);
  * an interaction test per h and measure: does Δ differ between cells (stats/interaction.py).
The baseline is h=8 (comparison.BASELINE_HEADS); in a grid without 8 it is the largest h, and the cells'
own tests (against h=8) are then absent.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import yaml

from ...core import provenance
from ...core.errors import MhatrainError
from ..grid.costs import cell_flops
from ..grid.directory import point_dirs, read_base_config, read_record, study_cells
from ..grid.points import Cell, cell_labels, cell_name
from ..stats.comparison import BASELINE_HEADS, verdict_of
from ..stats.interaction import METHOD as INTERACTION_METHOD
from ..stats.interaction import interaction
from ..stats.significance import BOOTSTRAP_SAMPLES, seed_interval
from .grid_report import build_report


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
    cell_reports = _cell_reports(study_dir, n_samples)
    reasons = left_out_cells(study_dir)
    mapped = _mapped_cells(study_dir, cell_reports, reasons)
    base = read_base_config(study_dir)
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
        "tokenizer_notes": [_tokenizer_note(labels[name], tokenizers[name], tokenizers[reference]) for name in refused],
        "regime_map": rows,
        "interaction": _interaction_tests(rows, refused, baseline, len(seeds)),
        "interaction_method": INTERACTION_METHOD,
        "reference_cell": reference,
        "_cell_reports": cell_reports,  # written into the cells' folders, not into report.json
    }


def _cell_reports(study_dir: Path, n_samples: int) -> dict[Cell, dict]:
    """The report of every cell whose folder holds grid points (grid_report.build_report)."""
    cells = study_cells(study_dir)
    if not cells:
        raise MhatrainError(f"{study_dir}: its study.yaml lists factors but no cell folder holds grid points")
    cell_reports = {}
    for cell in cells:
        folder = study_dir / cell_name(cell)
        if folder.is_dir() and point_dirs(folder):
            cell_reports[cell] = build_report(folder, n_samples)
    if not cell_reports:
        raise MhatrainError(f"{study_dir}: no cell folder holds grid points yet (run `mhatrain ablate` on it first)")
    return cell_reports


def _mapped_cells(study_dir: Path, cell_reports: dict[Cell, dict], reasons: dict[str, str]) -> dict[Cell, dict]:
    """The cells of the map: all but those regime-map.yaml leaves out (each of which must exist)."""
    unknown = sorted(set(reasons) - {cell_name(c) for c in cell_reports})
    if unknown:
        raise MhatrainError(f"{study_dir / MAP_FILE}: no cell folder with points named {', '.join(unknown)}")
    mapped = {cell: sub for cell, sub in cell_reports.items() if cell_name(cell) not in reasons}
    if not mapped:
        raise MhatrainError(f"{study_dir / MAP_FILE} leaves every cell out of the map")
    return mapped


def _interaction_tests(rows: list[dict], refused: list[str], baseline: int, design_seeds: int) -> dict:
    """Per measure, the interaction tests of every h across the mapped cells; a cell on another tokenizer
    is left out of the cross-entropy tests."""
    return {
        measure: interaction(
            [
                {"cell": row["cell"], "heads": row["heads"], **row[measure]}
                for row in rows
                if not (measure == "cross_entropy" and row["cell"] in refused)
            ],
            baseline,
            effect=spec["power_effect"],
            design_seeds=design_seeds,
        )
        for measure, spec in MEASURES.items()
    }


def _tokenizer_note(label: str, found: list[str], reference: list[str]) -> str:
    return (
        f"{label}: its runs' tokenizer ({_hashes(found)}) is not the reference cell's "
        f"({_hashes(reference)}): per-token cross-entropy is not compared across tokenizers, so the "
        "cell is left out of the cross-entropy interaction tests (its Δ within the cell, on one tokenizer, and its "
        "BLEU, scored on detokenized text, are still compared)"
    )


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
                "flops_per_token": cell_flops(base_config, cell, h),
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
