"""The head-count study of the paper's Table 3, rows (A): one run per (h, seed), d_k = d_v = d_model / h.

Because every head has d_model / h dimensions, W_Q, W_K, W_V and W_O stay d_model × d_model for any h:
parameters and compute are the same at every grid point, only the way attention is split changes (unless
model.d_head fixes the head size: then they grow with h). `--vary KEY=V1,V2` repeats the grid in every
combination of other settings (a cell each; regimes.py maps where extra heads help). `--layout NAME=FILE`
adds a fixed-layout control per seed: a model trained from scratch with the heads per layer that
`mhatrain prune` kept (grid/fixed_layouts.py), which the report sets against h=8 and h=1 (stats/layouts.py).

This module runs a study's grid points; grid/directory.py says what a study directory holds and what each point
needs. `--dry-run` prints the commands of every point (directory.point_commands), `--jobs N` runs them as
subprocesses, `--jobs 1` calls the same library functions in-process, and `--executor slurm|local`
submits each point as a job (cluster.py), so a study gives the same results whichever way it runs.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch
from rich.console import Console

from ...core.config import Config, load_config
from ...core.distributed import read_launch, resolve_device
from ...core.errors import MhatrainError
from ...core.provenance import record_session, session
from ...core.runtime import is_device_name, slow_bf16_warning
from ...data.sources import check_splits
from ...inference.trained import evaluate_run
from ...model.sizes import head_size
from ...training.loop import train
from ...training.tensorboard_log import check_available as check_tensorboard
from ...training.validation import selection_metric
from ..grid.costs import plan_lines
from ..grid.directory import (
    EVAL_SPLITS,
    Study,
    missing_evaluations,
    needed_commands,
    open_study,
    plan_study,
    point_commands,
    point_outcome,
    point_seconds,
    shell_line,
    study_lock,
)
from ..grid.fixed_layouts import read_layouts
from ..grid.points import Point, Slot, check_factors, point_overrides
from ..reports.study_report import report_study
from .cluster import JobOptions, check_options, job_slot, run_jobs
from .grid_progress import GridDisplay

# ----------------------------------------------------------------------------- where points run


def parse_devices(text: str | None) -> list[str]:
    """--devices cuda:0,cuda:1: the devices the slots take in turn, each one this machine has."""
    if not text:
        return []
    devices = [d.strip() for d in text.split(",") if d.strip()]
    for device in devices:
        if not is_device_name(device):
            raise MhatrainError(f"--devices: {device!r} is not cpu, cuda or cuda:N")
        if device.startswith("cuda"):
            index = int(device[5:]) if ":" in device else 0
            if not torch.cuda.is_available() or index >= torch.cuda.device_count():
                raise MhatrainError(
                    f"--devices: {device} is not available on this machine ({torch.cuda.device_count()} CUDA devices)"
                )
    return devices


def plan_slots(jobs: int, devices: list[str], base_threads: int) -> list[Slot]:
    """The `jobs` slots of a study on this machine: the devices of --devices in turn and, with more than
    one job, an equal share of the CPU cores each (never more threads than train.threads asks for)."""
    threads = None
    if jobs > 1:
        share = max(1, (os.cpu_count() or 1) // jobs)
        threads = min(base_threads, share) if base_threads else share
    return [Slot(devices[slot % len(devices)] if devices else None, threads) for slot in range(jobs)]


# ----------------------------------------------------------------------------- running a study


def run_study(
    config_path: Path,
    heads: list[int],
    seeds: list[int],
    out: Path | None,
    overrides: list[str],
    jobs: int,
    devices_text: str | None,
    dry_run: bool,
    overwrite: bool,
    console: Console,
    *,
    cluster: JobOptions | None = None,
    allow_code_change: bool = False,
    vary: list[str] = (),
    layouts: list[str] = (),
) -> dict | None:
    """`mhatrain ablate`: check, record, run every unfinished grid point, then report.

    heads, seeds: the grid (checked here: each h must divide model.d_model);
    cluster: to run each point as a submitit job (SLURM, or local subprocesses);
    allow_code_change: continue a study whose points another code version started (see open_study);
    vary: `--vary KEY=V1,V2` options: every combination of their values is a cell with the whole grid;
    layouts: `--layout NAME=FILE` options: each adds a layout point per seed (not with vary)."""
    devices = _check_where_to_run(jobs, devices_text, cluster)
    config = _study_config(config_path, overrides)
    slots = [job_slot(cluster)] if cluster is not None else plan_slots(jobs, devices, config.train.threads)
    if vary and layouts:  # a layout's cells would need a control per cell: one design at a time
        raise MhatrainError(
            "--layout and --vary exclude each other: run the fixed-layout control as a study of its own"
        )
    factors = check_factors(list(vary), config)
    fixed = read_layouts(list(layouts), config)
    heads, seeds, points = plan_study(config, str(config_path), heads, seeds, slots, factors, fixed)
    study_dir = Path(out) if out is not None else Path("studies") / Path(config_path).stem
    with study_lock(study_dir):
        study = open_study(
            study_dir,
            config,
            Path(config_path),
            overrides,
            heads,
            seeds,
            points,
            overwrite=overwrite,
            console=console,
            allow_code_change=allow_code_change,
            factors=factors,
            layouts=fixed,
        )
        record_session(study_dir, session(dry_run=dry_run))
        _warn_if_not_measured(config, Console(stderr=True, soft_wrap=True) if dry_run else console)
        if dry_run:
            if factors:  # the cells and what they cost, on stderr: stdout holds the commands alone
                _show_plan(study, config, Console(stderr=True, soft_wrap=True))
            _print_commands(study, slots)
            return None
        _show_plan(study, config, console)
        if not devices:
            _warn_if_bf16_is_slow(config, console)
        _run_unfinished(study, slots, cluster, console)
    return report_study(study_dir, console)


def _check_where_to_run(jobs: int, devices_text: str | None, cluster: JobOptions | None) -> list[str]:
    """One-line errors for --jobs, --devices and the --executor options, before a config is loaded;
    the devices of --devices."""
    if cluster is not None:
        check_options(cluster, jobs, devices_text)
    if jobs < 1:
        raise MhatrainError(f"--jobs must be at least 1, got {jobs}")
    if read_launch() is not None:  # every process would run the whole study, and its runs would join the group
        raise MhatrainError("ablate starts its runs itself: run it as `mhatrain ablate`, not under torchrun")
    return parse_devices(devices_text)


def _study_config(config_path: Path, overrides: list[str]) -> Config:
    """The config every grid point starts from, checked for what every point needs, once, before the
    first point trains: its evaluation splits, and TensorBoard when asked for."""
    config = load_config(config_path, overrides)
    check_splits(config, EVAL_SPLITS)
    if config.train.tensorboard:
        check_tensorboard()
    _absolute_cache_dir(config)
    return config


def _absolute_cache_dir(config: Config) -> None:
    cache = config.data.cache_dir
    if not cache.startswith("~") and not Path(cache).is_absolute():
        config.data.cache_dir = str(Path(cache).resolve())


def _warn_if_bf16_is_slow(config: Config, console: Console) -> None:
    warning = slow_bf16_warning(resolve_device(config.train.device), config.train.precision)
    if warning is not None:
        console.print(warning, highlight=False)


def _warn_if_not_measured(config: Config, console: Console) -> None:
    """The report tests the checkpoint with the lowest validation loss (run_records.MEASURE); a config that
    keeps best.pt by BLEU evaluates another checkpoint, and such a point is left out of the tests."""
    if selection_metric(config) != "loss":
        console.print(
            f"warning: train.early_stop_metric={config.train.early_stop_metric}, but the report tests each run's "
            "checkpoint with the lowest validation loss: a point whose BLEU-selected checkpoint is another one is "
            "left out of its tests (add --set train.early_stop_metric=loss)",
            highlight=False,
        )


def _print_commands(study: Study, slots: list[Slot]) -> None:
    """One shell line per grid point on stdout (nothing else), for a scheduler or `parallel`."""
    sys.stderr.write(
        f"# study {study.dir}: {len(study.points)} grid points; each line trains (or resumes) one point "
        f"and evaluates it; `mhatrain report {study.dir}` gathers them\n"
    )
    for i, point in enumerate(study.points):
        print(shell_line(point_commands(study, point, slots[i % len(slots)])), flush=True)


def _show_plan(study: Study, config: Config, console: Console) -> None:
    if study.factors:
        console.print("\n".join(plan_lines(study, config)), highlight=False)
        return
    heads = ", ".join(map(str, sorted({p.heads for p in study.points if p.layout is None})))
    seeds = ", ".join(map(str, dict.fromkeys(p.seed for p in study.points)))
    fixed = ", ".join(dict.fromkeys(p.layout.name for p in study.points if p.layout))
    lines = [
        f"study {study.dir}: h ∈ {{{heads}}}{f' and layouts {{{fixed}}}' if fixed else ''} × seeds {{{seeds}}} = "
        f"{len(study.points)} runs; d_model={config.model.d_model}, so d_k = d_v = d_model / h keeps parameters and "
        "compute constant" + (f" (a layout's heads have n_heads={config.model.n_heads}'s d_k)" if fixed else "")
    ]
    for point in study.points:
        h = point.heads or config.model.n_heads  # a layout point's heads have n_heads' size
        arm = point.label if point.layout else f"h={point.heads:<3}"
        lines.append(
            f"  {point.name}: {arm} d_k={head_size(config.model.d_model, h, config.model.d_head):<4} "
            f"{study.state(point)}"
        )
    console.print("\n".join(lines), highlight=False)


def _run_unfinished(study: Study, slots: list[Slot], cluster: JobOptions | None, console: Console) -> None:
    """Run the points that are not done: as cluster jobs, in this process (one slot), or as subprocesses."""
    todo = [p for p in study.points if study.state(p) != "done"]
    done_before = len(study.points) - len(todo)
    if done_before:
        console.print(f"{done_before} of {len(study.points)} runs already finished: skipped")
    if not todo:
        return
    if cluster is not None:
        _stop_on_failures(study, run_jobs(study, todo, slots[0], cluster, done_before, console), todo, "jobs", console)
    elif len(slots) == 1:
        _run_here(study, todo, slots[0], done_before, console)
    else:
        _run_subprocesses(study, todo, slots, done_before, console)


def _stop_on_failures(study: Study, failed: dict[str, Path], todo: list[Point], what: str, console: Console) -> None:
    """After failed points: report what finished, then one error line naming each failure and its log."""
    if failed:
        report_study(study.dir, console)
        names = ", ".join(f"{name} (log: {log})" for name, log in failed.items())
        raise MhatrainError(f"{len(failed)} of {len(todo)} {what} failed: {names}")


def _past_durations(study: Study, todo: list[Point]) -> list[float]:
    seconds = (point_seconds(study, point) for point in study.points if point not in todo)
    return [s for s in seconds if s]


# ----------------------------------------------------------------------------- in this process (--jobs 1)


def run_point(study: Study, point: Point, slot: Slot, console: Console) -> None:
    """Train (or resume) and evaluate one grid point in this process: the library calls of its commands."""
    run_dir = study.run_dir(point)
    if study.state(point) in ("pending", "training"):
        config = load_config(study.base_config, point_overrides(point, slot))
        train(config, run_dir, resume=True, console=console)
    for split in missing_evaluations(run_dir, study.beam):
        evaluate_run(run_dir, split, beam=None, alpha=None, which="best", overrides=[], console=console)


def _run_here(study: Study, todo: list[Point], slot: Slot, done_before: int, console: Console) -> None:
    total = done_before + len(todo)
    with GridDisplay(console, total, done_before, 1, _past_durations(study, todo)) as grid:
        for point in todo:
            grid.start(point, resumed=study.state(point) != "pending")
            try:
                run_point(study, point, slot, console)
            except SystemExit:  # a signal stopped training after a checkpoint
                console.print(
                    f"study interrupted during {point.name}: run the same `mhatrain ablate` command "
                    f"again to continue from its last checkpoint",
                    highlight=False,
                )
                raise
            grid.finish(point, point_outcome(study, point), seconds=point_seconds(study, point))


# ----------------------------------------------------------------------------- as subprocesses (--jobs N)


def _run_subprocesses(study: Study, todo: list[Point], slots: list[Slot], done_before: int, console: Console) -> None:
    """Run grid points as `python -m mhatrain` subprocesses, one per slot at a time (see Subprocesses)."""
    grid = GridDisplay(console, done_before + len(todo), done_before, len(slots), _past_durations(study, todo))
    runner = Subprocesses(study, slots, grid, console)
    runner.run(todo)
    _stop_on_failures(study, runner.failed, todo, "runs", console)


class Subprocesses:
    """Grid points run as subprocesses: the commands each still needs (directory.needed_commands), with
    their output in the point's log.

    A worker thread per slot takes the next point and a free slot; the main thread shows each running
    point's last log line. Ctrl-C or SIGTERM stops them all: each run saves a checkpoint and exits, and
    the same `ablate` command continues the study. The workers share the free slots, the running
    processes and the failed points.
    """

    def __init__(self, study: Study, slots: list[Slot], grid: GridDisplay, console: Console):
        self.study, self.grid, self.console = study, grid, console
        self.workers = len(slots)
        self.free_slots: queue.Queue[Slot] = queue.Queue()
        for slot in slots:
            self.free_slots.put(slot)
        self.running: dict[str, subprocess.Popen] = {}  # point name → its command running now
        self.failed: dict[str, Path] = {}  # point name → its log
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # guards `running`: a process starts only while not stopping
        self.sigterm = False  # the stop came from SIGTERM (else Ctrl-C): it decides the exit status

    def run(self, todo: list[Point]) -> None:
        """Run every point of `todo`; when interrupted, stop them and exit as an interrupted `train` does."""
        with self._sigterm_interrupts(), self.grid, ThreadPoolExecutor(max_workers=self.workers) as pool:
            futures = [pool.submit(self._run_point, point) for point in todo]
            try:
                self._show_progress(todo, futures)
            except KeyboardInterrupt:
                self._stop()
                self.console.print(
                    "study interrupted: run the same `mhatrain ablate` command again to continue "
                    "(finished runs are kept, interrupted ones resume from their last checkpoint)"
                )
                raise SystemExit(143 if self.sigterm else 130) from None  # 128 + SIGTERM or SIGINT
            for future in futures:
                future.result()

    def _show_progress(self, todo: list[Point], futures: list[Future]) -> None:
        """Each running point's last log line, twice a second, until every point has finished."""
        while not all(f.done() for f in futures):
            for point in todo:
                if point.name in self.grid.running:
                    self.grid.show_point_status(point, _tail(self.study.log_path(point)))
            time.sleep(0.5)

    @contextlib.contextmanager
    def _sigterm_interrupts(self):
        """SIGTERM (a scheduler's stop) interrupts the main thread as Ctrl-C does, while the points run.
        Only the main thread may set a signal handler: elsewhere SIGTERM keeps its own."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _on_sigterm(self, signum, frame) -> None:
        self.sigterm = True
        raise KeyboardInterrupt

    def _stop(self) -> None:
        """Start no more commands; ask each running one to save a checkpoint and exit (SIGTERM), and wait."""
        self.stopping.set()
        with self.lock:
            running = list(self.running.values())
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        for proc in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=120)

    def _run_point(self, point: Point) -> None:
        """A worker: run `point` on the next free slot, then free it."""
        slot = self.free_slots.get()
        try:
            if not self.stopping.is_set():
                self._run_on(point, slot)
        finally:
            self.free_slots.put(slot)

    def _run_on(self, point: Point, slot: Slot) -> None:
        commands = needed_commands(self.study, point, slot)
        log = self.study.log_path(point)
        log.parent.mkdir(parents=True, exist_ok=True)
        self.grid.start(
            point, f" on {slot.device}" if slot.device else "", resumed=self.study.state(point) != "pending"
        )
        code = self._run_commands(point, commands, log, _environment(slot))
        if code is None or self.stopping.is_set():  # interrupted: the next `ablate` resumes the point
            return
        if code:
            self.failed[point.name] = log
            self.grid.finish(point, f"exit status {code}, see {log}", ok=False)
        else:
            self.grid.finish(point, point_outcome(self.study, point), seconds=point_seconds(self.study, point))

    def _run_commands(self, point: Point, commands: list[list[str]], log: Path, env: dict[str, str]) -> int | None:
        """Run `commands` one after another, each line and output appended to `log`: 0 when all
        succeed, else the first nonzero exit status; None when stopped before one could start."""
        with open(log, "a", encoding="utf-8") as f:
            for argv in commands:
                f.write(f"$ {shlex.join(argv)}\n")
                f.flush()
                with self.lock:
                    if self.stopping.is_set():
                        return None
                    proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
                    self.running[point.name] = proc
                code = proc.wait()
                with self.lock:
                    self.running.pop(point.name, None)
                if code:
                    return code
        return 0


def _environment(slot: Slot) -> dict[str, str]:
    """A subprocess's environment: with the slot's thread share for OpenMP too (train.threads sets torch's)."""
    return {**os.environ, **({"OMP_NUM_THREADS": str(slot.threads)} if slot.threads else {})}


def _tail(path: Path) -> str:
    """The last non-empty line of a log (read from its end: logs grow long)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 2048))
            lines = [line for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""
