"""What the run directories of a head-count study say: one RunRecord per grid point, the study's grid,
and the study's measure (which checkpoint of a run the comparison counts).

Every number is read from the run directories, so a report works on a partial study and on run
directories that a cluster filled by running the commands of `mhatrain ablate --dry-run`:
    config.yaml                     h (model.n_heads), d_model, decode.beam, train.precision; a layout
                                    point's model.heads_per_layer (its total heads)
    provenance.json                 the device that trained the run (GPU, or CPU model)
    train_summary.json              parameters, updates, training time, target tokens/s
    metrics.jsonl                   validation perplexity at the update of the best checkpoint, and the
                                    update with the lowest validation loss (the study's measure: MEASURE)
    eval/valid.beamK.json           validation BLEU (whole validation set, beam K = decode.beam)
    eval/test.beamK.json, .hyp.txt  test BLEU and chrF; the hypotheses feed the bootstrap
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...core import provenance
from ...core.config import config_from_dict, load_config
from ...core.errors import MhatrainError
from ...core.files import portable_text, read_jsonl
from ...core.rundir import CONFIG_FILE, EVAL_DIR, METRICS_FILE, eval_path, read_eval, read_summary
from ...data.sources import load_split, split_name
from ...model.sizes import head_size
from .directory import (
    EVAL_SPLITS,
    STUDY_FILE,
    point_dirs,
    read_base_config,
    read_record,
    read_yaml,
    run_state,
)
from .fixed_layouts import total_heads
from .points import Layout, Point

MEASURE = {
    "name": "loss-selected checkpoint",
    "text": "each run counts at its checkpoint with the lowest validation loss (train.early_stop_metric: loss; the "
    "last checkpoint at the fixed budget whenever the loss still falls): its test BLEU and its cross-entropy. A "
    "checkpoint chosen by the noisy greedy validation BLEU can be picked early by chance and biases a comparison; "
    "the validation loss ranks checkpoints smoothly. Runs whose evaluated checkpoint is another one are left out "
    "of the tests and of every number the report gives per h.",
}


@dataclass
class RunRecord:
    """What one grid point's run directory says, as far as it got."""

    name: str
    heads: int
    seed: int
    run_dir: str  # relative to the study directory
    # A layout point (`ablate --layout NAME=FILE`): its NAME, and its heads summed over every attention module;
    # `heads` is then its model.n_heads, which sets the head size only. None for an h point. A layout point is
    # an arm of its own: every table, test and figure per h leaves it out (h_runs), stats/layouts.py tests it.
    layout: str | None = None
    layout_heads: int | None = None
    status: str = "pending"  # one of study.STATES: pending | training | evaluating | done
    d_head: int | None = None
    parameters: int | None = None
    updates: int | None = None  # the update of the evaluated checkpoint (while training: the last validated)
    trained_updates: int | None = None  # updates trained in all
    valid_ppl: float | None = None
    valid_nll: float | None = None  # validation cross-entropy (nats/token) at the evaluated checkpoint (metrics.jsonl)
    test_nll: float | None = None  # test cross-entropy (nats/token) of eval, where it wrote one
    test_nll_file: str | None = None  # its per-sentence NLL and tokens, relative to the study directory
    tested: bool = False  # finished and measured as the study measures (MEASURE): the runs the report counts
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


# ----------------------------------------------------------------------------- one run


def read_run(point: Point, run_dir: Path) -> RunRecord:
    """The record of one grid point: its config, then (once trained) its summary, then its evaluations."""
    record = RunRecord(point.name, point.heads, point.seed, point.name, point.layout and point.layout.name)
    config = read_yaml(run_dir / CONFIG_FILE)
    if config is None:
        record.status = run_state(run_dir, None)
        return record
    _read_config(record, config, point, run_dir)
    summary = read_summary(run_dir)
    valid_records = [r for r in read_jsonl(run_dir / METRICS_FILE) if r.get("kind") == "valid"]
    record.loss_selected_update = loss_selected_update(valid_records)
    if summary is None:  # laid out by `ablate` (config.yaml only), or training
        record.updates = valid_records[-1]["step"] if valid_records else None
        return record
    _read_summary(record, summary, valid_records)
    _read_evaluations(record, point, run_dir)
    at_evaluated = [r for r in valid_records if r.get("step") == record.updates]
    if at_evaluated:  # the validation of the evaluated checkpoint
        record.valid_nll = at_evaluated[-1].get("valid_loss")
    record.tested = record.status == "done" and record.test_hypotheses is not None and measured_as_chosen(record)
    return record


def _read_config(record: RunRecord, config: dict, point: Point, run_dir: Path) -> None:
    """Head size, beam, precision and device from config.yaml and provenance.json; the run's state."""
    model, decode = config.get("model") or {}, config.get("decode") or {}
    if record.layout is not None:
        _read_layout(record, config)
    elif model.get("n_heads") not in (None, point.heads):
        record.notes.append(f"config.yaml has n_heads={model.get('n_heads')}, not {point.heads} as its name says")
    if model.get("d_model") and record.heads:
        record.d_head = head_size(model["d_model"], record.heads, model.get("d_head"))
    record.beam = decode.get("beam")
    record.precision = (config.get("train") or {}).get("precision")
    record.device = _training_device(run_dir)
    record.status = run_state(run_dir, record.beam)


def _read_layout(record: RunRecord, config: dict) -> None:
    """A layout point's model.n_heads (its head size) and total heads, from its config.yaml."""
    try:
        model = config_from_dict(config, CONFIG_FILE, check_paths=False).model
    except MhatrainError as exc:
        record.notes.append(f"{CONFIG_FILE} does not load: {exc}")
        return
    record.heads, record.layout_heads = model.n_heads, total_heads(model)


def run_entry(run: RunRecord) -> dict:
    """A run as report.json lists it: an h point's without the layout fields, which it has no use for (a
    study without layouts reports exactly as before layout points existed)."""
    entry = asdict(run)
    if run.layout is None:
        del entry["layout"], entry["layout_heads"]
    return entry


def h_runs(runs: list[RunRecord]) -> list[RunRecord]:
    """The runs of the h points: what every table, test and figure per h counts (layout points aside)."""
    return [run for run in runs if run.layout is None]


def _read_summary(record: RunRecord, summary: dict, valid_records: list[dict]) -> None:
    """Parameters, updates and speed from train_summary.json; validation perplexity at best.pt's update."""
    record.parameters, record.trained_updates = summary.get("parameters"), summary.get("updates")
    record.updates = summary.get("best_step")  # eval scores best.pt
    record.train_seconds, record.tokens_per_s = summary.get("train_seconds"), summary.get("tokens_per_s")
    at_best = [r for r in valid_records if r.get("step") == summary.get("best_step")]
    if at_best:  # the checkpoint that eval scores is best.pt
        record.valid_ppl = at_best[-1].get("valid_ppl")


def _read_evaluations(record: RunRecord, point: Point, run_dir: Path) -> None:
    """Validation BLEU, test BLEU and chrF, the BLEU signature and the test hypotheses of `eval`."""
    valid = read_eval(run_dir, "valid", record.beam)
    test = read_eval(run_dir, "test", record.beam)
    if valid is not None:
        record.valid_bleu = valid.get("bleu")
    if test is None:
        return
    record.test_bleu, record.test_chrf = test.get("bleu"), test.get("chrf")
    cross_entropy = test.get("cross_entropy") or {}
    record.test_nll = cross_entropy.get("nats_per_token")
    if cross_entropy.get("file") and (run_dir / EVAL_DIR / cross_entropy["file"]).is_file():
        record.test_nll_file = (Path(point.name) / EVAL_DIR / cross_entropy["file"]).as_posix()
    record.bleu_signature = test.get("bleu_signature")
    if record.parameters is None:
        record.parameters = test.get("parameters")
    if test.get("update") is not None:
        record.updates = test["update"]
    hyps = eval_path(Path(point.name), "test", record.beam, suffix=".hyp.txt")
    record.test_hypotheses = hyps.as_posix() if (run_dir.parent / hyps).is_file() else None


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
    found = training_machines(run_dir)
    return " + ".join(found) if found else None


def training_machines(run_dir: Path) -> list[str]:
    """The machines of a run's sessions (provenance.json), in order of first appearance: the GPU's name, or
    the CPU model."""
    found = []
    for entry in provenance.read_sessions(run_dir):
        env = entry.get("environment") or {}
        name = env.get("device_name") if env.get("device") not in (None, "cpu") else env.get("cpu") or "cpu"
        if name and name not in found:
            found.append(name)
    return found


def factor_of(run: RunRecord) -> str:
    """Precision and device of a run, as one label ('bf16 · AMD EPYC')."""
    return f"{run.precision or 'precision unknown'} · {run.device or 'device unknown'}"


def test_split(study_dir: Path, run_dir: str):
    """The test split's sources and references, as the config of one run of the study names them."""
    config = load_config(Path(study_dir) / run_dir / CONFIG_FILE, check_paths=False)
    return load_split(config.data, split_name(config, "test"))


# ----------------------------------------------------------------------------- the whole study


def gather(study_dir: Path, layouts: bool = False) -> tuple[dict, list[RunRecord]]:
    """The study's grid (recorded, plus any run directories found) and a record for every h point; with
    `layouts`, for every layout point too (after them). Without it, a caller that tabulates per h never
    sees a layout point, whose model.n_heads is no h of the grid."""
    study_dir = Path(study_dir)
    if not study_dir.is_dir():
        raise MhatrainError(f"study directory not found: {study_dir}")
    recorded = read_record(study_dir)
    points = {Point(h, s) for h in recorded.get("heads", []) for s in recorded.get("seeds", [])}
    points |= {
        Point.of_layout(Layout(name), s) for name in recorded.get("layouts") or {} for s in recorded.get("seeds", [])
    }
    points |= {point for point, _ in point_dirs(study_dir)}
    points = {point for point in points if layouts or point.layout is None}
    if not points:
        raise MhatrainError(
            f"{study_dir} holds no study: no {STUDY_FILE} and no h<H>-seed<S> run directories "
            f"(make one with `mhatrain ablate CONFIG --out {study_dir}`)"
        )
    seeds_order = list(dict.fromkeys([*recorded.get("seeds", []), *sorted({p.seed for p in points})]))
    ordered = sorted(
        points, key=lambda p: (p.layout is not None, p.layout and p.layout.name, p.heads, seeds_order.index(p.seed))
    )
    runs = [read_run(p, study_dir / p.name) for p in ordered]
    grid = _grid(study_dir, recorded, points, seeds_order)
    # study.yaml lists the code `ablate` ran; points trained or evaluated by other commands add theirs
    from_runs = _recorded_code([(study_dir / run.run_dir, run.beam) for run in runs])
    extra = [code for code in from_runs if code not in grid["code"]]
    grid["code_source"] = (
        ("study.yaml and the runs' provenance" if extra else "study.yaml") if grid["code"] else "the runs' provenance"
    )
    grid["code"] = grid["code"] + extra
    if grid["d_model"] is None:
        grid["d_model"] = next((r.d_head * r.heads for r in runs if r.d_head), None)
    for run in runs:
        if run.d_head is None and grid["d_model"] and run.heads:
            run.d_head = head_size(grid["d_model"], run.heads)
    return grid, runs


def _grid(study_dir: Path, recorded: dict, points: set[Point], seeds_order: list[int]) -> dict:
    """The grid as study.yaml and base-config.yaml record it (d_model may still be unknown: gather)."""
    base = read_base_config(study_dir)
    return {
        "heads": sorted({p.heads for p in points if p.layout is None}),
        "seeds": seeds_order,
        "d_model": (base.get("model") or {}).get("d_model"),
        "d_head": (base.get("model") or {}).get("d_head"),  # set: a head size independent of h
        "config": portable_text(recorded["config"], Path.cwd()) if recorded.get("config") else None,
        "overrides": recorded.get("overrides", []),
        "code": recorded.get("code") or [],
    }


def _recorded_code(runs: list[tuple[Path, int | None]]) -> list[dict]:
    """The distinct code versions that trained or evaluated the runs (run directory, decode.beam), in
    order of first appearance."""
    found = []
    for run_dir, beam in runs:
        for entry in point_sessions(run_dir, beam):
            if entry.get("code") and entry["code"] not in found:
                found.append(entry["code"])
    return found


def point_sessions(run_dir: Path, beam: int | None) -> list[dict]:
    """The provenance sessions of a grid point: its training sessions and those of its evaluations."""
    evals = [read_eval(run_dir, split, beam) or {} for split in EVAL_SPLITS]
    return [
        *provenance.read_sessions(run_dir),
        *(e["provenance"] for e in evals if isinstance(e.get("provenance"), dict)),
    ]
