"""Training: the loop (its data is prepare.py's; one update is step.py's; validation is validation.py's).

The loop reads top to bottom (`TrainingLoop.run`): for each epoch, deterministic token batches; for
each update, `accum_steps` batches of forward/backward, clip, Adam step (step.optimizer_update);
validate and checkpoint at the configured interval; stop on max_epochs, max_steps, early stopping or
a signal. Resuming restores model, optimiser, step, data position and RNG state (state.py), so a
resumed run produces the same weights as an uninterrupted one.

Started by torchrun, every process runs this loop (see core/distributed.py): an update takes
world × accum_steps batches, each process its share, and the gradient is the one that one process
would compute from all of them. Rank 0 alone validates, prints and writes files.
"""

from __future__ import annotations

import json
import math
import random
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from rich.console import Console

from ..core import provenance
from ..core.checkpoint import (
    check_compatible,
    checkpoint_state,
    drop_snapshots_after,
    load_checkpoint,
    load_latest,
    remove_partial_writes,
    resume_accum_steps,
    save_checkpoint,
    save_snapshot,
)
from ..core.config import Config, TrainConfig, accum_steps_for, dump_config
from ..core.distributed import Group, process_group
from ..core.errors import CheckpointError, MhatrainError
from ..core.files import atomic_write_text
from ..core.rundir import BEST, CONFIG_FILE, LAST, LAST_PREV, SUMMARY_FILE, TOKENIZER_FILE, is_run_dir
from ..core.runtime import check_gpu_bf16, loss_scaler, set_threads, slow_bf16_warning
from ..data.batches import Batch, Prefetcher, batch_indices, batch_sizes, bucket_lengths, collate, pair_lengths
from ..data.tokens import PAD, Encoded
from ..model.gates import LOG_ALPHA
from ..model.transformer import Transformer, build_model, count_parameters
from .metrics import MetricsLog, truncate_metrics, validated_at
from .prepare import Prepared, prepare_data
from .progress import TrainDisplay
from .state import TrainState, restore_rng, rng_state, set_rng_state, stop_reason, weights_state
from .step import Update, compile_model, make_optimizer, noam_lr, optimizer_update, parameter_groups, read_updates
from .tensorboard_log import check_available as check_tensorboard
from .validation import best_line, validate_on_main

SIGNAL_EVERY = 8  # on a GPU, updates between two agreements of the processes on a signal (StopSignal.agree)
COMPILE_BACKEND = "inductor"  # torch.compile's backend for train.compile (the tests pass a cheaper one)

# ----------------------------------------------------------------------------- a run, start to end


def train(
    config: Config,
    run_dir: Path,
    resume: bool = False,
    console=None,
    batch_change: str = "",
    init_from: Path | None = None,
) -> dict:
    """Train (or resume) the run in `run_dir`; returns a summary dict.

    Under torchrun every process calls this. `batch_change` decides a resume that would change the
    tokens per update (another number of processes or train.accum_steps): "" refuses it, "keep"
    adjusts train.accum_steps to keep them, "new" accepts the change. `init_from`: a checkpoint of
    another run whose weights a new run starts from (a fine-tune: its optimiser and progress start
    afresh; see init_weights); a resume continues from the run's own checkpoint and ignores it.
    """
    with process_group(config.train.device, config.train.dist_backend) as procs:
        return _train(config, Path(run_dir), resume, console, batch_change, procs, init_from)


def _train(
    config: Config, run_dir: Path, resume: bool, console, batch_change: str, procs: Group, init_from: Path | None = None
) -> dict:
    """`train` in this process: check the run directory, prepare the data, build or restore the model,
    run the updates (TrainingLoop), write the summary."""
    if not procs.is_main:
        console = Console(quiet=True)  # rank 0 speaks for all
    log = console.print if console is not None else print
    t = config.train
    if t.tensorboard:
        check_tensorboard()  # before any data is read or any model is built
    last = _open_run_dir(config, run_dir, resume, batch_change, procs, log)
    set_threads(t.threads)
    check_gpu_bf16(procs.device, t.precision)  # before any data is read
    torch.manual_seed(t.seed)
    random.seed(t.seed)
    prepared = _prepare_on_every_rank(config, run_dir, procs, log)
    model, optimizer, scaler, state = _build_or_resume(config, prepared, last, run_dir, procs, log)
    if last is None and init_from is not None:
        init_weights(model, init_from, prepared.tokenizer.fingerprint(), log)
    n_params = count_parameters(model)
    _log_setup(n_params, t, procs, log)
    if state.finished:
        log(f"run already finished ({state.stop_reason}); nothing to do")
        return _summary(state, n_params, run_dir)
    if procs.is_main:  # a resumed run appends a session: it may continue on another machine
        session = provenance.session(
            procs.device,
            prepared.sources,
            run_dir / TOKENIZER_FILE,
            resumed=last is not None,
            processes=procs.world,
            **({"init_from": str(Path(init_from).resolve())} if init_from is not None else {}),
        )
        provenance.record_session(run_dir, session)
    loop = TrainingLoop(config, run_dir, procs, prepared, model, optimizer, scaler, state, log)
    loop.run(console, resumed=last is not None)
    summary = _summary(state, n_params, run_dir)
    if procs.is_main:
        atomic_write_text(run_dir / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    log(f"done: {state.stop_reason}; {best_line(config, state)}")
    return summary


def _open_run_dir(config: Config, run_dir: Path, resume: bool, batch_change: str, procs: Group, log) -> dict | None:
    """Check the run directory (and, resuming, its checkpoint) against the config, then record the config.

    Returns the checkpoint to resume from, or None.
    """
    if resume and not is_run_dir(run_dir):
        raise CheckpointError(
            f"nothing to resume in {run_dir}: not a run directory (no config.yaml); "
            f"drop --resume to start a new run there"
        )
    last = load_latest(run_dir, log) if resume else None
    if resume and procs.is_main:
        for path in remove_partial_writes(run_dir):
            log(f"removed {path.name}, left by an interrupted write")
    if resume and last is None:
        log(f"no checkpoint in {run_dir} yet: starting from the beginning")
    if not resume and any((run_dir / n).exists() for n in (LAST, LAST_PREV, BEST)):
        raise CheckpointError(
            f"{run_dir} already holds a training run: pass --resume to continue it, or choose another --out"
        )
    if last is not None:
        _adjust_accum_steps(last, config, run_dir, batch_change, procs, log)
        check_compatible(last, config, str(run_dir / LAST))
    if procs.is_main:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MhatrainError(f"cannot create run directory {run_dir}: {exc.strerror}") from None
        dump_config(config, run_dir / CONFIG_FILE)
    return last


def _adjust_accum_steps(last: dict, config: Config, run_dir: Path, batch_change: str, procs: Group, log) -> None:
    """Resuming with another number of processes: set train.accum_steps (or train.tokens_per_update) as
    `batch_change` decides (core.checkpoint.resume_accum_steps), saying so."""
    t = config.train
    accum = resume_accum_steps(last, config, procs.world, batch_change, str(run_dir / LAST))
    if accum == accum_steps_for(t, procs.world):
        return
    tokens = procs.world * accum * t.max_tokens
    if t.tokens_per_update:
        log(f"train.tokens_per_update: {t.tokens_per_update} → {tokens} for {procs.world} × {accum} × {t.max_tokens}")
        t.tokens_per_update = tokens
    else:
        log(
            f"train.accum_steps: {t.accum_steps} → {accum} for {procs.world} × {accum} × {t.max_tokens} = "
            f"{tokens} tokens per update"
        )
        t.accum_steps = accum


def _prepare_on_every_rank(config: Config, run_dir: Path, procs: Group, log) -> Prepared:
    """Rank 0 prepares the data first (it may train the tokenizer, installs it in the run directory, and
    encodes and caches the training data); the others then read that tokenizer and map that cache.
    The other ranks print their own preparation lines, marked with their rank, so a launch shows which
    process encoded and which mapped; after this, rank 0 speaks for all."""
    if procs.is_main:
        prepared = prepare_data(config, run_dir, log)
    procs.barrier()
    if not procs.is_main:
        if not (run_dir / TOKENIZER_FILE).is_file():
            raise MhatrainError(
                f"rank {procs.rank} cannot see {run_dir / TOKENIZER_FILE}, written by rank 0: the run "
                f"directory must be on storage that every machine shares"
            )
        prepared = prepare_data(config, run_dir, lambda message: print(f"rank {procs.rank}: {message}", flush=True))
    return prepared


def _build_or_resume(
    config: Config, prepared: Prepared, last: dict | None, run_dir: Path, procs: Group, log
) -> tuple[Transformer, torch.optim.Optimizer, torch.amp.GradScaler, TrainState]:
    """The model, optimiser, loss scaler and state: new, or as checkpoint `last` left them (random
    state included); the metrics and snapshots past that checkpoint are dropped, to be redone."""
    t = config.train
    model = build_model(config.model, prepared.tokenizer.vocab_size, PAD).to(procs.device)
    optimizer = make_optimizer(
        parameter_groups(model, config.model.head_gates),
        t,
        noam_lr(1, config.model.d_model, t.warmup_steps, t.lr_factor),
    )
    scaler = loss_scaler(procs.device, t.precision)
    state = TrainState()
    if last is not None:
        check_compatible(last, config, str(run_dir / LAST), prepared.tokenizer.fingerprint())
        model.load_state_dict(last["model"])
        optimizer.load_state_dict(last["optimizer"])
        if "scaler" in last:
            scaler.load_state_dict(last["scaler"])
        state = TrainState(**last["progress"])
        # A finished run continues when its limits were raised (e.g. a larger train.max_steps).
        state.stop_reason = stop_reason(state, t)
        state.finished = bool(state.stop_reason)
        log(f"resuming at update {state.step} (epoch {state.epoch + 1}, batch {state.batch_in_epoch})")
    restore_rng(last, procs, t.seed, state.step)
    if procs.is_main:  # records and snapshots past the checkpoint are redone
        truncate_metrics(run_dir, state.step)
        drop_snapshots_after(run_dir, state.step)
    return model, optimizer, scaler, state


def init_weights(model: Transformer, path: Path, vocab_fingerprint: str, log) -> None:
    """Start `model` from the weights of checkpoint `path` (another run's, same vocabulary). Every weight
    must be there and fit, except the learned head gates that the checkpoint's model lacks: those keep
    their initial value (every head open)."""
    state = load_checkpoint(path)
    if state.get("vocab_fingerprint") != vocab_fingerprint:
        raise CheckpointError(f"{path}: made with another vocabulary than this run's tokenizer")
    try:
        missing, unexpected = model.load_state_dict(state["model"], strict=False)
    except RuntimeError as exc:
        raise CheckpointError(f"{path}: its weights do not fit this model ({str(exc).splitlines()[0]})") from None
    missing = [k for k in missing if not k.endswith("." + LOG_ALPHA)]
    if missing or unexpected:
        raise CheckpointError(f"{path}: its weights do not fit this model ({', '.join([*missing, *unexpected][:3])})")
    log(f"weights from {path} (update {state.get('progress', {}).get('step', 0)}); optimiser and schedule start afresh")


def _log_setup(n_params: int, t: TrainConfig, procs: Group, log) -> None:
    log(
        f"model: {n_params:,} parameters; device {procs.device}; precision {t.precision}; "
        f"threads {torch.get_num_threads()}"
    )
    if (warning := slow_bf16_warning(procs.device, t.precision)) is not None:
        log(warning)
    if procs.launched:
        log(
            f"processes: {procs.world} ({procs.backend}), each on its own share of every update's batches; "
            f"rank 0 validates and writes the checkpoints"
        )


# ----------------------------------------------------------------------------- the loop


@dataclass
class UpdatePlan:
    """How the training data is cut into updates."""

    lengths: list  # the training pairs' lengths (data.pair_lengths), which every epoch's batches follow
    per_update: int  # batches per update, all processes together: world × accum_steps
    per_epoch: int  # updates per epoch
    total: int  # updates of the whole run (train.max_epochs, train.max_steps)
    tokens_per_update: int  # per_update × train.max_tokens: the token budget of one update


def plan_updates(train: Encoded, t: TrainConfig, procs: Group, log) -> UpdatePlan:
    """The plan of the run's updates, said in a line (and how often on a GPU checkpoints come)."""
    lengths = pair_lengths(train)
    accum = accum_steps_for(t, procs.world)
    per_update = procs.world * accum
    per_epoch = math.ceil(len(batch_indices(lengths, t.max_tokens, t.seed, 0)) / per_update)
    total = t.max_epochs * per_epoch if not t.max_steps else min(t.max_steps, t.max_epochs * per_epoch)
    plan = UpdatePlan(lengths, per_update, per_epoch, total, per_update * t.max_tokens)
    processes = f" × {procs.world} process{'es' if procs.world > 1 else ''}" if procs.launched else ""
    asked = f" (train.tokens_per_update={t.tokens_per_update})" if t.tokens_per_update else ""
    log(
        f"batches: ≤{t.max_tokens} tokens × {accum} accumulation{processes} = ≤{plan.tokens_per_update} "
        f"tokens per update{asked}; {per_epoch} updates per epoch"
    )
    if t.checkpoint_every and procs.device.type != "cpu" and t.gpu_checkpoint_minutes:
        log(
            f"checkpoints: every {t.checkpoint_every} updates, at most one per {t.gpu_checkpoint_minutes:g} minutes "
            f"on {procs.device} (train.gpu_checkpoint_minutes); and at every validation"
        )
    return plan


class TrainingLoop:
    """One session's updates, from `state` on: `run` is the loop, the other methods its named steps.

    Three views of one model: `model`, the raw module (checkpoints save and validation runs it);
    `ddp_model`, the same in DistributedDataParallel when launched (gradients are exchanged through
    it); `compiled_step`, which runs each update on torch.compile's version of ddp_model or on ddp_model.

    The host reads an update's loss and verdict only when it logs or decides something (a log line,
    validation, a checkpoint, stopping), all the pending ones at once (`settle`); until then an update
    counts as applied in `state.step`, and nothing waits for the device.
    """

    def __init__(
        self,
        config: Config,
        run_dir: Path,
        procs: Group,
        prepared: Prepared,
        model: Transformer,
        optimizer: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler,
        state: TrainState,
        log: Callable[[str], None],
    ):
        self.config, self.t, self.run_dir, self.procs, self.prepared = config, config.train, run_dir, procs, prepared
        self.model, self.optimizer, self.scaler, self.state, self.log = model, optimizer, scaler, state, log
        self.vocab_fp = prepared.tokenizer.fingerprint()
        self.ddp_model = procs.wrap(model)
        self.compiled_step = CompiledStep(self.ddp_model, self.t.compile, log, config.model.max_positions)
        self.saved_at = time.monotonic()  # of the latest checkpoint (or of the start)
        self.pending: list[tuple[Update, int, float]] = []  # updates not read back: (update, epoch, train_seconds)
        self.last_skipped = False  # whether the latest update read back was skipped
        self.display: TrainDisplay | None = None  # both open while `run` runs
        self.metrics: MetricsLog | None = None

    def run(self, console: Console | None, resumed: bool) -> None:
        """Plan the updates, then run epochs of them until a limit or early stopping, and the last
        validation and checkpoint; on a signal, a checkpoint and SystemExit."""
        plan = plan_updates(self.prepared.train, self.t, self.procs, self.log)
        self.state.world_size, self.state.tokens_per_update = self.procs.world, plan.tokens_per_update
        self.model.train()
        board = self.t.tensorboard and self.procs.is_main
        with (
            StopSignal() as stop,
            TrainDisplay(console, plan.total, self.state.step) as self.display,
            MetricsLog(self.run_dir, board, self.state.step if resumed else None) as self.metrics,
        ):
            while self.state.epoch < self.t.max_epochs and not self.state.finished:
                signalled = self.run_epoch(plan, stop)
                if signalled and not self.state.finished:
                    self.exit_on_signal(signalled)
            self.finish()

    def run_epoch(self, plan: UpdatePlan, stop: StopSignal) -> str | None:
        """The current epoch's updates from state.batch_in_epoch on, until its end, the end of training
        or a signal; returns the signal the processes agreed on, if any."""
        state, t, procs = self.state, self.t, self.procs
        batches = batch_indices(plan.lengths, t.max_tokens, t.seed, state.epoch)
        groups = [batches[k : k + plan.per_update] for k in range(state.batch_in_epoch, len(batches), plan.per_update)]
        signalled = None
        bucket_limit = self.compiled_step.bucket_limit
        with Prefetcher(lambda g: collate_share(self.prepared.train, g, procs, bucket_limit), groups) as shares:
            for group, (share, sizes) in zip(groups, shares):
                update = self.run_update(share, sizes)
                end_of_epoch = self.count(update, len(group), len(batches))
                settled = bool(update.skipped or end_of_epoch or self.decision_due())
                skipped = self.settle() if settled else False
                self.validate_or_checkpoint(skipped, end_of_epoch)
                state.stop_reason = stop_reason(state, t)
                state.finished = bool(state.stop_reason)
                # Agreeing on signals is a collective that NCCL makes the host wait for: there, every
                # SIGNAL_EVERY updates and whenever the host has read the updates anyway
                if procs.device.type == "cpu" or settled or state.step % SIGNAL_EVERY == 0:
                    signalled = stop.agree(procs)
                if state.finished or signalled:
                    break
        return signalled

    def run_update(self, share: list[tuple[Batch, int]], sizes) -> Update:
        """One optimiser update (step.optimizer_update) on this process's share of its batches, timed."""
        started = time.perf_counter()
        lr = noam_lr(self.state.step + 1, self.config.model.d_model, self.t.warmup_steps, self.t.lr_factor)
        update = self.compiled_step.run(
            lambda m: optimizer_update(
                m, self.ddp_model, self.optimizer, self.scaler, share, self.t, lr, self.procs, sizes
            ),
            self.optimizer,
        )
        self.state.train_seconds += time.perf_counter() - started
        return update

    def count(self, update: Update, n_batches: int, epoch_batches: int) -> bool:
        """Move the state past an update of `n_batches` batches, counted as applied until the host reads
        it (settle; only then is it logged). Returns whether it ended the epoch."""
        state = self.state
        state.batch_in_epoch += n_batches
        state.step += int(not update.skipped)
        self.pending.append((update, state.epoch + 1, state.train_seconds))
        self.display.advance(state.step)
        if state.batch_in_epoch < epoch_batches:
            return False
        state.epoch += 1
        state.batch_in_epoch = 0
        return True

    def decision_due(self) -> bool:
        """Whether, counting the pending updates as applied, the latest one is due a log line, a
        validation, a checkpoint or the end of training: then they are read first (settle)."""
        step, t = self.state.step, self.t
        return bool(
            step % t.log_every == 0
            or step == 1
            or (t.valid_every and step % t.valid_every == 0)
            or self.checkpoint_due(False)
            or stop_reason(self.state, t)
        )

    def settle(self) -> bool:
        """Read the pending updates (one wait for the device) and account for them in the order they
        ran, as if each had been read at once: skips (which may stop training), steps, tokens, log
        lines. Returns whether the latest update was skipped."""
        if not self.pending:
            return self.last_skipped
        state = self.state
        state.step -= sum(not update.skipped for update, _, _ in self.pending)  # undo the provisional count
        window, self.pending = self.pending, []
        for (_, epoch, seconds), stats in zip(window, read_updates([u for u, _, _ in window])):
            self.last_skipped = "skipped" in stats
            if self.last_skipped:
                bad = not stats.get("loss_scale_lowered")
                _note_skipped(state, stats["skipped"], self.t.max_bad_updates, self.run_dir, self.log, bad=bad)
                continue
            state.bad_in_a_row = 0
            state.step += 1
            state.target_tokens += stats["tokens"]
            if state.step % self.t.log_every == 0 or state.step == 1:
                self.log_update(stats, epoch, seconds)
            self.display.advance(state.step, stats)
        return self.last_skipped

    def log_update(self, stats: dict, epoch: int, seconds: float) -> None:
        """An update's record: in metrics.jsonl (rank 0) and on the display."""
        record = {
            "kind": "train",
            "step": self.state.step,
            "epoch": epoch,
            **stats,
            "tokens_per_s": round(self.state.target_tokens / max(seconds, 1e-9), 1),
            **self.model.gate_record(),  # learned head gates: each head's P(open) over updates
        }
        if self.procs.is_main:
            self.metrics.write(record)
        self.display.log(record)

    def validate_or_checkpoint(self, skipped: bool, end_of_epoch: bool) -> None:
        """Validate (and checkpoint) every train.valid_every updates, or at the end of every epoch when
        it is 0; else checkpoint when one is due. A skipped update validates and checkpoints nothing."""
        t, step = self.t, self.state.step
        if (t.valid_every and not skipped and step % t.valid_every == 0) or (not t.valid_every and end_of_epoch):
            self.validate()
            self.checkpoint()
        elif self.checkpoint_due(skipped):
            self.checkpoint()

    def validate(self) -> None:
        """Rank 0 validates, keeps best.pt and writes the record; every process takes its verdict."""
        validate_on_main(
            self.procs, self.model, self.prepared, self.config, self.state, self.run_dir, self.display, self.metrics
        )

    def checkpoint_due(self, skipped: bool) -> bool:
        """train.checkpoint_every updates or train.checkpoint_every_minutes have passed (by any process's
        clock: all of them must agree to checkpoint together)."""
        if skipped:
            return False
        t, step, device = self.t, self.state.step, self.procs.device
        wanted = checkpoint_wanted(t, step, device.type, (time.monotonic() - self.saved_at) / 60)
        count_due = bool(t.checkpoint_every) and step % t.checkpoint_every == 0
        on_gpu = device.type != "cpu"
        if not (t.checkpoint_every_minutes or (on_gpu and count_due and t.gpu_checkpoint_minutes)):
            return wanted  # the update count alone decides: the same on every process
        if on_gpu and not count_due and step % SIGNAL_EVERY:
            return False  # on a GPU the clocks are compared every SIGNAL_EVERY updates (a collective waits)
        return bool(self.procs.max(int(wanted)))

    def checkpoint(self, snapshot: bool = True) -> None:
        """last.pt (every process's random state included) and, with train.keep_checkpoints, a snapshot of
        the weights; not on a signal, which would add one at an irregular interval."""
        self.settle()
        rng = self.procs.gather(rng_state())  # every rank's, for an exact resume with as many processes
        if self.procs.is_main:
            save_checkpoint(self.run_dir / LAST, self.resume_state(rng))
            if snapshot and self.t.keep_checkpoints:
                weights = weights_state(self.model, self.config, self.state, self.prepared.tokenizer)
                save_snapshot(self.run_dir, weights, self.t.keep_checkpoints)
        self.procs.barrier()
        self.saved_at = time.monotonic()

    def resume_state(self, rng: list[dict]) -> dict:
        """last.pt's dict: the weights, and what resuming needs (the optimiser, every rank's random state
        from `rng`, fp16's loss scaler)."""
        return checkpoint_state(
            self.model.state_dict(),
            self.config.to_dict(),
            asdict(self.state),
            self.vocab_fp,
            self.prepared.tokenizer.vocab_size,
            optimizer=self.optimizer.state_dict(),
            rng=rng[0],
            **({"rng_other_ranks": rng[1:]} if len(rng) > 1 else {}),
            **({"scaler": self.scaler.state_dict()} if self.scaler.is_enabled() else {}),
        )

    def exit_on_signal(self, signalled: str) -> None:
        """Checkpoint (without a snapshot) and exit as the signal asks, saying how to continue."""
        self.checkpoint(snapshot=False)
        self.log(
            f"received {signalled}: checkpoint saved at update {self.state.step}; "
            f"continue with: mhatrain train {self.run_dir / 'config.yaml'} --out {self.run_dir} --resume"
        )
        raise SystemExit(130 if signalled == "SIGINT" else 143)

    def finish(self) -> None:
        """Read the last updates; validate the final weights unless that update was validated already;
        mark the run finished and save last.pt."""
        self.settle()
        state, procs = self.state, self.procs
        if state.finished and procs.broadcast(procs.is_main and not validated_at(self.run_dir, state.step)):
            self.validate()
        state.finished = True
        state.stop_reason = state.stop_reason or f"reached max_epochs={self.t.max_epochs}"
        self.checkpoint()


# ----------------------------------------------------------------------------- the loop's parts


def checkpoint_wanted(t: TrainConfig, step: int, device_type: str, minutes: float) -> bool:
    """Whether last.pt is due after update `step`, `minutes` after the last save: every
    train.checkpoint_every updates (on a GPU, where they take seconds, no sooner than
    train.gpu_checkpoint_minutes after the last save) or every train.checkpoint_every_minutes."""
    if t.checkpoint_every and step % t.checkpoint_every == 0:
        if device_type == "cpu" or minutes >= t.gpu_checkpoint_minutes:
            return True
    return bool(t.checkpoint_every_minutes) and minutes >= t.checkpoint_every_minutes


def collate_share(
    encoded: Encoded, batches: list[list[int]], procs: Group, bucket_limit: int = 0
) -> tuple[list[tuple[Batch, int]], tuple[int, int, int] | None]:
    """This process's share of an update's `batches` (those of all processes together), collated, with
    their weights; in pinned memory for a copy to the GPU that does not wait (CUDA only); with several
    processes, the sizes of the whole update (data.batch_sizes: no process needs to ask the others).
    With `bucket_limit` (train.compile) the batches are padded to their length bucket.

    Each process takes every world-th batch. One left without any (in an epoch's last, short update)
    must still join DDP's gradient exchange: it runs the first batch with weight 0.
    """
    share = [(collate(encoded, indices, bucket_limit), 1) for indices in batches[procs.rank :: procs.world]]
    share = share or [(collate(encoded, batches[0], bucket_limit), 0)]
    if procs.device.type == "cuda":
        share = [(batch.pin_memory(), weight) for batch, weight in share]
    return share, batch_sizes(encoded, batches, bucket_limit) if procs.launched else None


def _note_skipped(state: TrainState, why: str, limit: int, run_dir: Path, log, bad: bool = True) -> None:
    """Count a skipped update; stop after `limit` bad ones in a row (the last checkpoint stays as it was)."""
    state.skipped_updates += 1
    state.bad_in_a_row += int(bad)
    log(f"warning: update {state.step + 1} skipped: {why} ({state.skipped_updates} skipped so far)")
    if state.bad_in_a_row >= limit:
        kept = (
            f"the last good checkpoint in {run_dir} is unchanged"
            if (Path(run_dir) / LAST).exists()
            else f"no checkpoint was written to {run_dir}"
        )
        raise MhatrainError(
            f"stopped: {state.bad_in_a_row} updates in a row skipped ({why}) at update {state.step + 1}; "
            f"{kept} (try a lower train.lr_factor or train.max_tokens)"
        )


class StopSignal:
    """SIGINT/SIGTERM ask the loop to checkpoint at the next update and exit; a second SIGINT aborts."""

    def __init__(self):
        self.received: str | None = None
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum, frame):
        if self.received and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc):
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def agree(self, procs: Group) -> str | None:
        """The signal received so far by any process, the same answer on every process (each gets its
        own signal from torchrun, at a slightly different moment), so that they all stop together."""
        number = procs.max(signal.Signals[self.received].value if self.received else 0)
        return signal.Signals(number).name if number else None


class CompiledStep:
    """The model that training steps call: with train.compile, torch.compile'd, for batches padded to a
    few lengths (`bucket_limit` for collate: data.bucket_length) with the number of sentences marked
    dynamic, so that training compiles at most one graph per length bucket instead of one per batch
    shape. Compilation happens in the first forward and backward of each new graph, so that is where
    its errors surface: an update that fails there, whichever it is, is redone eagerly from the same
    state and random numbers after one warning line, and the rest of the run is eager (on the same
    padded batches)."""

    def __init__(self, ddp_model, enabled: bool, log, max_positions: int = 0):
        self.eager, self.model, self.log = ddp_model, ddp_model, log
        self.bucket_limit = 0  # what collate pads to (0: no padding)
        if enabled:
            try:
                graphs = len(bucket_lengths(max_positions)) + 2  # a bucket each, and room to spare
                limit = torch._dynamo.config.recompile_limit
                torch._dynamo.config.recompile_limit = max(limit, graphs)  # beyond it dynamo would run eager
                self.model = compile_model(ddp_model, COMPILE_BACKEND)
                self.bucket_limit = max_positions
            except Exception as exc:  # compile is an optimisation: never fatal
                log(f"warning: torch.compile unavailable ({type(exc).__name__}); running eager")

    def run(self, update, optimizer):
        """`update(model)`, redone on the eager model if the compiled one fails."""
        if self.model is self.eager:
            return update(self.model)
        rng = rng_state()
        try:
            return update(self.model)
        except MhatrainError:
            raise
        except Exception as exc:  # torch.compile's failures come in many types (backend, lowering, C++ build)
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            self.log(f"warning: torch.compile failed ({type(exc).__name__}: {first}); running eager from here")
            optimizer.zero_grad(set_to_none=True)
            set_rng_state(rng)
            self.model = self.eager  # batches stay padded: a run's batches do not depend on when this happens
            return update(self.model)


def _summary(state: TrainState, n_params: int, run_dir: Path) -> dict:
    wall = state.train_seconds + state.valid_seconds
    return {
        "run_dir": str(run_dir),
        "parameters": n_params,
        "updates": state.step,
        "epochs": state.epoch,
        "stop_reason": state.stop_reason,
        "best_score": state.best_score,
        "best_step": state.best_step,
        "train_seconds": round(state.train_seconds, 1),
        "valid_seconds": round(state.valid_seconds, 1),
        "valid_share": round(state.valid_seconds / wall, 3) if wall else 0.0,
        "target_tokens": state.target_tokens,
        "skipped_updates": state.skipped_updates,
        "tokens_per_s": round(state.target_tokens / state.train_seconds, 1) if state.train_seconds else 0.0,
        "world_size": state.world_size,
        "tokens_per_update": state.tokens_per_update,
    }
