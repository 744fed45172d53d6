"""`mhatrain prune RUN --l0 0,0.01,0.1 --out DIR`: learned head gates (Voita et al. 2019) fine-tuned from a
trained run, one run per L0 penalty λ, each fine-tuned until its gates settle, then evaluated and pruned.

A prune directory (this module names its files; prune_report.py writes the report from them):
    prune.yaml           the source run, its checkpoint, the λs, --window, --max-updates, the --set values
    provenance.json      one session per `mhatrain prune` (core/provenance.py)
    l0=0.01/ ...         one run directory per λ: the source's config with model.head_gates.l0=λ, its
                         tokenizer, and what `train` writes (metrics.jsonl records each head's P(open) at
                         every logged update); eval/test.beamK.last.json; outcome.json when it is done;
                         layout.yaml, the open heads per kind and layer as model.heads_per_layer (a
                         fixed-layout control trains them from scratch), written with the report
    pruned/l0=0.01/      the λ run's closed heads cut out of its weights (inference/pruned.py)
    importance.json      the source with as many heads open as each λ run, the least important masked
                         (analysis/importance_counts.py): measured once every λ run is finished, one count
                         at a time, so a rerun measures only the counts it lacks
    report.md, report.json, gate-maps.png, gate-trajectories.png, gates-vs-importance.png   (prune_report.py,
                         gates_vs_importance.py; with --grid, or a grid recorded by an earlier run, the
                         head-count study's points beside them)

How a λ run starts: from the weights of the source's best.pt (its gates, which the source lacks, start
open), a fresh optimiser, learning-rate schedule and progress, and the source's seed; the session in
its provenance.json names the checkpoint (init_from). It then trains in chunks of --window updates with
`train --resume` (the training loop itself, so a resume after kill -9 is exact): after each chunk the
run stops if its gates have settled, else train.max_steps grows by a window, up to --max-updates.

Settled at update b ≥ --min-updates: the number of open heads (evaluation gate > 0, the heads a pruned
model keeps) is the same at every logged update of the last window [b − window, b], and no head's P(open)
moved by SETTLE_TOLERANCE or more across it (a gate on its way moves: log α changes by about its
learning rate per update). The floor is there because every gate starts open with room to spare
(log α = 3, model/gates.py) while the fresh schedule warms up: log α's learning rate
(model.head_gates.lr_scale times the schedule's) adds up to the 5.4 that closes a gate only after
about 400 updates of the base config, so before that no count changes though the gates have not settled. Whether a run settled, and where, is a function of its metrics records, so a
resumed prune decides as an uninterrupted one did.

The λ run is evaluated and pruned at its last checkpoint (the settled gates), not best.pt: best.pt is
selected by validation cross-entropy, which the L0 penalty trades for closed heads.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml
from rich.console import Console

from ...analysis.importance_counts import importance_at_counts
from ...core.checkpoint import load_checkpoint
from ...core.config import Config, dump_config, load_config
from ...core.errors import CheckpointError, MhatrainError
from ...core.files import atomic_write_json, atomic_write_text, read_json
from ...core.provenance import record_session, session
from ...core.rundir import BEST, CONFIG_FILE, LAST, TOKENIZER_FILE, eval_path, is_run_dir, read_summary
from ...inference.pruned import write_pruned_run
from ...inference.trained import evaluate_run, load_run
from ...model.transformer import count_parameters
from ...training.loop import train
from ...training.metrics import gate_history
from ..grid.directory import is_study, read_yaml, study_lock
from ..reports.gate_study_cost import gate_study_cost
from ..reports.gates_vs_importance import grid_points
from ..reports.prune_report import write_report

PRUNE_FILE = "prune.yaml"
OUTCOME_FILE = "outcome.json"  # in a λ run directory, once it is trained, evaluated and pruned
PRUNED_DIR = "pruned"
IMPORTANCE_FILE = "importance.json"
LAYOUT_FILE = "layout.yaml"  # in a λ run directory: its open heads as model.heads_per_layer
SPLIT = "test"
WHICH = "last"  # the checkpoint a λ run is evaluated and pruned at: its settled gates
SETTLE_TOLERANCE = 0.02  # a settled head's P(open) moves less than this over a window
MAX_EPOCHS = 1_000_000  # the fine-tune stops on --max-updates or settled gates, never on epochs
# Keys the prune command sets itself in every λ run: a --set may not give them.
OWN_KEYS = ("model.head_gates.l0", "train.max_steps", "train.max_epochs", "train.patience")


@dataclass(frozen=True)
class PrunePlan:
    """What one prune directory fine-tunes: every λ from the same source checkpoint, alike."""

    source: Path  # the source run directory
    out: Path
    l0s: list[float]
    window: int  # updates over which the open-head count must not change (settled)
    min_updates: int  # no run is called settled before this update: its gates need time to move at all
    max_updates: int  # the cap on a λ run's updates, settled or not
    overrides: list[str]  # --set values for every λ run (e.g. train.lr_factor)
    grid: Path | None = None  # --grid: a head-count study whose points the report sets beside the gates

    @property
    def checkpoint(self) -> Path:
        return self.source / BEST

    def run_dir(self, l0: float) -> Path:
        return self.out / l0_name(l0)

    def pruned_dir(self, l0: float) -> Path:
        return self.out / PRUNED_DIR / l0_name(l0)


def l0_name(l0: float) -> str:
    """l0=0.01: a λ run's folder name."""
    return f"l0={l0:g}"


# ----------------------------------------------------------------------------- options


def prune_plan(
    source: Path,
    out: Path | None,
    l0: str,
    window: int,
    min_updates: int,
    max_updates: int,
    overrides: list[str],
    grid: Path | None = None,
) -> PrunePlan:
    """`mhatrain prune`'s options → its plan: --l0's penalties parsed, --out by default RUN_DIR-prune."""
    out = out if out is not None else source.with_name(source.name + "-prune")
    return PrunePlan(source, out, parse_l0s(l0), window, min_updates, max_updates, overrides, grid)


def parse_l0s(text: str) -> list[float]:
    """`--l0 0,0.01,0.1`: distinct, finite, non-negative penalties in the order given; one-line errors."""
    items = [item.strip() for item in str(text).split(",")]
    if not any(items):
        raise MhatrainError("--l0: give a comma-separated list of penalties λ ≥ 0, e.g. --l0 0,0.01,0.1")
    values: list[float] = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            raise MhatrainError(
                f"--l0: {item!r} is not a number (give penalties λ ≥ 0, e.g. --l0 0,0.01,0.1)"
            ) from None
        if not math.isfinite(value) or value < 0:
            raise MhatrainError(f"--l0: {item} is not a penalty λ ≥ 0 (finite and not negative)")
        if l0_name(value) in map(l0_name, values):
            raise MhatrainError(f"--l0: {item} is given twice")
        values.append(value)
    return values


def check_plan(plan: PrunePlan) -> Config:
    """One-line errors for the source run and the options, before anything is written; the config of
    the first λ run (every λ's is the same but for λ and the update limit)."""
    if plan.window < 1 or plan.max_updates < 1 or plan.min_updates < 0:
        raise MhatrainError("--window and --max-updates must be at least 1 update, --min-updates at least 0")
    if plan.min_updates > plan.max_updates:
        raise MhatrainError(f"--min-updates {plan.min_updates} is above --max-updates {plan.max_updates}")
    if plan.max_updates % plan.window:
        raise MhatrainError(
            f"--max-updates {plan.max_updates} must be a multiple of --window {plan.window} "
            "(the gates are checked at the end of each window)"
        )
    if not is_run_dir(plan.source):
        raise MhatrainError(f"{plan.source} is not a run directory (no {CONFIG_FILE}): prune a trained run")
    if not plan.checkpoint.is_file():
        raise MhatrainError(f"{plan.source} has no {BEST} (its selected checkpoint) to fine-tune from")
    if plan.grid is not None and not is_study(plan.grid):
        raise MhatrainError(f"--grid {plan.grid}: not a head-count study directory (made by `mhatrain ablate`)")
    for item in plan.overrides:
        key = item.partition("=")[0].strip()
        if key in OWN_KEYS:
            raise MhatrainError(f"--set {item}: prune sets {key} itself (use --l0, --window, --max-updates)")
    config = run_config(plan, plan.l0s[0], plan.window)
    if plan.window % config.train.log_every:
        raise MhatrainError(
            f"--window {plan.window} must be a multiple of train.log_every={config.train.log_every} "
            "(the open heads are recorded at each logged update; --set train.log_every=N to change it)"
        )
    return config


def run_config(plan: PrunePlan, l0: float, max_steps: int) -> Config:
    """A λ run's config: the source run's, with gates of penalty λ, the --set values, and the update limit."""
    own = [f"model.head_gates.l0={l0!r}", f"train.max_steps={max_steps}", f"train.max_epochs={MAX_EPOCHS}"]
    return load_config(plan.source / CONFIG_FILE, [*plan.overrides, *own, "train.patience=0"])


# ----------------------------------------------------------------------------- the prune directory


def open_prune_dir(plan: PrunePlan) -> list[float]:
    """Create prune.yaml, or check that the directory's was made from the same source and settings; the
    λs of the directory (those recorded, then new ones: a prune directory can grow)."""
    path = plan.out / PRUNE_FILE
    recorded = read_yaml(path)
    if recorded is None and path.exists():
        raise MhatrainError(f"{path}: cannot read it as a prune record (a YAML mapping)")
    if recorded is None and plan.out.is_dir() and any(not p.name.startswith(".") for p in plan.out.iterdir()):
        raise MhatrainError(f"{plan.out} is not empty and holds no prune study ({PRUNE_FILE}): choose another --out")
    record = _record(plan, recorded)
    if recorded is not None:
        mine = {k: v for k, v in record.items() if k not in ("l0", "created", "grid")}
        differs = [k for k, v in mine.items() if recorded.get(k) != v]
        if differs:
            shown = "; ".join(f"{k}: {recorded.get(k)!r} there, {mine[k]!r} now" for k in differs)
            raise MhatrainError(f"{plan.out} holds a prune study made otherwise ({shown}): use another --out")
    text = yaml.safe_dump(record, sort_keys=False)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)
    return record["l0"]


def _record(plan: PrunePlan, recorded: dict | None) -> dict:
    l0s = list(recorded.get("l0") or []) if recorded else []
    return {
        "source": str(plan.source.resolve()),
        "checkpoint": BEST,
        "l0": [*l0s, *(l0 for l0 in plan.l0s if l0_name(l0) not in map(l0_name, l0s))],
        "window": plan.window,
        "min_updates": plan.min_updates,
        "max_updates": plan.max_updates,
        "overrides": list(plan.overrides),
        "grid": str(plan.grid.resolve()) if plan.grid is not None else (recorded or {}).get("grid"),
        "created": recorded.get("created") if recorded else datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def read_plan(out: Path) -> dict:
    """prune.yaml of a prune directory (empty when missing)."""
    return read_yaml(Path(out) / PRUNE_FILE) or {}


def read_outcome(run_dir: Path) -> dict | None:
    """A finished λ run's outcome.json; None until it is trained, evaluated and pruned."""
    return read_json(Path(run_dir) / OUTCOME_FILE)


# ----------------------------------------------------------------------------- running


def run_prune(plan: PrunePlan, console: Console) -> dict:
    """`mhatrain prune`: check, record, fine-tune every unfinished λ, then report (prune_report.py)."""
    check_plan(plan)
    with study_lock(plan.out, "prune"):
        l0s = open_prune_dir(plan)
        record_session(plan.out, session())
        done = [l0 for l0 in plan.l0s if read_outcome(plan.run_dir(l0)) is not None]
        if done:
            console.print(f"{len(done)} of {len(plan.l0s)} λ runs already finished: skipped", highlight=False)
        for l0 in plan.l0s:
            if l0 in done:
                continue
            console.print(f"[bold]λ = {l0:g}[/]: fine-tuning {plan.run_dir(l0)} from {plan.checkpoint}")
            try:
                finish_l0(plan, l0, console)
            except SystemExit:  # a signal stopped training after a checkpoint
                console.print(
                    f"prune interrupted during λ = {l0:g}: run the same `mhatrain prune` command again to continue",
                    highlight=False,
                )
                raise
        return report(plan.out, l0s, console)


def report(out: Path, l0s: list[float], console: Console) -> dict:
    """The report of prune directory `out` over its λ runs `l0s` (finished ones; the rest named pending).
    Once all are finished, importance pruning of the source is measured at their open-head counts (or read
    from importance.json), and the recorded grid's points are read."""
    record = read_plan(out)
    outcomes = [o for l0 in l0s if (o := read_outcome(out / l0_name(l0))) is not None]
    pending = [l0_name(l0) for l0 in l0s if read_outcome(out / l0_name(l0)) is None]
    histories = [gate_history(out / o["run"]) for o in outcomes]
    for outcome in outcomes:
        write_layout(out / outcome["run"], outcome)
    importance = None
    if outcomes and not pending:
        decode = load_config(out / outcomes[0]["run"] / CONFIG_FILE, check_paths=False).decode
        counts = [o["open_total"] for o in outcomes]
        importance = importance_at_counts(
            Path(record["source"]), counts, out / IMPORTANCE_FILE, decode.beam, decode.alpha, console, split=SPLIT
        )
    grid = grid_points(Path(record["grid"])) if record.get("grid") else None
    cost = None
    if outcomes and not pending:
        grid_dir = Path(record["grid"]) if record.get("grid") else None
        cost = gate_study_cost(Path(record["source"]), [out / o["run"] for o in outcomes], grid_dir)
    return write_report(out, record, outcomes, histories, pending, console, importance, grid, cost)


def write_layout(run_dir: Path, outcome: dict) -> Path:
    """layout.yaml of a finished λ run: its pruned model's heads per kind and layer, as the config key
    model.heads_per_layer, with the `--set` that trains a model of that layout from scratch."""
    layout = outcome["pruned"]["heads_per_layer"]
    inline = ", ".join(f"{kind}: {counts}" for kind, counts in layout.items())
    header = [
        f"# The open heads of {outcome['run']}'s gates ({outcome['open_total']} of {outcome['heads_total']}) per kind",
        "# and layer from the bottom, each head of the source's size. To train this layout from scratch:",
        f"#   mhatrain train CONFIG --set 'model.heads_per_layer={{{inline}}}'",
    ]
    text = (
        "\n".join(header)
        + "\n"
        + yaml.safe_dump({"model": {"heads_per_layer": layout}}, default_flow_style=None, sort_keys=False)
    )
    path = Path(run_dir) / LAYOUT_FILE
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)
    return path


def finish_l0(plan: PrunePlan, l0: float, console: Console) -> dict:
    """Fine-tune one λ until its gates settle (or the cap), evaluate it on the test split, prune it, and
    write its outcome.json. Every step is skipped when its file is there: a rerun continues."""
    run_dir = plan.run_dir(l0)
    _lay_out(plan, l0)
    settled_at = fine_tune(plan, l0, console)
    config = run_config(plan, l0, 0)
    test = read_json(eval_path(run_dir, SPLIT, config.decode.beam, WHICH))
    if test is None:
        test = evaluate_run(run_dir, SPLIT, beam=None, alpha=None, which=WHICH, overrides=[], console=console)
    pruned = plan.pruned_dir(l0)
    if pruned.exists() and not (pruned / BEST).is_file():  # a write cut short by a kill: redo it
        shutil.rmtree(pruned)
    if not pruned.exists():
        write_pruned_run(run_dir, pruned, which=WHICH)
    outcome = _outcome(plan, l0, settled_at, test)
    atomic_write_json(run_dir / OUTCOME_FILE, outcome)
    return outcome


def _lay_out(plan: PrunePlan, l0: float) -> None:
    """A λ run directory holds its config and the source's tokenizer before it trains, so that
    `train --resume` is the one call for any state (and encodes with the vocabulary of the weights)."""
    run_dir = plan.run_dir(l0)
    if not (run_dir / TOKENIZER_FILE).is_file():
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plan.source / TOKENIZER_FILE, run_dir / TOKENIZER_FILE)
    if not (run_dir / CONFIG_FILE).is_file():
        dump_config(run_config(plan, l0, plan.window), run_dir / CONFIG_FILE)


def fine_tune(plan: PrunePlan, l0: float, console: Console) -> int | None:
    """Train the λ run a window at a time until its gates settle or it reaches --max-updates; returns the
    update where they settled (None: not within the cap). Windows that the run's checkpoint has passed
    were not settled (else training would have stopped there), so a rerun starts at the current one."""
    run_dir, window = plan.run_dir(l0), plan.window
    target = max(window, math.ceil(_checkpoint_step(run_dir) / window) * window)
    while True:
        train(run_config(plan, l0, target), run_dir, resume=True, console=console, init_from=plan.checkpoint)
        at = settled(gate_history(run_dir), target, window) if target >= plan.min_updates else None
        if at is not None or target >= plan.max_updates:
            line = f"gates settled at update {at}" if at is not None else f"gates not settled by update {target}"
            console.print(f"λ = {l0:g}: {line} (--window {window})", highlight=False)
            return at
        target += window


def _checkpoint_step(run_dir: Path) -> int:
    try:
        return int(load_checkpoint(run_dir / LAST)["progress"]["step"]) if (run_dir / LAST).is_file() else 0
    except (CheckpointError, KeyError, TypeError, ValueError):
        return 0  # a damaged last.pt: train's resume falls back on last.prev.pt and says so


def open_total(record: dict) -> int:
    """The open heads of a gate record (Transformer.gate_record), all kinds and layers together."""
    return sum(sum(layers) for layers in record["open_heads"].values())


def settled(history: list[dict], step: int, window: int) -> int | None:
    """`step` if the open-head count is the same at every logged update in [step − window, step] (`step`
    itself logged) and no head's P(open) moved by SETTLE_TOLERANCE or more from the first of them to
    `step`, else None."""
    records = [r for r in history if step - window <= r["step"] <= step]
    if not records or records[-1]["step"] != step:
        return None
    counts = [open_total(r) for r in records]
    moved = max(abs(a - b) for a, b in zip(_p_open(records[0]), _p_open(records[-1])))
    return step if max(counts) - min(counts) < 1 and moved < SETTLE_TOLERANCE else None


def _p_open(record: dict) -> list[float]:
    return [p for kind in record["p_open"] for layer in record["p_open"][kind] for p in layer]


def _outcome(plan: PrunePlan, l0: float, settled_at: int | None, test: dict) -> dict:
    """What the report says of one λ run, from its files."""
    run_dir = plan.run_dir(l0)
    history = gate_history(run_dir)
    final = history[-1]
    summary = read_summary(run_dir) or {}
    pruned = load_run(plan.pruned_dir(l0), "best", strict=True)
    return {
        "l0": l0,
        "run": l0_name(l0),
        "updates": summary.get("updates", final["step"]),
        "settled_at": settled_at,
        "window": plan.window,
        "min_updates": plan.min_updates,
        "max_updates": plan.max_updates,
        "open_heads": final["open_heads"],
        "open_total": open_total(final),
        "heads_total": sum(len(p) for layers in final["p_open"].values() for p in layers),
        "p_open": final["p_open"],
        "test": {
            "bleu": test["bleu"],
            "chrf": test["chrf"],
            "cross_entropy": test["cross_entropy"]["nats_per_token"],
            "checkpoint": WHICH,
            "update": test.get("update"),
        },
        "parameters": test.get("parameters"),
        "pruned": {
            "run": f"{PRUNED_DIR}/{l0_name(l0)}",
            "parameters": count_parameters(pruned.model),
            "heads_per_layer": dataclasses.asdict(pruned.config.model.heads_per_layer),
        },
    }
