"""The head-count study's report: statistics per h over seeds, paired bootstrap tests against h=8,
and the paper's Table 3 (A) and the explainer article's claim beside our numbers.

Every number is read from the run directories, so a report works on a partial study and on run
directories that a cluster filled by running the commands of `mhatrain ablate --dry-run`:
    config.yaml                     h (model.n_heads), d_model, decode.beam
    train_summary.json              parameters, updates, training time, target tokens/s
    metrics.jsonl                   validation perplexity at the update of the best checkpoint
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

from rich.console import Console
from rich.table import Table

from . import provenance
from .checkpoint import CONFIG_FILE, METRICS_FILE, eval_path, read_eval, read_summary
from .curves import group_by_heads, read_curve, study_runs
from .errors import MhatrainError
from .io import atomic_write_json, atomic_write_text, portable_text, read_json, read_jsonl
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
        record.d_head = model["d_model"] // point.heads
    record.beam = decode.get("beam")
    record.status = run_state(run_dir, record.beam)
    summary = read_summary(run_dir)
    valid_records = [r for r in read_jsonl(run_dir / METRICS_FILE) if r.get("kind") == "valid"]
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
            run.d_head = grid["d_model"] // run.heads
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
    "per_seed": "paired bootstrap over test sentences, two-sided and centred: each h against h=8 of the same seed; "
    "covers test-sentence noise only; Holm–Bonferroni over the h of each seed",
    "seed_averaged": "paired bootstrap over test sentences of the seed-averaged BLEU difference (the same resampled "
    "test sets for every seed), two-sided and centred; covers the test-sentence noise of the "
    "average, not the variance between seeds",
    "seed_t_test": "paired t-test over the per-seed differences (seed s of h against seed s of h=8), two-sided, "
    "df = seeds − 1; covers the variance between seeds, not test-sentence noise",
    "correction": "Holm–Bonferroni over the comparisons against h=8 (raw and adjusted p reported)",
    "verdict": f"'better' or 'worse' only where the Holm-adjusted p of the seed-averaged bootstrap is < {LEVEL} and "
    "the mean difference exceeds the seed spread (the larger standard deviation over seeds of the two "
    "h); otherwise 'no detectable difference' (always so with one seed: its spread is unknown)",
}


def significance(study_dir: Path, runs: list[RunRecord], n_samples: int = BOOTSTRAP_SAMPLES) -> tuple[dict, list[str]]:
    """Test each h against h=8 on the test set: per seed, over seeds (bootstrap of the seed average and
    paired t-test of the per-seed differences), Holm-adjusted; and the wording the numbers allow."""
    from . import significance as S

    result = {
        "method": SIGNIFICANCE_METHOD,
        "samples": n_samples,
        "bootstrap_seed": S.BOOTSTRAP_SEED,
        "per_seed": [],
        "seed_level": [],
    }
    done = {(r.heads, r.seed): r for r in runs if r.status == "done" and r.test_hypotheses}
    if not any(h == BASELINE_HEADS for h, _ in done) or all(h == BASELINE_HEADS for h, _ in done):
        return result, []
    references, problem = _test_references(study_dir, runs)
    if references is None:
        return result, [problem]
    stats, notes = {}, []
    for key, run in done.items():
        hyps = _lines(study_dir / run.test_hypotheses)
        if len(hyps) != len(references):
            notes.append(
                f"{run.name}: {len(hyps)} test hypotheses for {len(references)} references: left out of "
                f"the significance tests"
            )
            continue
        stats[key] = S.sentence_statistics(hyps, references)
    indices = S.resample_indices(len(references), n_samples)
    baseline_seeds = sorted(seed for h, seed in stats if h == BASELINE_HEADS)
    others = sorted({h for h, _ in stats if h != BASELINE_HEADS})

    for seed in baseline_seeds:  # one family per seed
        tests = []
        for h in others:
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
        result["per_seed"] += tests

    levels = []
    for h in others:
        seeds = [seed for seed in baseline_seeds if (h, seed) in stats]
        if not seeds:
            continue
        boot = S.paired_bootstrap([stats[h, s] for s in seeds], [stats[BASELINE_HEADS, s] for s in seeds], indices)
        t_test = S.paired_t_test([done[h, s].test_bleu - done[BASELINE_HEADS, s].test_bleu for s in seeds])
        levels.append(
            {
                "heads": h,
                "seeds": seeds,
                "mean_difference": round(boot.difference, 2),
                "bootstrap_p": round(boot.p_value, 4),
                "bootstrap_ci95": list(boot.interval),
                "t_test_p": None if t_test.p_value is None else round(t_test.p_value, 4),
                "std_of_differences": t_test.std_difference,
            }
        )
    for name in ("bootstrap_p", "t_test_p"):
        for level, adjusted in zip(levels, S.holm([level[name] for level in levels])):
            level[name.replace("_p", "_p_holm")] = None if adjusted is None else round(adjusted, 4)
    for level in levels:
        level["seed_spread"], level["verdict"] = _verdict(level, runs)
    result["seed_level"] = levels
    return result, notes


def _verdict(level: dict, runs: list[RunRecord]) -> tuple[float | None, str]:
    """(seed spread, wording): see SIGNIFICANCE_METHOD["verdict"]."""

    def spread(h: int) -> float | None:
        values = [r.test_bleu for r in runs if r.heads == h and r.seed in level["seeds"] and r.test_bleu is not None]
        return statistics.stdev(values) if len(values) >= 2 else None

    spreads = [spread(level["heads"]), spread(BASELINE_HEADS)]
    if None in spreads:
        return None, "no detectable difference"
    seed_spread = round(max(spreads), 4)
    difference = level["mean_difference"]
    if level["bootstrap_p_holm"] < LEVEL and abs(difference) > seed_spread:
        return seed_spread, "better" if difference > 0 else "worse"
    return seed_spread, "no detectable difference"


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
        "claims": _claims(by_heads, tests),
        "paper": {"source": PAPER_SOURCE, "table": {str(h): v for h, v in PAPER_TABLE_3A.items()}},
        "bleu_signatures": signatures,
        "notes": notes,
        "provenance": compared,
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
        "d_head": d_model // h if d_model else None,
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
        "conclusion": conclusion(by_heads),
    }


def conclusion(by_heads: list[dict]) -> str:
    """One plain sentence that says only what the tests support (see SIGNIFICANCE_METHOD["verdict"])."""
    tested = [row for row in by_heads if row["seed_test"] is not None]
    if not tested:
        return f"Nothing tested yet: it needs finished h={BASELINE_HEADS} runs and runs of another h."
    seeds = sorted({len(row["seed_test"]["seeds"]) for row in tested})
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
        parts.append(f"no detectable difference from h={BASELINE_HEADS} for {_heads_list(same)}")
    text = "; ".join(parts)
    return (
        f"Test BLEU against h={BASELINE_HEADS} ({seed_text}, Holm-adjusted two-sided p, difference beyond "
        f"the seed spread): {text}."
    )


def _heads_list(rows: list[dict]) -> str:
    return _join(f"h={row['heads']}" for row in rows)


def _effect(row: dict) -> str:
    test = row["seed_test"]
    return f"h={row['heads']}: {test['mean_difference']:+.2f} BLEU, adjusted p = {test['bootstrap_p_holm']:.3f}"


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
        _p(test.get("bootstrap_p")),
        _p(test.get("bootstrap_p_holm")),
        _p(test.get("t_test_p")),
        _p(test.get("t_test_p_holm")),
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
    "p",
    "p Holm",
    "p t",
    "p t Holm",
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
    "p (bootstrap, seed average)",
    "p Holm",
    "p (t-test over seeds)",
    "p Holm (t)",
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
            f"d_k = d_v = d_model / h, so parameters stay constant"
            + (f" ({_num(constant.pop())} in every run)." if len(constant) == 1 else ".")
        )
        out.append("")
    out += [
        _code_line(grid),
        "",
        provenance.summary_line(report["provenance"]).replace("provenance:", "Provenance:", 1),
        "",
    ]
    out += ["## Conclusion", "", report["claims"]["conclusion"], ""]
    out += [
        "## By number of heads (mean ± std over seeds)",
        "",
        _md_table(HEADERS, [_row_cells(row) for row in report["by_heads"]]),
        "",
        "PPL: validation perplexity per subword token at the evaluated (best) checkpoint (the paper's is per "
        "word-piece on WMT14 newstest2013). BLEU and chrF: sacreBLEU on detokenised output of the best "
        "checkpoint, beam search as in decode.beam / decode.alpha. 95% interval over seeds: mean ± t(n−1)·sd/√n. "
        "Δ: h minus h=8, mean over the seeds both have finished (the difference the tests are about). "
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
                "trained updates",
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
                    _num(r.get("trained_updates")),
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
            "Over seeds:",
            "",
            _md_table(
                [
                    "h",
                    "seeds",
                    "Δ BLEU (seed mean)",
                    "95% bootstrap interval of Δ",
                    "p bootstrap",
                    "p Holm",
                    "sd of per-seed Δ",
                    "p t-test",
                    "p Holm (t)",
                    "seed spread",
                    "verdict",
                ],
                [
                    [
                        str(t["heads"]),
                        ",".join(map(str, t["seeds"])),
                        _signed(t["mean_difference"]),
                        _interval(t["bootstrap_ci95"]),
                        _p(t["bootstrap_p"]),
                        _p(t["bootstrap_p_holm"]),
                        _num(t["std_of_differences"]),
                        _p(t["t_test_p"]),
                        _p(t["t_test_p_holm"]),
                        _num(t["seed_spread"]),
                        t["verdict"],
                    ]
                    for t in sig["seed_level"]
                ],
            ),
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
        f" (p = {test['bootstrap_p']:.3f}, Holm-adjusted {test['bootstrap_p_holm']:.3f}; {test['verdict']})"
        if test
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
    seed_columns = ["bootstrap_p", "bootstrap_p_holm", "t_test_p", "t_test_p_holm", "seed_spread", "verdict"]
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
                *[_blank(test.get(c)) for c in seed_columns],
                _blank(paper.get("ppl")),
                _blank(paper.get("bleu")),
                _blank(paper.get("bleu_diff_to_h8")),
            ]
        )
    per_run = io.StringIO()
    writer = csv.writer(per_run, lineterminator="\n")
    columns = ["name", "heads", "seed", "status", "d_head", "parameters", "updates", "trained_updates", *METRICS]
    writer.writerow([*columns, "p_value_vs_h8", "p_holm_vs_h8", "diff_ci95_low", "diff_ci95_high"])
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


def show(report: dict, console: Console) -> None:
    table = Table(title=f"Head-count study {report['study_dir']} — {_status_line(report)}", title_justify="left")
    for header in SHORT_HEADERS:
        table.add_column(header, justify="left" if header == "h" else "right", no_wrap=True)
    for row in report["by_heads"]:
        table.add_row(*_row_cells(row), style="bold" if row["heads"] == BASELINE_HEADS else None)
    if console.is_terminal:
        console.print(table)
    else:  # a log file or a pipe has no width to respect: never cut the numbers
        wide = Console(file=io.StringIO(), width=250, color_system=None)
        wide.print(table)
        console.out("\n".join(line.rstrip() for line in wide.file.getvalue().splitlines()), highlight=False)
    console.print(
        "Δ: h minus h=8, mean over the seeds both have; p: two-sided paired bootstrap of the seed-averaged test BLEU "
        "against h=8; p t: paired t-test over seeds; Holm: adjusted over the h compared; paper: Table 3 (A), "
        "newstest2013 dev (another data set and model size: compare shapes).",
        highlight=False,
    )
    claims = report["claims"]
    ours = claims["ours"]
    ours_text = (
        f"ours {_signed(ours['test_bleu'])} test BLEU, {_signed(ours['valid_bleu'])} validation BLEU"
        if ours
        else "ours: needs finished h=1 and h=8 runs"
    )
    console.print(
        f"h=8 − h=1: article claims {_signed(claims['article']['h8_minus_h1_bleu'], 1)} BLEU, "
        f"paper {_signed(claims['paper']['h8_minus_h1_bleu'], 1)} (dev), {ours_text}",
        highlight=False,
    )
    console.print(claims["conclusion"], highlight=False)
    console.print(provenance.summary_line(report["provenance"]), highlight=False)
    for note in report["notes"]:
        console.print(f"note: {note}", highlight=False)


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
            "label": "test BLEU (ours)",
            "ours": ours("test_bleu"),
            "paper": {h: v["bleu"] for h, v in PAPER_TABLE_3A.items()},
            "paper_label": "paper BLEU (newstest2013 dev)",
        },
        {
            "label": "validation perplexity (ours)",
            "ours": ours("valid_ppl"),
            "paper": {h: v["ppl"] for h, v in PAPER_TABLE_3A.items()},
            "paper_label": "paper PPL (newstest2013 dev)",
        },
    ]
    head_count_plot(
        panels,
        path,
        f"Head count (d_k = d_model / h): {report['study_dir']} — {report['runs_done']}/{report['runs_total']} runs",
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
    """`mhatrain report`: gather, test, write Markdown/CSV/JSON/PNG and show the table."""
    report = build_report(Path(study_dir), n_samples)
    paths = write(report, Path(study_dir))
    show(report, console)
    console.print("report: " + "  ".join(str(p) for p in paths), highlight=False)
    return report
