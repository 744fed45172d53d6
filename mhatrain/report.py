"""The head-count study's report: statistics per h over seeds, a test of each h against h=8 over seeds
and test sentences (mhatrain.significance), and the paper's Table 3 (A) and the explainer article's
claim beside our numbers.

Every number is read from the run directories, so a report works on a partial study and on run
directories that a cluster filled by running the commands of `mhatrain ablate --dry-run`:
    config.yaml                     h (model.n_heads), d_model, decode.beam, train.precision
    provenance.json                 the device that trained the run (GPU, or CPU model)
    train_summary.json              parameters, updates, training time, target tokens/s
    metrics.jsonl                   validation perplexity at the update of the best checkpoint, and the
                                    update with the lowest validation loss (the study's measure: MEASURE)
    eval/valid.beamK.json           validation BLEU (whole validation set, beam K = decode.beam)
    eval/test.beamK.json, .hyp.txt  test BLEU and chrF; the hypotheses feed the bootstrap
Outputs, next to the runs: report.md, report.csv (one row per h), report-runs.csv (one row per
run), report.json (everything) and report.png.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from . import provenance
from .checkpoint import CONFIG_FILE, METRICS_FILE, eval_path, read_eval, read_summary
from .config import head_size
from .curves import group_by_heads, read_curve, study_runs
from .errors import MhatrainError
from .io import atomic_write_json, atomic_write_text, portable_text, read_json, read_jsonl
from .lengths import length_analysis
from .lengths import to_markdown as lengths_markdown
from .lengths import write_csv as write_lengths_csv
from .significance import BOOTSTRAP_SAMPLES, seed_interval
from .study import (
    EVAL_SPLITS,
    STUDY_FILE,
    Point,
    code_name,
    differing_settings,
    point_dirs,
    read_base_config,
    read_record,
    read_yaml,
    run_state,
)

BASELINE_HEADS = 8

PAPER_SOURCE = (
    'Vaswani et al. 2017, "Attention Is All You Need", Table 3 rows (A): WMT14 English→German, '
    "newstest2013 (dev), base model (N=6, d_model=512), beam 4, α=0.6; PPL per word-piece"
)
PAPER_TABLE_3A = {  # h: d_k = d_v, dev perplexity, dev BLEU
    1: {"d_k": 512, "ppl": 5.29, "bleu": 24.9},
    4: {"d_k": 128, "ppl": 5.00, "bleu": 25.5},
    8: {"d_k": 64, "ppl": 4.92, "bleu": 25.8},
    16: {"d_k": 32, "ppl": 4.91, "bleu": 25.8},
    32: {"d_k": 16, "ppl": 5.01, "bleu": 25.4},
}
ARTICLE_CLAIM = {
    "text": "8 heads beat 1 head by 2.3 BLEU",
    "h8_minus_h1_bleu": 2.3,
    "source": "the explainer article the project starts from (a claim to check, not to trust)",
}

METRICS = ("valid_ppl", "valid_bleu", "test_bleu", "test_chrf", "train_seconds", "tokens_per_s")


@dataclass
class RunRecord:
    """What one grid point's run directory says, as far as it got."""

    name: str
    heads: int
    seed: int
    run_dir: str  # relative to the study directory
    status: str = "pending"  # one of study.STATES: pending | training | evaluating | done
    d_head: int | None = None
    parameters: int | None = None
    updates: int | None = None  # the update of the evaluated checkpoint (while training: the last validated)
    trained_updates: int | None = None  # updates trained in all
    valid_ppl: float | None = None
    valid_bleu: float | None = None
    test_bleu: float | None = None
    test_chrf: float | None = None
    train_seconds: float | None = None
    tokens_per_s: float | None = None
    beam: int | None = None
    bleu_signature: str | None = None
    test_hypotheses: str | None = None  # relative to the study directory
    loss_selected_update: int | None = None  # the validation with the lowest validation loss (metrics.jsonl)
    precision: str | None = None  # train.precision of config.yaml
    device: str | None = None  # what trained it, from provenance.json: the GPU, or the CPU model
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- gathering


def read_run(point: Point, run_dir: Path) -> RunRecord:
    record = RunRecord(point.name, point.heads, point.seed, point.name)
    config = read_yaml(run_dir / CONFIG_FILE)
    if config is None:
        record.status = run_state(run_dir, None)
        return record
    model, decode = config.get("model") or {}, config.get("decode") or {}
    if model.get("n_heads") not in (None, point.heads):
        record.notes.append(f"config.yaml has n_heads={model.get('n_heads')}, not {point.heads} as its name says")
    if model.get("d_model"):
        record.d_head = head_size(model["d_model"], point.heads, model.get("d_head"))
    record.beam = decode.get("beam")
    record.precision = (config.get("train") or {}).get("precision")
    record.device = _training_device(run_dir)
    record.status = run_state(run_dir, record.beam)
    summary = read_summary(run_dir)
    valid_records = [r for r in read_jsonl(run_dir / METRICS_FILE) if r.get("kind") == "valid"]
    record.loss_selected_update = loss_selected_update(valid_records)
    if summary is None:  # laid out by `ablate` (config.yaml only), or training
        record.updates = valid_records[-1]["step"] if valid_records else None
        return record
    record.parameters, record.trained_updates = summary.get("parameters"), summary.get("updates")
    record.updates = summary.get("best_step")  # eval scores best.pt
    record.train_seconds, record.tokens_per_s = summary.get("train_seconds"), summary.get("tokens_per_s")
    at_best = [r for r in valid_records if r.get("step") == summary.get("best_step")]
    if at_best:  # the checkpoint that eval scores is best.pt
        record.valid_ppl = at_best[-1].get("valid_ppl")
    valid = read_eval(run_dir, "valid", record.beam)
    test = read_eval(run_dir, "test", record.beam)
    if valid is not None:
        record.valid_bleu = valid.get("bleu")
    if test is not None:
        record.test_bleu, record.test_chrf = test.get("bleu"), test.get("chrf")
        record.bleu_signature = test.get("bleu_signature")
        if record.parameters is None:
            record.parameters = test.get("parameters")
        if test.get("update") is not None:
            record.updates = test["update"]
        hyps = eval_path(Path(point.name), "test", record.beam, suffix=".hyp.txt")
        record.test_hypotheses = hyps.as_posix() if (run_dir.parent / hyps).is_file() else None
    return record


MEASURE = {
    "name": "loss-selected checkpoint",
    "text": "test BLEU of the checkpoint with the lowest validation loss (train.early_stop_metric: loss; the last "
    "checkpoint at the fixed budget whenever the loss still falls). A checkpoint chosen by the noisy greedy "
    "validation BLEU can be picked early by chance and biases a comparison; the validation loss ranks "
    "checkpoints smoothly. Points whose evaluated checkpoint is another one are left out of the tests.",
}


def loss_selected_update(valid_records: list[dict]) -> int | None:
    """The update of the first validation with the lowest validation loss (what early_stop_metric=loss
    keeps as best.pt); None without validations."""
    scored = [r for r in valid_records if isinstance(r.get("valid_loss"), (int, float)) and r.get("step") is not None]
    return min(scored, key=lambda r: (r["valid_loss"], r["step"]))["step"] if scored else None


def measured_as_chosen(run: RunRecord) -> bool:
    """Whether the run's evaluated checkpoint is the loss-selected one (the study's measure, MEASURE)."""
    return run.updates is not None and run.updates == run.loss_selected_update


def _training_device(run_dir: Path) -> str | None:
    """The device of the run's training sessions: the GPU's name, or the CPU model ('+'-joined if they differ)."""
    found = []
    for entry in provenance.read_sessions(run_dir):
        env = entry.get("environment") or {}
        name = env.get("device_name") if env.get("device") not in (None, "cpu") else env.get("cpu") or "cpu"
        if name and name not in found:
            found.append(name)
    return " + ".join(found) if found else None


def factor_of(run: RunRecord) -> str:
    """Precision and device of a run, as one label ('bf16 · AMD EPYC')."""
    return f"{run.precision or 'precision unknown'} · {run.device or 'device unknown'}"


def gather(study_dir: Path) -> tuple[dict, list[RunRecord]]:
    """The study's grid (recorded, plus any run directories found) and a record for every point."""
    study_dir = Path(study_dir)
    if not study_dir.is_dir():
        raise MhatrainError(f"study directory not found: {study_dir}")
    recorded = read_record(study_dir)
    points = {Point(h, s) for h in recorded.get("heads", []) for s in recorded.get("seeds", [])}
    points |= {point for point, _ in point_dirs(study_dir)}
    if not points:
        raise MhatrainError(
            f"{study_dir} holds no study: no {STUDY_FILE} and no h<H>-seed<S> run directories "
            f"(make one with `mhatrain ablate CONFIG --out {study_dir}`)"
        )
    seeds_order = list(dict.fromkeys([*recorded.get("seeds", []), *sorted({p.seed for p in points})]))
    ordered = sorted(points, key=lambda p: (p.heads, seeds_order.index(p.seed)))
    runs = [read_run(p, study_dir / p.name) for p in ordered]
    base = read_base_config(study_dir)
    grid = {
        "heads": sorted({p.heads for p in points}),
        "seeds": seeds_order,
        "d_model": (base.get("model") or {}).get("d_model"),
        "d_head": (base.get("model") or {}).get("d_head"),  # set: a head size independent of h
        "config": portable_text(recorded["config"], Path.cwd()) if recorded.get("config") else None,
        "overrides": recorded.get("overrides", []),
        "code": recorded.get("code") or [],
    }
    if not grid["code"]:  # run directories alone (no study.yaml): the code their provenance records
        grid["code"] = _recorded_code([study_dir / p.name for p in ordered])
        grid["code_from_runs"] = bool(grid["code"])
    if grid["d_model"] is None:
        grid["d_model"] = next((r.d_head * r.heads for r in runs if r.d_head), None)
    for run in runs:
        if run.d_head is None and grid["d_model"]:
            run.d_head = head_size(grid["d_model"], run.heads)
    return grid, runs


# ----------------------------------------------------------------------------- statistics


def describe(values: dict[int, float]) -> dict:
    """Mean, sample standard deviation (None for one seed) and the values per seed."""
    numbers = [v for v in values.values() if v is not None]
    return {
        "mean": round(statistics.fmean(numbers), 4) if numbers else None,
        "std": round(statistics.stdev(numbers), 4) if len(numbers) >= 2 else None,
        "n": len(numbers),
        "per_seed": {str(seed): v for seed, v in values.items()},
    }


def _test_references(study_dir: Path, runs: list[RunRecord]) -> tuple[list[str] | None, str]:
    from .config import load_config
    from .data import load_split, split_name

    source = next((r for r in runs if r.status == "done" and r.heads == BASELINE_HEADS), None)
    try:
        config = load_config(study_dir / source.run_dir / CONFIG_FILE, check_paths=False)
        corpus = load_split(config.data, split_name(config, "test"))
    except MhatrainError as exc:
        return None, f"test references unavailable ({exc}): significance tests skipped"
    return corpus.tgt, ""


LEVEL = 0.05  # the verdict's significance level (Holm-adjusted p)

SIGNIFICANCE_METHOD = {
    "verdict_test": "h × seed-block test of each h against h=8 on the test set: corpus BLEU of every trained system = "
    "effect of h + effect of seed + residual, fitted by least squares; the variance of Δ is the residual variance "
    "pooled over every h (seed noise and the test-sentence noise particular to each trained model) plus the "
    "test-sentence noise shared by the seeds of each h (covariance between different seeds' Δ over resampled "
    "test sets); two-sided t-test with the residual degrees of freedom (analytic p, no resampling floor)",
    "correction": "Holm–Bonferroni over the comparisons against h=8 (raw and adjusted p reported)",
    "verdict": f"'better' or 'worse' only where the Holm-adjusted p of the h × seed-block test is < {LEVEL}; "
    "otherwise 'no detectable difference' (always so with one seed per h: no residual degrees of freedom)",
    "trend": "slope of BLEU against log2 h (BLEU per doubling of h): the least-squares line through the h effects "
    "of the same model, with the same noise terms; two-sided, not part of the Holm family",
    "per_seed": "paired bootstrap over test sentences, two-sided and centred: each h against h=8 of the same seed; "
    "covers test-sentence noise only (whether those two trained models differ, not whether the h do); "
    "Holm–Bonferroni over the h of each seed; not used by the verdict",
    "calibration": "simulated null studies with seed and sentence noise of the observed size (mhatrain/calibration.py, "
    "scripts/calibrate.py, docs/ablation.md): the verdict's false-positive rate stays below 0.05",
}


def significance(study_dir: Path, runs: list[RunRecord], n_samples: int = BOOTSTRAP_SAMPLES) -> tuple[dict, list[str]]:
    """Test each h against h=8 on the test set over seeds and test sentences (h × seed-block test,
    Holm-adjusted), the trend against log2 h, and each seed on its own (paired bootstrap)."""
    from . import significance as S

    result = {
        "method": SIGNIFICANCE_METHOD,
        "measure": MEASURE["name"],
        "samples": n_samples,  # of the per-seed bootstrap
        "sentence_samples": S.SENTENCE_SAMPLES,  # behind the verdict's shared sentence variance
        "bootstrap_seed": S.BOOTSTRAP_SEED,
        "per_seed": [],
        "seed_level": [],
        "trend": None,
        "left_out": [],
    }
    finished = [r for r in runs if r.status == "done" and r.test_hypotheses]
    left_out = [r for r in finished if not measured_as_chosen(r)]
    notes = []
    if left_out:
        result["left_out"] = [r.name for r in left_out]
        notes.append(
            "left out of the tests, their evaluated checkpoint not the loss-selected one (the study's measure): "
            + ", ".join(
                f"{r.name} (evaluated update {_num(r.updates)}, lowest validation loss at "
                f"{_num(r.loss_selected_update)})"
                for r in left_out
            )
        )
    done = {(r.heads, r.seed): r for r in finished if measured_as_chosen(r)}
    if not any(h == BASELINE_HEADS for h, _ in done) or all(h == BASELINE_HEADS for h, _ in done):
        return result, notes
    references, problem = _test_references(study_dir, runs)
    if references is None:
        return result, [*notes, problem]
    stats = {}
    for key, run in done.items():
        hyps = _lines(study_dir / run.test_hypotheses)
        if len(hyps) != len(references):
            notes.append(
                f"{run.name}: {len(hyps)} test hypotheses for {len(references)} references: left out of "
                f"the significance tests"
            )
            continue
        stats[key] = S.sentence_statistics(hyps, references)
    result["per_seed"] = _per_seed_tests(S, stats, done, S.resample_indices(len(references), n_samples))
    cells = sorted(stats)
    if not any(h == BASELINE_HEADS for h, _ in cells) or all(h == BASELINE_HEADS for h, _ in cells):
        return result, notes
    stacked = np.stack([stats[c] for c in cells])
    bleu = S.bleu_from_sums(stacked.sum(axis=1))
    tests = S.head_count_tests(
        cells, bleu, S.resampled_bleus(stacked, S.resample_counts(len(references), S.SENTENCE_SAMPLES)), BASELINE_HEADS
    )
    factors = {h: _factor_counts([done[c] for c in cells if c[0] == h]) for h in {h for h, _ in cells}}
    for h, test in tests.against_baseline.items():
        seeds = sorted(s for g, s in cells if g == h)
        level = {
            "heads": h,
            "seeds": seeds,
            "baseline_seeds": sorted(s for g, s in cells if g == BASELINE_HEADS),
            "mean_difference": None if test is None else round(test.estimate, 4),
            "ci95": None if test is None else [round(v, 4) for v in test.interval],
            "std_error": None if test is None else round(test.std_error, 4),
            "df": tests.df,
            "p_value": None if test is None else round(test.p_value, 4),
            "p_adjusted": None if tests.adjusted[h] is None else round(tests.adjusted[h], 4),
            "model_variance": None if test is None else round(test.model_variance, 4),
            "shared_sentence_variance": None if test is None else round(test.shared_variance, 4),
            "verdict": S.verdict(test, tests.adjusted[h], LEVEL),
            "factors": factors[h],
            "baseline_factors": factors[BASELINE_HEADS],
        }
        if test is None:  # one seed per h: no residual to test against; Δ is still the paired difference
            pairs = [
                bleu[cells.index((h, s))] - bleu[cells.index((BASELINE_HEADS, s))]
                for s in seeds
                if (BASELINE_HEADS, s) in cells
            ]
            level["mean_difference"] = round(float(np.mean(pairs)), 4) if pairs else None
        counts = f"h={h}: {_factor_text(factors[h])}; h={BASELINE_HEADS}: {_factor_text(factors[BASELINE_HEADS])}"
        if set(factors[h]) != set(factors[BASELINE_HEADS]):
            level["factor_note"] = f"precision · device differ between the two h ({counts}): Δ may mix h with them"
        elif len(factors[h]) > 1:
            level["factor_note"] = f"precision · device vary within both h ({counts}): compare their shares"
        result["seed_level"].append(level)
    if tests.trend is not None:
        result["trend"] = {
            "heads": sorted({h for h, _ in cells}),
            "slope_per_doubling": round(tests.trend.estimate, 4),
            "ci95": [round(v, 4) for v in tests.trend.interval],
            "std_error": round(tests.trend.std_error, 4),
            "df": tests.trend.df,
            "p_value": round(tests.trend.p_value, 6),
        }
    result["residual_sd"] = None if tests.residual_sd is None else round(tests.residual_sd, 4)
    result["df"] = tests.df
    return result, notes


def _per_seed_tests(S, stats: dict, done: dict, indices) -> list[dict]:
    """Each h against h=8 of the same seed (paired bootstrap, sentence noise only), Holm within the seed."""
    out = []
    for seed in sorted(s for h, s in stats if h == BASELINE_HEADS):
        tests = []
        for h in sorted({h for h, _ in stats if h != BASELINE_HEADS}):
            if (h, seed) in stats:
                test = S.paired_bootstrap([stats[h, seed]], [stats[BASELINE_HEADS, seed]], indices)
                tests.append(
                    {
                        "heads": h,
                        "seed": seed,
                        "run": done[h, seed].name,
                        "baseline": done[BASELINE_HEADS, seed].name,
                        "bleu": done[h, seed].test_bleu,
                        "baseline_bleu": done[BASELINE_HEADS, seed].test_bleu,
                        "difference": round(test.difference, 2),
                        "difference_ci95": list(test.interval),
                        "p_value": round(test.p_value, 4),
                    }
                )
        for test, adjusted in zip(tests, S.holm([t["p_value"] for t in tests])):
            test["p_holm"] = round(adjusted, 4)
        out += tests
    return out


def _factor_counts(runs: list[RunRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for run in runs:
        counts[factor_of(run)] = counts.get(factor_of(run), 0) + 1
    return dict(sorted(counts.items()))


def _factor_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{label} ×{n}" for label, n in counts.items()) or "none"


def _lines(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()


# ----------------------------------------------------------------------------- the report


def build_report(study_dir: Path, n_samples: int = BOOTSTRAP_SAMPLES) -> dict:
    study_dir = Path(study_dir)
    grid, runs = gather(study_dir)
    tests, notes = significance(study_dir, runs, n_samples)
    baseline_done = [r for r in runs if r.heads == BASELINE_HEADS and r.status == "done"]
    if not baseline_done:
        notes.append(
            f"no finished h={BASELINE_HEADS} run: differences to h={BASELINE_HEADS} and significance tests "
            f"need one" + ("" if BASELINE_HEADS in grid["heads"] else f" (add {BASELINE_HEADS} to --heads)")
        )
    by_heads = [_heads_row(h, [r for r in runs if r.heads == h], tests, grid["d_model"]) for h in grid["heads"]]
    for row in by_heads:
        row["head_analysis"] = head_analysis(study_dir, [r for r in runs if r.heads == row["heads"]])
    base_row = next((row for row in by_heads if row["heads"] == BASELINE_HEADS), None)
    for row in by_heads:
        row["diff_to_h8"] = _differences(row, base_row)
    parameters = {r.parameters for r in runs if r.parameters is not None}
    if len(parameters) > 1:
        notes.append(f"parameter counts differ between runs ({sorted(parameters)}): the grid is not at constant size")
    code = grid.get("code") or []
    if len(code) > 1:
        where = "the runs' provenance" if grid.get("code_from_runs") else "study.yaml"
        notes.append(f"{len(code)} code versions ran this study ({where}): " + ", ".join(code_name(c) for c in code))
    signatures = sorted({r.bleu_signature for r in runs if r.bleu_signature})
    compared = provenance.compare(
        {r.name: _point_sessions(study_dir / r.run_dir, r.beam) for r in runs if r.status != "pending"}
    )
    notes += provenance.difference_notes(compared)
    for key, seen in differing_settings(study_dir, [r.run_dir for r in runs]).items():
        shown = "; ".join(f"{value} ({_point_names(points)})" for value, points in seen.items())
        notes.append(f"points of this study differ in their config's {key}: {shown}")
    return {
        "study_dir": study_dir.name,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "grid": grid,
        "baseline_heads": BASELINE_HEADS,
        "runs_done": sum(r.status == "done" for r in runs),
        "runs_total": len(runs),
        "runs": [asdict(r) for r in runs],
        "by_heads": by_heads,
        "significance": tests,
        "measure": MEASURE,
        "claims": _claims(by_heads, tests),
        "paper": {"source": PAPER_SOURCE, "table": {str(h): v for h, v in PAPER_TABLE_3A.items()}},
        "bleu_signatures": signatures,
        "notes": notes,
        "provenance": compared,
        "lengths": length_analysis(study_dir, runs, BASELINE_HEADS),  # test BLEU by source length: lengths.py
    }


def _point_names(points: list[str]) -> str:
    return ", ".join(points) if len(points) <= 4 else f"{len(points)} points"


def _point_sessions(run_dir: Path, beam: int | None) -> list[dict]:
    """The provenance sessions of a grid point: its training sessions and those of its evaluations."""
    evals = [read_eval(run_dir, split, beam) or {} for split in EVAL_SPLITS]
    return [
        *provenance.read_sessions(run_dir),
        *(e["provenance"] for e in evals if isinstance(e.get("provenance"), dict)),
    ]


def _heads_row(h: int, runs: list[RunRecord], tests: dict, d_model: int | None) -> dict:
    done = [r for r in runs if r.status == "done"]
    parameters = sorted({r.parameters for r in runs if r.parameters is not None})
    paper = PAPER_TABLE_3A.get(h)
    test_bleu = [r.test_bleu for r in done if r.test_bleu is not None]
    row = {
        "heads": h,
        "d_head": next((r.d_head for r in runs if r.d_head), head_size(d_model, h) if d_model else None),
        "parameters": parameters[0] if len(parameters) == 1 else (parameters or None),
        "runs_done": len(done),
        "runs": len(runs),
        "pending": [
            f"{r.name} ({r.status}{f', update {r.updates}' if r.status == 'training' and r.updates else ''})"
            for r in runs
            if r.status != "done"
        ],
        **{metric: describe({r.seed: getattr(r, metric) for r in done}) for metric in METRICS},
        "test_bleu_seed_ci95": seed_interval(test_bleu),
        "per_seed_tests": [t for t in tests["per_seed"] if t["heads"] == h],
        "seed_test": next((t for t in tests["seed_level"] if t["heads"] == h), None),
        "paper": None,
    }
    if paper is not None:
        base = PAPER_TABLE_3A[BASELINE_HEADS]
        row["paper"] = {
            **paper,
            "bleu_diff_to_h8": round(paper["bleu"] - base["bleu"], 2),
            "ppl_diff_to_h8": round(paper["ppl"] - base["ppl"], 2),
        }
    return row


def head_analysis(study_dir: Path, runs: list[RunRecord]) -> dict | None:
    """Per h, from `mhatrain heads` files in the runs: the share of heads in each role
    (heads/roles-valid.json) and the share removable within 1 BLEU (heads/heads-valid.json)."""
    from .head_roles import study_role_measures, study_role_shares

    roles, prunable, total = {}, 0, 0
    for run in runs:
        directory = study_dir / run.run_dir / "heads"
        report = read_json(directory / "roles-valid.json")
        if report is not None and "counts" in report:
            roles[run.name] = report
        heads = read_json(directory / "heads-valid.json")
        pruning = ((heads or {}).get("pruning") or {}).get("all") or {}
        if pruning.get("prunable") is not None:
            prunable, total = prunable + pruning["prunable"], total + pruning["heads"]
    if not roles and not total:
        return None
    return {
        "role_shares": study_role_shares(roles),
        "role_measures": study_role_measures(roles),
        "runs_with_roles": sorted(roles),
        "prunable_share": round(prunable / total, 4) if total else None,
    }


def _differences(row: dict, base_row: dict | None) -> dict | None:
    """Per metric, the mean over the seeds both h have finished of (this h − h=8): in a partial grid the
    paired difference the significance tests are about, not the mean of some seeds minus that of others."""
    if base_row is None or not base_row["runs_done"] or not row["runs_done"]:
        return None
    out = {}
    for metric in ("test_bleu", "valid_bleu", "valid_ppl", "test_chrf"):
        ours, base = row[metric]["per_seed"], base_row[metric]["per_seed"]
        pairs = [ours[s] - base[s] for s in ours if s in base and ours[s] is not None and base[s] is not None]
        out[metric] = round(statistics.fmean(pairs), 2) if pairs else None
    if row["seed_test"]:  # the same difference from unrounded BLEU, as the tests and the conclusion give it
        out["test_bleu"] = row["seed_test"]["mean_difference"]
    return out


def _claims(by_heads: list[dict], tests: dict) -> dict:
    rows = {row["heads"]: row for row in by_heads}
    ours = None
    if 1 in rows and rows[1]["diff_to_h8"] is not None:
        diff = rows[1]["diff_to_h8"]
        ours = {
            "test_bleu": -diff["test_bleu"] if diff["test_bleu"] is not None else None,
            "valid_bleu": -diff["valid_bleu"] if diff["valid_bleu"] is not None else None,
            "seed_test": rows[1]["seed_test"],
        }
    return {
        "article": ARTICLE_CLAIM,
        "paper": {
            "h8_minus_h1_bleu": round(PAPER_TABLE_3A[8]["bleu"] - PAPER_TABLE_3A[1]["bleu"], 2),
            "text": "single-head attention is 0.9 BLEU worse than the best setting (newstest2013 dev)",
        },
        "ours": ours,  # h=8 minus h=1, mean over seeds; None until both have a finished run
        "conclusion": conclusion(by_heads, tests.get("trend"), tests.get("left_out")),
    }


def conclusion(by_heads: list[dict], trend: dict | None = None, left_out: list[str] | None = None) -> str:
    """Plain sentences that say only what the h × seed-block test supports (SIGNIFICANCE_METHOD): the
    verdicts, the trend against log2 h where its p is below LEVEL, and which published gains of h=8
    over h=1 the 95% interval rules out."""
    tested = [row for row in by_heads if row["seed_test"] is not None]
    if not tested:
        return f"Nothing tested yet: it needs finished h={BASELINE_HEADS} runs and runs of another h" + (
            f" that meet the measure (left out: {', '.join(left_out)})." if left_out else "."
        )
    if all(row["seed_test"].get("p_adjusted") is None for row in tested):
        return (
            f"Not tested: with one seed per h nothing measures the seed noise, so no difference from "
            f"h={BASELINE_HEADS} can be called ({_join(_effect(row) for row in tested)})."
        )
    counts = {len(row["seed_test"]["seeds"]) for row in tested}
    seeds = sorted(counts | {len(tested[0]["seed_test"].get("baseline_seeds") or [])} - {0})
    seed_text = f"{'/'.join(map(str, seeds))} seed{'s' if seeds != [1] else ''} per h"
    parts = []
    for verdict in ("better", "worse"):
        hs = [row for row in tested if row["seed_test"]["verdict"] == verdict]
        if hs:
            parts.append(
                f"{_heads_list(hs)} "
                f"{'is' if len(hs) == 1 else 'are'} {verdict} than h={BASELINE_HEADS} "
                f"({_join(_effect(row) for row in hs)})"
            )
    same = [row for row in tested if row["seed_test"]["verdict"] == "no detectable difference"]
    if same:
        parts.append(
            f"no detectable difference from h={BASELINE_HEADS} for {_heads_list(same)} "
            f"({_join(_effect(row) for row in same)})"
        )
    text = (
        f"Test BLEU against h={BASELINE_HEADS} ({seed_text}, h × seed-block test over seed and test-sentence "
        f"noise, Holm-adjusted two-sided p < {LEVEL}): {'; '.join(parts)}."
    )
    if trend and trend["p_value"] < LEVEL:
        low, high = trend["ci95"]
        text += (
            f" BLEU {'falls' if trend['slope_per_doubling'] < 0 else 'rises'} by {abs(trend['slope_per_doubling']):.2f} "
            f"per doubling of h (95% interval {low:+.2f} to {high:+.2f}, p = {trend['p_value']:.4f})."
        )
    h1 = next((row["seed_test"] for row in tested if row["heads"] == 1), None)
    if h1 and h1.get("ci95"):
        gains = [
            (
                f"the paper's (+{PAPER_TABLE_3A[8]['bleu'] - PAPER_TABLE_3A[1]['bleu']:.1f})",
                PAPER_TABLE_3A[8]["bleu"] - PAPER_TABLE_3A[1]["bleu"],
            ),
            (f"the explainer's (+{ARTICLE_CLAIM['h8_minus_h1_bleu']:.1f})", ARTICLE_CLAIM["h8_minus_h1_bleu"]),
        ]
        ruled_out = [name for name, gain in gains if -gain < h1["ci95"][0]]
        if ruled_out:
            text += (
                f" A gain of h={BASELINE_HEADS} over h=1 as large as {_join(ruled_out)} lies outside the 95% "
                f"interval of h=1 − h={BASELINE_HEADS} ({h1['ci95'][0]:+.2f} to {h1['ci95'][1]:+.2f})."
            )
    return text


def _heads_list(rows: list[dict]) -> str:
    return _join(f"h={row['heads']}" for row in rows)


def _effect(row: dict) -> str:
    test = row["seed_test"]
    if test["mean_difference"] is None:
        return f"h={row['heads']}: no paired seed"
    if test.get("p_adjusted") is None:
        return f"h={row['heads']}: {test['mean_difference']:+.2f} BLEU"
    return f"h={row['heads']}: {test['mean_difference']:+.2f} BLEU, adjusted p = {test['p_adjusted']:.3f}"


def _join(items) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# ----------------------------------------------------------------------------- formatting


def _num(value, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and math.isnan(value):
        return "—"
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def _stat(stat: dict, digits: int = 2) -> str:
    if stat["mean"] is None:
        return "—"
    if stat["std"] is None:
        return _num(stat["mean"], digits)
    return f"{_num(stat['mean'], digits)} ± {_num(stat['std'], digits)}"


def _signed(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:+.{digits}f}"


def _p(value) -> str:
    return "—" if value is None else f"{value:.3f}"


def _row_cells(row: dict, short: bool = False) -> list[str]:
    paper = row["paper"] or {}
    runs = f"{row['runs_done']}/{row['runs']}"
    if not row["runs_done"]:
        ours = ["pending"] * 5
    else:
        ours = [
            _stat(row["valid_ppl"]),
            _stat(row["valid_bleu"]),
            _stat(row["test_bleu"]),
            _interval(row["test_bleu_seed_ci95"]),
            _stat(row["test_chrf"]),
        ]
    diff = row["diff_to_h8"]
    is_base = row["heads"] == BASELINE_HEADS
    test = row["seed_test"] or {}
    cells = [
        str(row["heads"]),
        _num(row["d_head"]),
        _num(row["parameters"]) if not isinstance(row["parameters"], list) else "varies",
        runs,
        *ours,
        ("baseline" if is_base and diff is not None else _signed(diff["test_bleu"]) if diff else "—"),
        _interval(test.get("ci95")),
        _p(test.get("p_value")),
        _p(test.get("p_adjusted")),
        "—" if is_base else test.get("verdict", "—"),
        _num(paper.get("ppl")),
        _num(paper.get("bleu"), 1),
        ("—" if not paper else "baseline" if is_base else _signed(paper["bleu_diff_to_h8"], 1)),
        _num(row["train_seconds"]["mean"], 0),
        _num(row["tokens_per_s"]["mean"], 0),
    ]
    return cells


SHORT_HEADERS = [
    "h",
    "d_k",
    "params",
    "runs",
    "val PPL",
    "val BLEU",
    "test BLEU",
    "95% (seeds)",
    "test chrF",
    "Δ BLEU",
    "Δ 95%",
    "p",
    "p Holm",
    "verdict",
    "paper PPL",
    "paper BLEU",
    "paper Δ",
    "train s",
    "tok/s",
]
HEADERS = [
    "h",
    "d_k",
    "parameters",
    "runs",
    "valid PPL",
    "valid BLEU",
    "test BLEU",
    "95% interval over seeds",
    "test chrF",
    "Δ test BLEU vs h=8",
    "95% interval of Δ",
    "p",
    "p Holm",
    "verdict",
    "paper PPL (dev)",
    "paper BLEU (dev)",
    "paper Δ BLEU vs h=8",
    "train s",
    "tokens/s",
]


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _status_line(report: dict) -> str:
    pending = [p for row in report["by_heads"] for p in row["pending"]]
    line = f"{report['runs_done']} of {report['runs_total']} runs done"
    return line + (f"; not finished: {', '.join(pending)}" if pending else "")


def _recorded_code(run_dirs: list[Path]) -> list[dict]:
    """The distinct code versions in the runs' provenance.json sessions, in order of first appearance."""
    found = []
    for run_dir in run_dirs:
        for entry in provenance.read_sessions(run_dir):
            if entry.get("code") and entry["code"] not in found:
                found.append(entry["code"])
    return found


def _code_line(grid: dict) -> str:
    code = grid.get("code") or []
    if not code:
        return "Code: not recorded (a study made before mhatrain recorded its commit)."
    names = [
        f"`{c.get('commit') or 'unknown commit'}`{' (with uncommitted changes)' if c.get('dirty') else ''} "
        f"(mhatrain {c.get('version')})"
        for c in code
    ]
    if grid.get("code_from_runs"):  # no study.yaml: what the runs' provenance.json sessions record
        lead = (
            "Every session in the runs' provenance ran commit "
            if len(names) == 1
            else "Code versions in the runs' provenance: "
        )
    else:
        lead = (
            "Every run trained and evaluated by commit " if len(names) == 1 else "Code versions that ran this study: "
        )
    return lead + ", ".join(names) + "."


def to_markdown(report: dict) -> str:
    grid = report["grid"]
    constant = {row["parameters"] for row in report["by_heads"] if isinstance(row["parameters"], int)}
    out = [
        f"# Head-count study: {report['study_dir']}",
        "",
        f"The paper's Table 3, rows (A), on our data. {_status_line(report)}.",
        "",
    ]
    if grid.get("config"):
        extra = " ".join(f"--set {o}" for o in grid.get("overrides") or [])
        out.append(
            f"Config: `{grid['config']}`{' ' + extra if extra else ''}; d_model = {grid['d_model']}; "
            + (
                f"d_k = d_v = model.d_head = {grid['d_head']} at every h, so parameters and FLOPs grow with h "
                f"(each run's parameters: below)."
                if grid.get("d_head")
                else "d_k = d_v = d_model / h, so parameters stay constant"
                + (f" ({_num(constant.pop())} in every run)." if len(constant) == 1 else ".")
            )
        )
        out.append("")
    out += [
        _code_line(grid),
        "",
        provenance.summary_line(report["provenance"]).replace("provenance:", "Provenance:", 1),
        "",
    ]
    out += ["## Conclusion", "", report["claims"]["conclusion"], ""]
    measure = report.get("measure") or MEASURE
    left_out = report["significance"].get("left_out") or []
    out += [
        f"Measure: {measure['text']}"
        + (f" Left out here: {', '.join(left_out)} (see Notes)." if left_out else " Every finished point meets it."),
        "",
    ]
    out += [
        "## By number of heads (mean ± std over seeds)",
        "",
        _md_table(HEADERS, [_row_cells(row) for row in report["by_heads"]]),
        "",
        "PPL: validation perplexity per subword token at the evaluated (best) checkpoint (the paper's is per "
        "word-piece on WMT14 newstest2013). BLEU and chrF: sacreBLEU on detokenised output of the best "
        "checkpoint, beam search as in decode.beam / decode.alpha. 95% interval over seeds: mean ± t(n−1)·sd/√n. "
        "Δ: h minus h=8 as the h × seed-block test estimates it, over the points that meet the measure: the mean of "
        "the per-seed differences where both h have the same seeds (the difference the tests are about). "
        "p: two-sided tests against h=8, raw and Holm-adjusted over the h compared (see below). The paper's "
        "numbers are on another data set and model size: compare the shape of the curve and the differences "
        "to h=8, not the levels.",
        "",
    ]
    out += [
        "## Each run",
        "",
        _md_table(
            [
                "run",
                "h",
                "seed",
                "status",
                "parameters",
                "evaluated update",
                "lowest valid loss at",
                "trained updates",
                "precision · device",
                "valid PPL",
                "valid BLEU",
                "test BLEU",
                "test chrF",
                "train s",
                "tokens/s",
            ],
            [
                [
                    r["name"],
                    str(r["heads"]),
                    str(r["seed"]),
                    r["status"],
                    _num(r["parameters"]),
                    _num(r["updates"]),
                    _num(r.get("loss_selected_update")),
                    _num(r.get("trained_updates")),
                    f"{r.get('precision') or '—'} · {r.get('device') or '—'}",
                    _num(r["valid_ppl"], 3),
                    _num(r["valid_bleu"]),
                    _num(r["test_bleu"]),
                    _num(r["test_chrf"]),
                    _num(r["train_seconds"], 1),
                    _num(r["tokens_per_s"], 0),
                ]
                for r in report["runs"]
            ],
        ),
        "",
    ]
    sig = report["significance"]
    out += [f"## Significance against h={BASELINE_HEADS} (test set)", ""]
    if sig["seed_level"]:
        out += [
            f"Over seeds and test sentences (the verdict's test; measure: {sig.get('measure', MEASURE['name'])}):",
            "",
            _md_table(
                [
                    "h",
                    "seeds",
                    f"Δ BLEU vs h={BASELINE_HEADS}",
                    "95% interval of Δ",
                    "p",
                    "p Holm",
                    "verdict",
                    "variance: seeds + own sentences",
                    "variance: shared sentences",
                    "precision · device",
                ],
                [
                    [
                        str(t["heads"]),
                        ",".join(map(str, t["seeds"])),
                        _signed(t["mean_difference"]),
                        _interval(t["ci95"]),
                        _p(t["p_value"]),
                        _p(t["p_adjusted"]),
                        t["verdict"],
                        _num(t["model_variance"], 3),
                        _num(t["shared_sentence_variance"], 3),
                        _factor_text(t["factors"]),
                    ]
                    for t in sig["seed_level"]
                ],
            ),
            "",
            f"h={BASELINE_HEADS}: seeds {','.join(map(str, sig['seed_level'][0]['baseline_seeds']))}; "
            f"{_factor_text(sig['seed_level'][0]['baseline_factors'])}. Residual standard deviation of the "
            f"h × seed-block fit: {_num(sig.get('residual_sd'))} BLEU, {sig.get('df')} degrees of freedom.",
            "",
            *[f"- {t['factor_note']}" for t in sig["seed_level"] if t.get("factor_note")],
            *([""] if any(t.get("factor_note") for t in sig["seed_level"]) else []),
        ]
        trend = sig.get("trend")
        if trend:
            out += [
                f"Trend against log2 h (h = {', '.join(map(str, trend['heads']))}): "
                f"{_signed(trend['slope_per_doubling'])} BLEU per doubling of h, 95% interval "
                f"{_interval(trend['ci95'])}, two-sided p = {trend['p_value']:.4f} ({trend['df']} degrees of freedom).",
                "",
            ]
        out += [
            "Each seed against h=8 of the same seed:",
            "",
            _md_table(
                [
                    "h",
                    "seed",
                    "test BLEU",
                    f"h={BASELINE_HEADS} BLEU",
                    "Δ BLEU",
                    "95% bootstrap interval of Δ",
                    "p",
                    "p Holm (within the seed)",
                ],
                [
                    [
                        str(t["heads"]),
                        str(t["seed"]),
                        _num(t["bleu"]),
                        _num(t["baseline_bleu"]),
                        _signed(t["difference"]),
                        _interval(t["difference_ci95"]),
                        _p(t["p_value"]),
                        _p(t["p_holm"]),
                    ]
                    for t in sig["per_seed"]
                ],
            ),
            "",
        ]
        out += [f"Methods ({sig['samples']} resamples of the test sentences, numpy seed {sig['bootstrap_seed']}):", ""]
        out += [f"- {name.replace('_', ' ')}: {text}" for name, text in sig["method"].items()] + [""]
    else:
        out += [
            f"No test yet: it needs a finished h={BASELINE_HEADS} run and a finished run of another h of the "
            f"same seed.",
            "",
        ]
    analysed = [row for row in report["by_heads"] if row.get("head_analysis")]
    if analysed:
        from .head_roles import ROLE_THRESHOLDS, ROLES

        out += [
            "## What the heads do (`mhatrain heads --roles` and `mhatrain heads` on the runs)",
            "",
            _md_table(
                ["h", "runs with roles", *[f"{role} heads" for role in ROLES], "prunable within 1 BLEU"],
                [
                    [
                        str(row["heads"]),
                        str(len(row["head_analysis"]["runs_with_roles"])),
                        *[_share(row["head_analysis"]["role_shares"], role) for role in ROLES],
                        _pct(row["head_analysis"]["prunable_share"]),
                    ]
                    for row in analysed
                ],
            ),
            "",
            f"Shares of all heads (every layer and attention kind) over the runs of each h. Classes and their "
            f"thresholds: {ROLE_THRESHOLDS} (see mhatrain/head_roles.py).",
            "",
            *_role_measures_table(analysed),
        ]
    claims = report["claims"]
    ours = claims["ours"]
    test = (ours or {}).get("seed_test") or {}
    p_text = (
        f" (p = {test['p_value']:.3f}, Holm-adjusted {test['p_adjusted']:.3f}; {test['verdict']})"
        if test and test.get("p_value") is not None
        else ""
    )
    out += [
        "## Beside the paper and the explainer article",
        "",
        _md_table(
            ["source", "what", "h=8 − h=1 BLEU"],
            [
                [
                    "explainer article",
                    f'claim: "{claims["article"]["text"]}"',
                    _signed(claims["article"]["h8_minus_h1_bleu"], 1),
                ],
                [
                    "paper, Table 3 (A)",
                    "newstest2013 dev BLEU, base model",
                    _signed(claims["paper"]["h8_minus_h1_bleu"], 1),
                ],
                [
                    "this study",
                    "test BLEU, mean over seeds" + p_text,
                    _signed(ours["test_bleu"]) if ours else "needs finished h=1 and h=8 runs",
                ],
                ["this study", "validation BLEU, mean over seeds", _signed(ours["valid_bleu"]) if ours else "—"],
            ],
        ),
        "",
        f"Paper source: {PAPER_SOURCE}.",
        "",
    ]
    if report["bleu_signatures"]:
        out += ["BLEU signature: " + "; ".join(f"`{s}`" for s in report["bleu_signatures"]), ""]
    out += lengths_markdown(report.get("lengths"))
    if report["notes"]:
        out += ["## Notes", "", *[f"- {note}" for note in report["notes"]], ""]
    return "\n".join(out)


def _pct(value) -> str:
    return "—" if value is None else f"{value:.0%}"


def _role_measures_table(analysed: list[dict]) -> list[str]:
    """Per h and attention kind, the mean of each head measure over the heads of its runs."""
    from .head_roles import STUDY_MEASURES

    rows = [
        [str(row["heads"]), kind, *[_fraction(measures.get(name)) for name in STUDY_MEASURES]]
        for row in analysed
        for kind, measures in (row["head_analysis"].get("role_measures") or {}).items()
    ]
    if not rows:
        return []
    names = {
        "entropy_normalised": "entropy (normalised)",
        "confidence": "confidence",
        "neighbour": "strongest neighbour",
        "diagonal": "diagonal",
        "sink": "sink",
    }
    return [
        _md_table(["h", "attention", *[names[name] for name in STUDY_MEASURES]], rows),
        "",
        "Means over every head of the runs of each h: normalised entropy (1 = uniform over the keys), weight "
        "on the strongest key, on the strongest of the previous/same/next token (self-attention), within one "
        "position of the proportional diagonal (cross-attention), and on </s> (enc-self, cross) or <s> "
        "(dec-self).",
        "",
    ]


def _fraction(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _share(shares: dict | None, role: str) -> str:
    return "—" if not shares else _pct(shares[role])


def _interval(ci: list[float] | None) -> str:
    return "—" if not ci else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def to_csv(report: dict) -> tuple[str, str]:
    """(one row per h, one row per run)."""
    per_seed = {t["run"]: t for t in report["significance"]["per_seed"]}
    per_h = io.StringIO()
    writer = csv.writer(per_h, lineterminator="\n")
    stats = [(m, s) for m in METRICS for s in ("mean", "std")]
    seed_columns = ["p_value", "p_adjusted", "std_error", "df", "verdict"]
    writer.writerow(
        [
            "heads",
            "d_k",
            "parameters",
            "runs_done",
            "runs",
            *[f"{m}_{s}" for m, s in stats],
            "test_bleu_seed_ci95_low",
            "test_bleu_seed_ci95_high",
            "test_bleu_diff_to_h8",
            "valid_bleu_diff_to_h8",
            "valid_ppl_diff_to_h8",
            "test_bleu_diff_ci95_low",
            "test_bleu_diff_ci95_high",
            *seed_columns,
            "paper_ppl",
            "paper_bleu",
            "paper_bleu_diff_to_h8",
        ]
    )
    for row in report["by_heads"]:
        diff, paper, test = row["diff_to_h8"] or {}, row["paper"] or {}, row["seed_test"] or {}
        parameters = row["parameters"] if not isinstance(row["parameters"], list) else ""
        interval = row["test_bleu_seed_ci95"] or ["", ""]
        writer.writerow(
            [
                row["heads"],
                row["d_head"],
                parameters,
                row["runs_done"],
                row["runs"],
                *[_blank(row[m][s]) for m, s in stats],
                *interval,
                _blank(diff.get("test_bleu")),
                _blank(diff.get("valid_bleu")),
                _blank(diff.get("valid_ppl")),
                *(test.get("ci95") or ["", ""]),
                *[_blank(test.get(c)) for c in seed_columns],
                _blank(paper.get("ppl")),
                _blank(paper.get("bleu")),
                _blank(paper.get("bleu_diff_to_h8")),
            ]
        )
    per_run = io.StringIO()
    writer = csv.writer(per_run, lineterminator="\n")
    columns = [
        "name",
        "heads",
        "seed",
        "status",
        "d_head",
        "parameters",
        "updates",
        "loss_selected_update",
        "trained_updates",
        "precision",
        "device",
        *METRICS,
    ]
    bootstrap = ["sentence_bootstrap_p_vs_h8", "sentence_bootstrap_p_holm_vs_h8", "diff_ci95_low", "diff_ci95_high"]
    writer.writerow([*columns, *bootstrap])
    for run in report["runs"]:
        test = per_seed.get(run["name"], {})
        ci = test.get("difference_ci95") or ["", ""]
        writer.writerow(
            [_blank(run.get(c)) for c in columns]
            + [_blank(test.get("p_value")), _blank(test.get("p_holm")), ci[0], ci[1]]
        )
    return per_h.getvalue(), per_run.getvalue()


def _blank(value):
    return "" if value is None else value


# The seed-level test's fields that may hold the adjusted p its verdict rests on, in order of preference.
ADJUSTED_P_FIELDS = ("p_adjusted",)
COMPACT_HEADERS = ["h", "runs", "test BLEU", f"Δ vs h={BASELINE_HEADS}", "adjusted p", "verdict"]


def verdict_of(row: dict) -> tuple[float | None, str | None]:
    """(adjusted p, verdict) of an h against h=8, as a row of report["by_heads"] holds them: the one place
    the terminal table reads them from. None for what the row does not have (h=8 itself, no finished runs)."""
    test = row.get("seed_test") or {}
    adjusted = next((test[name] for name in ADJUSTED_P_FIELDS if test.get(name) is not None), None)
    return adjusted, test.get("verdict")


def _compact_cells(row: dict) -> list[str]:
    """One h in the terminal: h, runs, test BLEU ± sd, Δ, adjusted p, verdict (report.md has the rest)."""
    is_base = row["heads"] == BASELINE_HEADS
    diff = row["diff_to_h8"]
    adjusted, verdict = verdict_of(row)
    return [
        str(row["heads"]),
        f"{row['runs_done']}/{row['runs']}",
        _stat(row["test_bleu"]) if row["runs_done"] else "pending",
        "baseline" if is_base and diff is not None else _signed(diff["test_bleu"]) if diff else "—",
        "—" if is_base else _p(adjusted),
        "—" if is_base or verdict is None else verdict,
    ]


def show(report: dict, console: Console) -> None:
    """The report on the console: in a terminal, a table of the six columns that tell the h apart (any
    width keeps every h visible); in a log file or a pipe, which have no width to respect, the full table."""
    title = f"Head-count study: {report['study_dir']} — {_status_line(report)}"
    compact = console.is_terminal

    def say(text: str) -> None:  # in a terminal, prose wraps between words at the terminal's width
        console.print(text, highlight=False, soft_wrap=not compact)

    headers, cells = (COMPACT_HEADERS, _compact_cells) if compact else (SHORT_HEADERS, _row_cells)
    table = Table(title=title, title_justify="left")
    for header in headers:
        table.add_column(
            header,
            justify="left" if header in ("h", "verdict") else "right",
            no_wrap=header != "verdict",
            min_width=len(header) if header != "verdict" else None,
        )
    for row in report["by_heads"]:
        table.add_row(*cells(row), style="bold" if row["heads"] == BASELINE_HEADS else None)
    if compact:
        console.print(table)
        say(
            f"Δ: test BLEU of h minus h={BASELINE_HEADS} as the test estimates it, over the runs that meet the "
            f"study's checkpoint measure; adjusted p: two-sided, against h={BASELINE_HEADS} over seeds and test "
            f"sentences, adjusted over the h compared; verdict: what that test allows. The full table "
            f"(perplexity, chrF, every test, the paper's Table 3 A): report.md."
        )
    else:
        wide = Console(file=io.StringIO(), width=250, color_system=None)
        wide.print(table)
        console.out("\n".join(line.rstrip() for line in wide.file.getvalue().splitlines()), highlight=False)
        say(
            "Δ: h minus h=8 as the test estimates it, over the runs that meet the checkpoint measure; Δ 95% and p: two-sided h × seed-block test against h=8 "
            "(seed and test-sentence noise); Holm: adjusted over the h compared; paper: Table 3 (A), "
            "newstest2013 dev (another data set and model size: compare shapes)."
        )
    claims = report["claims"]
    ours = claims["ours"]
    ours_text = (
        f"ours {_signed(ours['test_bleu'])} test BLEU, {_signed(ours['valid_bleu'])} validation BLEU"
        if ours
        else "ours: needs finished h=1 and h=8 runs"
    )
    say(
        f"h=8 − h=1: article claims {_signed(claims['article']['h8_minus_h1_bleu'], 1)} BLEU, "
        f"paper {_signed(claims['paper']['h8_minus_h1_bleu'], 1)} (dev), {ours_text}"
    )
    say(claims["conclusion"])
    say(provenance.summary_line(report["provenance"]))
    for note in report["notes"]:
        say(f"note: {note}")


def plot(report: dict, path: Path) -> None:
    from .plots import head_count_plot

    runs = [r for r in report["runs"] if r["status"] == "done"]

    def ours(metric: str) -> dict[int, list[float]]:
        values: dict[int, list[float]] = {}
        for run in runs:
            if run[metric] is not None:
                values.setdefault(run["heads"], []).append(run[metric])
        return values

    panels = [
        {
            "label": "test BLEU",
            "ours": ours("test_bleu"),
            "paper": {h: v["bleu"] for h, v in PAPER_TABLE_3A.items()},
            "paper_label": "paper, Table 3 (A): BLEU on newstest2013",
        },
        {
            "label": "validation perplexity",
            "ours": ours("valid_ppl"),
            "paper": {h: v["ppl"] for h, v in PAPER_TABLE_3A.items()},
            "paper_label": "paper, Table 3 (A): perplexity on newstest2013",
        },
    ]
    head_count_plot(
        panels,
        path,
        f"Head count (d_k = d_model / h): {report['study_dir']} — {report['runs_done']}/{report['runs_total']} runs",
        BASELINE_HEADS,
    )


def write(report: dict, study_dir: Path) -> list[Path]:
    study_dir = Path(study_dir)
    per_h, per_run = to_csv(report)
    paths = [study_dir / name for name in ("report.md", "report.csv", "report-runs.csv", "report.json", "report.png")]
    atomic_write_text(paths[0], to_markdown(report))
    atomic_write_text(paths[1], per_h)
    atomic_write_text(paths[2], per_run)
    atomic_write_json(paths[3], report)
    plot(report, paths[4])
    paths += write_lengths_csv(report.get("lengths"), study_dir)
    curves = _study_curves(study_dir)
    return paths + ([curves] if curves else [])


def _study_curves(study_dir: Path) -> Path | None:
    """curves.png of the study (mean over seeds per h), once any run has validated."""
    from .plots import learning_curves_plot

    curves = [c for c in (read_curve(d) for d in study_runs(study_dir)) if c.valid_steps]
    if not curves:
        return None
    path = study_dir / "curves.png"
    learning_curves_plot(
        group_by_heads(curves), curves, path, f"Learning curves: {study_dir.name}, mean over seeds per h"
    )
    return path


def report_study(study_dir: Path, console: Console, n_samples: int = BOOTSTRAP_SAMPLES) -> dict:
    """`mhatrain report`: gather, test, write Markdown/CSV/JSON/PNG and show the table (for a study made
    with --vary: each cell's report in its folder, and the regime map: regimes.py)."""
    from .regimes import is_varied, report_varied_study

    if is_varied(Path(study_dir)):
        return report_varied_study(Path(study_dir), console, n_samples)
    report = build_report(Path(study_dir), n_samples)
    paths = write(report, Path(study_dir))
    show(report, console)
    console.print("report: " + "  ".join(str(p) for p in paths), highlight=False, soft_wrap=not console.is_terminal)
    return report
