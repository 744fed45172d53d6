"""Training: data preparation, validation, and the loop (one update is step.py's).

The loop reads top to bottom: for each epoch, deterministic token batches; for each update,
`accum_steps` batches of forward/backward, clip, Adam step (step.optimizer_update); validate and checkpoint at the
configured interval; stop on max_epochs, max_steps, early stopping or a signal.
Resuming restores model, optimiser, step, data position and RNG state, so a resumed run
produces the same weights as an uninterrupted one.

Started by torchrun, every process runs this loop (see distributed.py): an update takes
world × accum_steps batches, each process its share, and the gradient is the one that one process
would compute from all of them. Rank 0 alone validates, prints and writes files.
"""

from __future__ import annotations

import json
import math
import random
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from . import data, provenance
from .checkpoint import (
    BEST,
    CONFIG_FILE,
    LAST,
    LAST_PREV,
    METRICS_FILE,
    SUMMARY_FILE,
    TOKENIZER_FILE,
    check_compatible,
    checkpoint_state,
    drop_snapshots_after,
    is_run_dir,
    load_latest,
    remove_partial_writes,
    resume_accum_steps,
    save_checkpoint,
    save_snapshot,
)
from .config import Config, accum_steps_for, dump_config
from .dashboard import Dashboard
from .dashboard import check_available as check_tensorboard
from .decode import translate_ids
from .distributed import Group, process_group
from .errors import CheckpointError, MhatrainError
from .evaluate import bleu_score
from .faults import fault_point
from .io import append_jsonl, atomic_write_text, read_jsonl
from .model import Transformer, build_model, count_parameters
from .runtime import autocast, check_gpu_bf16, loss_scaler, set_threads, slow_bf16_warning
from .step import batch_loss, compile_model, make_optimizer, noam_lr, optimizer_update, read_updates
from .tokens import load_encoded, save_encoded

# ----------------------------------------------------------------------------- data


@dataclass
class Prepared:
    tokenizer: data.Tokenizer
    train: data.Encoded
    valid: data.Encoded
    valid_refs: list[str]
    valid_src: list[list[int]]
    sources: dict  # "train", "valid": where the text came from (provenance.corpus_record)


def prepare_data(config: Config, run_dir: Path, log=print) -> Prepared:
    """Train or reuse the tokenizer, then map the encoded training split from the cache, or encode,
    filter and cache it first; encode the (small) validation split."""
    cfg = config.data
    data_key = data.train_data_key(cfg)
    existing = run_dir / TOKENIZER_FILE
    source = existing if existing.is_file() else data.train_or_load_tokenizer(cfg, log, data_key)
    tokenizer = data.install_tokenizer(source, run_dir)
    cache = data.encoded_cache_dir(cfg, data_key, tokenizer, cfg.max_length)
    train = load_encoded(cache)
    if train is not None:
        log(f"data: mapped the encoded training data from {cache}")
    else:
        started = time.perf_counter()
        corpus = data.load_train_corpus(cfg)
        encoded = data.encode_corpus(tokenizer, corpus, cfg.max_length)
        if len(encoded) == 0:
            raise data.DataError(f"{corpus.name}: no training pairs left after filtering")
        save_encoded(cache, encoded)
        del encoded, corpus  # the text and the arrays: from now on the cache's mapped pages serve
        train = load_encoded(cache)
        log(f"data: encoded the training data in {time.perf_counter() - started:.1f}s, cached in {cache}")
    valid_corpus = data.load_split(cfg, cfg.valid_split)
    log(
        f"data: {len(train)} training pairs kept of {len(train) + train.dropped_empty + train.dropped_long} "
        f"({train.dropped_empty} empty, {train.dropped_long} longer than {cfg.max_length} tokens dropped); "
        f"{len(valid_corpus)} validation pairs; vocabulary {tokenizer.vocab_size}"
    )
    valid = data.encode_corpus(tokenizer, valid_corpus, None)
    sources = {"train": provenance.split_record(cfg, cfg.train_split), "valid": provenance.corpus_record(valid_corpus)}
    return Prepared(
        tokenizer, train, data.loss_pairs(valid, cfg.max_length), valid_corpus.tgt, valid.src.tolist(), sources
    )


# ----------------------------------------------------------------------------- validation


@torch.no_grad()
def run_validation(model: Transformer, prepared: Prepared, config: Config, device: torch.device) -> dict:
    """Validation loss, per-token perplexity and (if enabled) BLEU of greedy/beam output."""
    model.eval()
    nll_sum, n_tokens = torch.zeros((), dtype=torch.float64, device=device), 0  # read once, at the end
    with autocast(device, config.train.precision):
        for indices in data.batch_indices(data.pair_lengths(prepared.valid), config.train.max_tokens):
            batch = data.collate(prepared.valid, indices)
            n_tokens += batch.n_tgt_tokens  # counted on the host
            _, nll = batch_loss(model, batch.to(device), 0.0)
            nll_sum += nll.double()
    nll_sum = float(nll_sum)
    result = {"valid_loss": nll_sum / n_tokens, "valid_ppl": math.exp(min(nll_sum / n_tokens, 50.0))}
    fault_point("validation")
    if config.train.valid_bleu:
        limit = config.train.valid_max_sentences or len(prepared.valid_src)
        ids = translate_ids(
            model,
            prepared.valid_src[:limit],
            config.decode,
            device,
            beam=config.train.valid_beam,
            precision=config.train.precision,
        )
        bleu, signature = bleu_score(prepared.tokenizer.decode(ids), prepared.valid_refs[:limit])
        result.update(valid_bleu=round(bleu, 2), bleu_signature=signature)
    model.train()
    return result


# ----------------------------------------------------------------------------- state


@dataclass
class TrainState:
    """Where training stands; saved in every checkpoint (under "progress")."""

    step: int = 0  # optimiser updates done
    epoch: int = 0  # current epoch (0-based)
    batch_in_epoch: int = 0  # next batch of the current epoch
    best_score: float | None = None
    best_step: int = 0
    bad_validations: int = 0
    train_seconds: float = 0.0  # time in training steps
    valid_seconds: float = 0.0  # time in validation
    target_tokens: int = 0
    skipped_updates: int = 0  # updates skipped for a non-finite loss/gradient or out-of-memory
    bad_in_a_row: int = 0
    finished: bool = False
    stop_reason: str = ""
    world_size: int = 1  # processes training together (torchrun's WORLD_SIZE), in the latest session
    tokens_per_update: int = 0  # world_size × accum_steps × max_tokens: the token budget of one update


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(_as_tuple(state["python"]))
    if "cuda" in state and torch.cuda.is_available():  # for the GPUs visible now (fewer after a move, maybe)
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])


def _as_tuple(x):
    return tuple(_as_tuple(i) for i in x) if isinstance(x, (list, tuple)) else x


def _restore_rng(last: dict | None, procs: Group, seed: int, step: int) -> None:
    """Each rank continues from its own saved random state, so a resume with as many processes draws
    the same dropout masks as an uninterrupted run. A rank without one (a fresh start, or more
    processes than the checkpoint had) gets a seed of its own: dropout masks differ between ranks."""
    states = [last["rng"], *last.get("rng_other_ranks", [])] if last is not None else []
    if procs.rank < len(states):
        _set_rng_state(states[procs.rank])
    elif procs.rank:
        torch.manual_seed(seed + 1_000_003 * procs.rank + step)


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


# ----------------------------------------------------------------------------- the loop


def train(config: Config, run_dir: Path, resume: bool = False, console=None, batch_change: str = "") -> dict:
    """Train (or resume) the run in `run_dir`; returns a summary dict.

    Under torchrun every process calls this. `batch_change` decides a resume that would change the
    tokens per update (another number of processes or train.accum_steps): "" refuses it, "keep"
    adjusts train.accum_steps to keep them, "new" accepts the change.
    """
    with process_group(config.train.device, config.train.dist_backend) as procs:
        return _train(config, Path(run_dir), resume, console, batch_change, procs)


def _train(config: Config, run_dir: Path, resume: bool, console, batch_change: str, procs: Group) -> dict:
    from rich.console import Console

    from .progress import TrainDisplay

    if not procs.is_main:
        console = Console(quiet=True)  # rank 0 speaks for all
    log = console.print if console is not None else print
    t = config.train
    if t.tensorboard:
        check_tensorboard()  # before any data is read or any model is built
    last = _open_run_dir(config, run_dir, resume, batch_change, procs, log)
    set_threads(t.threads)
    device = procs.device
    check_gpu_bf16(device, t.precision)  # before any data is read
    torch.manual_seed(t.seed)
    random.seed(t.seed)
    prepared = _prepare_on_every_rank(config, run_dir, procs, log)
    vocab_fp = prepared.tokenizer.fingerprint()
    # Three views of one model: `model`, the raw module (checkpoints save and validation runs it);
    # `ddp_model`, the same in DistributedDataParallel when launched (gradients are exchanged through
    # it); `compiled_step`, which runs each update on torch.compile's version of ddp_model or on ddp_model.
    model = build_model(config.model, prepared.tokenizer.vocab_size).to(device)
    optimizer = make_optimizer(model.parameters(), t, noam_lr(1, config.model.d_model, t.warmup_steps, t.lr_factor))
    scaler = loss_scaler(device, t.precision)
    progress = TrainState()
    if last is not None:
        check_compatible(last, config, str(run_dir / LAST), vocab_fp)
        model.load_state_dict(last["model"])
        optimizer.load_state_dict(last["optimizer"])
        if "scaler" in last:
            scaler.load_state_dict(last["scaler"])
        progress = TrainState(**last["progress"])
        # A finished run continues when its limits were raised (e.g. a larger train.max_steps).
        progress.stop_reason = stop_reason(progress, t)
        progress.finished = bool(progress.stop_reason)
        log(f"resuming at update {progress.step} (epoch {progress.epoch + 1}, batch {progress.batch_in_epoch})")
    _restore_rng(last, procs, t.seed, progress.step)
    if procs.is_main:  # records and snapshots past the checkpoint are redone
        _truncate_metrics(run_dir / METRICS_FILE, progress.step)
        drop_snapshots_after(run_dir, progress.step)
    n_params = count_parameters(model)
    log(f"model: {n_params:,} parameters; device {device}; precision {t.precision}; threads {torch.get_num_threads()}")
    if (warning := slow_bf16_warning(device, t.precision)) is not None:
        log(warning)
    if procs.launched:
        log(
            f"processes: {procs.world} ({procs.backend}), each on its own share of every update's batches; "
            f"rank 0 validates and writes the checkpoints"
        )
    if progress.finished:
        log(f"run already finished ({progress.stop_reason}); nothing to do")
        return _summary(progress, n_params, run_dir)
    if procs.is_main:  # a resumed run appends a session: it may continue on another machine
        provenance.record_session(
            run_dir,
            provenance.session(
                device, prepared.sources, run_dir / TOKENIZER_FILE, resumed=last is not None, processes=procs.world
            ),
        )
    ddp_model = procs.wrap(model)
    compiled_step = CompiledStep(ddp_model, t.compile, log, config.model.max_positions)

    saved_at = time.monotonic()

    def checkpoint(snapshot: bool = True):
        """last.pt (every process's random state included) and, with train.keep_checkpoints, a snapshot of
        the weights; not on a signal, which would add one at an irregular interval."""
        nonlocal saved_at
        settle()
        rng = procs.gather(_rng_state())  # every rank's, for an exact resume with as many processes
        if procs.is_main:
            save_checkpoint(
                run_dir / LAST,
                checkpoint_state(
                    model.state_dict(),
                    config.to_dict(),
                    asdict(progress),
                    vocab_fp,
                    prepared.tokenizer.vocab_size,
                    optimizer=optimizer.state_dict(),
                    rng=rng[0],
                    **({"rng_other_ranks": rng[1:]} if len(rng) > 1 else {}),
                    **({"scaler": scaler.state_dict()} if scaler.is_enabled() else {}),
                ),
            )
            if snapshot and t.keep_checkpoints:
                save_snapshot(run_dir, _weights(model, config, progress, prepared.tokenizer), t.keep_checkpoints)
        procs.barrier()
        saved_at = time.monotonic()

    def checkpoint_due(skipped: bool) -> bool:
        """train.checkpoint_every updates or train.checkpoint_every_minutes have passed (by any process's
        clock: all of them must agree to checkpoint together)."""
        if skipped:
            return False
        wanted = checkpoint_wanted(t, progress.step, device.type, (time.monotonic() - saved_at) / 60)
        count_due = bool(t.checkpoint_every) and progress.step % t.checkpoint_every == 0
        on_gpu = device.type != "cpu"
        if not (t.checkpoint_every_minutes or (on_gpu and count_due and t.gpu_checkpoint_minutes)):
            return wanted  # the update count alone decides: the same on every process
        if on_gpu and not count_due and progress.step % SIGNAL_EVERY:
            return False  # on a GPU the clocks are compared every SIGNAL_EVERY updates (a collective waits)
        return bool(procs.max(int(wanted)))

    # Updates run but not yet read back: the host reads an update's loss and verdict only when it logs
    # or decides something (a log line, validation, a checkpoint, stopping), all of them at once.
    pending: list[tuple] = []  # (step.Update, its epoch (1-based), train_seconds after it)
    last_skipped = False

    def settle() -> bool:
        """Read the pending updates (one wait for the device) and account for them in the order they
        ran, as if each had been read at once: skips (which may stop training), steps, tokens, log
        lines. Returns whether the latest update was skipped."""
        nonlocal last_skipped
        if not pending:
            return last_skipped
        progress.step -= sum(not update.skipped for update, _, _ in pending)  # undo the provisional count
        window = list(pending)
        pending.clear()
        for (_, epoch, seconds), stats in zip(window, read_updates([u for u, _, _ in window])):
            last_skipped = "skipped" in stats
            if last_skipped:
                bad = not stats.get("loss_scale_lowered")
                _note_skipped(progress, stats["skipped"], t.max_bad_updates, run_dir, log, bad=bad)
                continue
            progress.bad_in_a_row = 0
            progress.step += 1
            progress.target_tokens += stats["tokens"]
            if progress.step % t.log_every == 0 or progress.step == 1:
                record = {
                    "kind": "train",
                    "step": progress.step,
                    "epoch": epoch,
                    **stats,
                    "tokens_per_s": round(progress.target_tokens / max(seconds, 1e-9), 1),
                }
                if procs.is_main:
                    metrics.write(record)
                display.log(record)
            display.advance(progress.step, stats)
        return last_skipped

    def decision_due() -> bool:
        """Whether, counting the pending updates as applied, the latest one is due a log line, a
        validation, a checkpoint or the end of training: then they are read first (settle)."""
        step = progress.step
        return bool(
            step % t.log_every == 0
            or step == 1
            or (t.valid_every and step % t.valid_every == 0)
            or checkpoint_due(False)
            or stop_reason(progress, t)
        )

    lengths = data.pair_lengths(prepared.train)
    accum = accum_steps_for(t, procs.world)
    per_update = procs.world * accum  # batches per update, all processes together
    per_epoch = math.ceil(len(data.batch_indices(lengths, t.max_tokens, t.seed, 0)) / per_update)
    total = t.max_epochs * per_epoch if not t.max_steps else min(t.max_steps, t.max_epochs * per_epoch)
    progress.world_size, progress.tokens_per_update = procs.world, per_update * t.max_tokens
    processes = f" × {procs.world} process{'es' if procs.world > 1 else ''}" if procs.launched else ""
    asked = f" (train.tokens_per_update={t.tokens_per_update})" if t.tokens_per_update else ""
    log(
        f"batches: ≤{t.max_tokens} tokens × {accum} accumulation{processes} = ≤{progress.tokens_per_update} "
        f"tokens per update{asked}; {per_epoch} updates per epoch"
    )
    if t.checkpoint_every and device.type != "cpu" and t.gpu_checkpoint_minutes:
        log(
            f"checkpoints: every {t.checkpoint_every} updates, at most one per {t.gpu_checkpoint_minutes:g} minutes "
            f"on {device} (train.gpu_checkpoint_minutes); and at every validation"
        )
    model.train()
    signalled = None
    board = t.tensorboard and procs.is_main
    with (
        StopSignal() as stop,
        TrainDisplay(console, total, progress.step) as display,
        MetricsLog(run_dir, board, progress.step if last is not None else None) as metrics,
    ):
        while progress.epoch < t.max_epochs and not progress.finished:
            batches = data.batch_indices(lengths, t.max_tokens, t.seed, progress.epoch)
            groups = [batches[k : k + per_update] for k in range(progress.batch_in_epoch, len(batches), per_update)]
            with data.Prefetcher(
                lambda g: collate_share(prepared.train, g, procs, compiled_step.bucket_limit), groups
            ) as shares:
                while progress.batch_in_epoch < len(batches):
                    group, (share, sizes) = (
                        batches[progress.batch_in_epoch : progress.batch_in_epoch + per_update],
                        next(shares),
                    )
                    started = time.perf_counter()
                    lr = noam_lr(progress.step + 1, config.model.d_model, t.warmup_steps, t.lr_factor)
                    update = compiled_step.run(
                        lambda m, share=share, lr=lr, sizes=sizes: optimizer_update(
                            m, ddp_model, optimizer, scaler, share, t, lr, procs, sizes
                        ),
                        optimizer,
                    )
                    progress.train_seconds += time.perf_counter() - started
                    progress.batch_in_epoch += len(group)
                    # Counted as applied until the host reads it (settle); only then logged.
                    progress.step += int(not update.skipped)
                    pending.append((update, progress.epoch + 1, progress.train_seconds))
                    display.advance(progress.step)
                    end_of_epoch = progress.batch_in_epoch >= len(batches)
                    if end_of_epoch:
                        progress.epoch += 1
                        progress.batch_in_epoch = 0
                    skipped = False
                    settled = bool(update.skipped or end_of_epoch or decision_due())
                    if settled:
                        skipped = settle()
                    if (t.valid_every and not skipped and progress.step % t.valid_every == 0) or (
                        not t.valid_every and end_of_epoch
                    ):
                        _validate_on_main(procs, model, prepared, config, progress, run_dir, display, metrics)
                        checkpoint()
                    elif checkpoint_due(skipped):
                        checkpoint()
                    progress.stop_reason = stop_reason(progress, t)
                    progress.finished = bool(progress.stop_reason)
                    # Agreeing on signals is a collective that NCCL makes the host wait for: there, every
                    # SIGNAL_EVERY updates and whenever the host has read the updates anyway
                    if procs.device.type == "cpu" or settled or progress.step % SIGNAL_EVERY == 0:
                        signalled = stop.agree(procs)
                    if progress.finished or signalled or end_of_epoch:
                        break
            if signalled and not progress.finished:
                checkpoint(snapshot=False)
                log(
                    f"received {signalled}: checkpoint saved at update {progress.step}; "
                    f"continue with: mhatrain train {run_dir / 'config.yaml'} --out {run_dir} --resume"
                )
                raise SystemExit(130 if signalled == "SIGINT" else 143)
        settle()
        if progress.finished and procs.broadcast(procs.is_main and not _validated_at(run_dir, progress.step)):
            _validate_on_main(procs, model, prepared, config, progress, run_dir, display, metrics)
        progress.finished = True
        progress.stop_reason = progress.stop_reason or f"reached max_epochs={t.max_epochs}"
        checkpoint()
    summary = _summary(progress, n_params, run_dir)
    if procs.is_main:
        atomic_write_text(run_dir / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    log(
        f"done: {progress.stop_reason}; best {t.early_stop_metric} {progress.best_score} at update {progress.best_step}"
    )
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
        t = config.train
        accum = resume_accum_steps(last, config, procs.world, batch_change, str(run_dir / LAST))
        if accum != accum_steps_for(t, procs.world):
            tokens = procs.world * accum * t.max_tokens
            if t.tokens_per_update:
                log(
                    f"train.tokens_per_update: {t.tokens_per_update} → {tokens} for {procs.world} × {accum} × "
                    f"{t.max_tokens}"
                )
                t.tokens_per_update = tokens
            else:
                log(
                    f"train.accum_steps: {t.accum_steps} → {accum} for {procs.world} × {accum} × {t.max_tokens} = "
                    f"{tokens} tokens per update"
                )
                t.accum_steps = accum
        check_compatible(last, config, str(run_dir / LAST))
    if procs.is_main:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MhatrainError(f"cannot create run directory {run_dir}: {exc.strerror}") from None
        dump_config(config, run_dir / CONFIG_FILE)
    return last


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


def stop_reason(progress: TrainState, t) -> str:
    """Why training should stop now, or "" to go on."""
    if t.max_steps and progress.step >= t.max_steps:
        return f"reached max_steps={t.max_steps}"
    if t.patience and progress.bad_validations >= t.patience:
        return f"early stopping after {t.patience} validations without improvement"
    if progress.epoch >= t.max_epochs:
        return f"reached max_epochs={t.max_epochs}"
    return ""


def checkpoint_wanted(t, step: int, device_type: str, minutes: float) -> bool:
    """Whether last.pt is due after update `step`, `minutes` after the last save: every
    train.checkpoint_every updates (on a GPU, where they take seconds, no sooner than
    train.gpu_checkpoint_minutes after the last save) or every train.checkpoint_every_minutes."""
    if t.checkpoint_every and step % t.checkpoint_every == 0:
        if device_type == "cpu" or minutes >= t.gpu_checkpoint_minutes:
            return True
    return bool(t.checkpoint_every_minutes) and minutes >= t.checkpoint_every_minutes


def collate_share(
    encoded: data.Encoded, batches: list[list[int]], procs: Group, bucket_limit: int = 0
) -> list[tuple[data.Batch, int]]:
    """This process's share of an update's `batches` (those of all processes together), collated, with
    their weights; in pinned memory for a copy to the GPU that does not wait (CUDA only); with several
    processes, the sizes of the whole update (data.batch_sizes: no process needs to ask the others).
    With `bucket_limit` (train.compile) the batches are padded to their length bucket.

    Each process takes every world-th batch. One left without any (in an epoch's last, short update)
    must still join DDP's gradient exchange: it runs the first batch with weight 0.
    """
    share = [(data.collate(encoded, indices, bucket_limit), 1) for indices in batches[procs.rank :: procs.world]]
    share = share or [(data.collate(encoded, batches[0], bucket_limit), 0)]
    if procs.device.type == "cuda":
        share = [(batch.pin_memory(), weight) for batch, weight in share]
    return share, data.batch_sizes(encoded, batches, bucket_limit) if procs.launched else None


def _note_skipped(progress: TrainState, why: str, limit: int, run_dir: Path, log, bad: bool = True) -> None:
    """Count a skipped update; stop after `limit` bad ones in a row (the last checkpoint stays as it was)."""
    progress.skipped_updates += 1
    progress.bad_in_a_row += int(bad)
    log(f"warning: update {progress.step + 1} skipped: {why} ({progress.skipped_updates} skipped so far)")
    if progress.bad_in_a_row >= limit:
        kept = (
            f"the last good checkpoint in {run_dir} is unchanged"
            if (Path(run_dir) / LAST).exists()
            else f"no checkpoint was written to {run_dir}"
        )
        raise MhatrainError(
            f"stopped: {progress.bad_in_a_row} updates in a row skipped ({why}) at update {progress.step + 1}; "
            f"{kept} (try a lower train.lr_factor or train.max_tokens)"
        )


def _validate_and_track(
    model, prepared, config, device, progress: TrainState, run_dir: Path, display, metrics: MetricsLog
) -> None:
    t = config.train
    started = time.perf_counter()
    result = run_validation(model, prepared, config, device)
    progress.valid_seconds += time.perf_counter() - started
    score = result["valid_bleu"] if t.early_stop_metric == "bleu" and "valid_bleu" in result else -result["valid_loss"]
    improved = progress.best_score is None or score > progress.best_score
    if improved:
        progress.best_score, progress.best_step, progress.bad_validations = score, progress.step, 0
        save_checkpoint(run_dir / BEST, _weights(model, config, progress, prepared.tokenizer))
    else:
        progress.bad_validations += 1
    record = {
        "kind": "valid",
        "step": progress.step,
        "epoch": progress.epoch,
        **result,
        "best": improved,
        "valid_seconds": round(time.perf_counter() - started, 1),
    }
    metrics.write(record)
    display.log(record)


def _weights(model, config: Config, progress: TrainState, tokenizer: data.Tokenizer) -> dict:
    """The state of a weights-only checkpoint (best.pt, a snapshot): what eval and average read."""
    return checkpoint_state(
        model.state_dict(), config.to_dict(), asdict(progress), tokenizer.fingerprint(), tokenizer.vocab_size
    )


def _validate_on_main(
    procs: Group, model, prepared, config, progress: TrainState, run_dir: Path, display, metrics: MetricsLog
) -> None:
    """Rank 0 validates (and keeps best.pt); the others wait, then take its verdict (best score, patience)."""
    if procs.is_main:
        _validate_and_track(model, prepared, config, procs.device, progress, run_dir, display, metrics)
    vars(progress).update(procs.broadcast(vars(progress)))


class MetricsLog:
    """metrics.jsonl, and the same records as TensorBoard scalars when `board` is on (train.tensorboard,
    rank 0). resume_step: the update a resumed run continues from (see Dashboard)."""

    def __init__(self, run_dir: Path, board: bool, resume_step: int | None):
        self.path = run_dir / METRICS_FILE
        self.board = Dashboard(run_dir, resume_step) if board else None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.board is not None:
            self.board.close()

    def write(self, record: dict) -> None:
        append_jsonl(self.path, record)
        if self.board is not None:
            self.board.log(record)


def _validated_at(run_dir: Path, step: int) -> bool:
    for record in read_jsonl(run_dir / METRICS_FILE):
        if record.get("kind") == "valid" and record.get("step") == step:
            return True
    return False


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop records written after the checkpoint we resume from (they will be written again)."""
    if path.is_file():
        kept = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))


SIGNAL_EVERY = 8  # on a GPU, updates between two agreements of the processes on a signal (StopSignal.agree)
COMPILE_BACKEND = "inductor"  # torch.compile's backend for train.compile (the tests pass a cheaper one)


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
                graphs = len(data.bucket_lengths(max_positions)) + 2  # a bucket each, and room to spare
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
        rng = _rng_state()
        try:
            return update(self.model)
        except MhatrainError:
            raise
        except Exception as exc:  # torch.compile's failures come in many types (backend, lowering, C++ build)
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            self.log(f"warning: torch.compile failed ({type(exc).__name__}: {first}); running eager from here")
            optimizer.zero_grad(set_to_none=True)
            _set_rng_state(rng)
            self.model = self.eager  # batches stay padded: a run's batches do not depend on when this happens
            return update(self.model)


def _summary(progress: TrainState, n_params: int, run_dir: Path) -> dict:
    wall = progress.train_seconds + progress.valid_seconds
    return {
        "run_dir": str(run_dir),
        "parameters": n_params,
        "updates": progress.step,
        "epochs": progress.epoch,
        "stop_reason": progress.stop_reason,
        "best_score": progress.best_score,
        "best_step": progress.best_step,
        "train_seconds": round(progress.train_seconds, 1),
        "valid_seconds": round(progress.valid_seconds, 1),
        "valid_share": round(progress.valid_seconds / wall, 3) if wall else 0.0,
        "target_tokens": progress.target_tokens,
        "skipped_updates": progress.skipped_updates,
        "tokens_per_s": round(progress.target_tokens / progress.train_seconds, 1) if progress.train_seconds else 0.0,
        "world_size": progress.world_size,
        "tokens_per_update": progress.tokens_per_update,
    }
