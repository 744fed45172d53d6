"""The head-count study of the paper's Table 3, rows (A): one run per (h, seed), d_k = d_v = d_model / h.

Because every head has d_model / h dimensions, W_Q, W_K, W_V and W_O stay d_model × d_model for any h:
parameters and compute are the same at every grid point, only the way attention is split changes (unless
model.d_head fixes the head size: then they grow with h). `--vary KEY=V1,V2` repeats the grid in every
combination of other settings (a cell each; regimes.py maps where extra heads help).

This module runs a study's grid points; study.py says what a study directory holds and what each point
needs. `--dry-run` prints the commands of every point (study.point_commands), `--jobs N` runs them as
subprocesses, `--jobs 1` calls the same library functions in-process, and `--executor slurm|local`
submits each point as a job (cluster.py), so a study gives the same results whichever way it runs.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console

from .cluster import JobOptions, check_options, point_settings, run_jobs
from .config import Config, head_size, load_config
from .dashboard import check_available as check_tensorboard
from .data import check_splits
from .distributed import read_launch, resolve_device
from .errors import MhatrainError
from .grid_display import GridDisplay
from .provenance import record_session, session
from .report import report_study
from .runtime import is_device_name, slow_bf16_warning
from .study import (
    EVAL_SPLITS,
    Point,
    Study,
    check_factors,
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

# ----------------------------------------------------------------------------- where points run


def parse_devices(text: str | None) -> list[str]:
    if not text:
        return []
    devices = [d.strip() for d in text.split(",") if d.strip()]
    for device in devices:
        if not is_device_name(device):
            raise MhatrainError(f"--devices: {device!r} is not cpu, cuda or cuda:N")
        if device.startswith("cuda"):
            import torch

            index = int(device[5:]) if ":" in device else 0
            if not torch.cuda.is_available() or index >= torch.cuda.device_count():
                raise MhatrainError(
                    f"--devices: {device} is not available on this machine ({torch.cuda.device_count()} CUDA devices)"
                )
    return devices


def slot_overrides(jobs: int, devices: list[str], base_threads: int) -> list[list[str]]:
    """Extra --set values for each of the `jobs` slots: a device from --devices, and a share of the CPU threads."""
    slots = []
    cpus = os.cpu_count() or 1
    for slot in range(jobs):
        extra = []
        if devices:
            extra.append(f"train.device={devices[slot % len(devices)]}")
        if jobs > 1:
            share = max(1, cpus // jobs)
            extra.append(f"train.threads={min(base_threads, share) if base_threads else share}")
        slots.append(extra)
    return slots


# ----------------------------------------------------------------------------- running a study


def _absolute_cache_dir(config: Config) -> None:
    cache = config.data.cache_dir
    if not cache.startswith("~") and not Path(cache).is_absolute():
        config.data.cache_dir = str(Path(cache).resolve())


def run_point(study: Study, point: Point, extra: list[str], console: Console) -> None:
    """Train (or resume) and evaluate one grid point in this process: the library calls of its commands."""
    from .runner import evaluate_run
    from .train import train

    run_dir = study.run_dir(point)
    if study.state(point) in ("pending", "training"):
        config = load_config(study.base_config, [*point.overrides, *extra])
        train(config, run_dir, resume=True, console=console)
    for split in missing_evaluations(run_dir, study.beam):
        evaluate_run(run_dir, split, None, None, "best", [], console)


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
    cluster: JobOptions | None = None,
    allow_code_change: bool = False,
    vary: list[str] = (),
) -> dict | None:
    """`mhatrain ablate`: check, record, run every unfinished grid point, then report.

    heads, seeds: the grid (checked here: each h must divide model.d_model);
    cluster: to run each point as a submitit job (SLURM, or local subprocesses);
    allow_code_change: continue a study whose points another code version started (see open_study);
    vary: `--vary KEY=V1,V2` options: every combination of their values is a cell with the whole grid."""
    if cluster is not None:
        check_options(cluster, jobs, devices_text)
    if jobs < 1:
        raise MhatrainError(f"--jobs must be at least 1, got {jobs}")
    if read_launch() is not None:  # every process would run the whole study, and its runs would join the group
        raise MhatrainError("ablate starts its runs itself: run it as `mhatrain ablate`, not under torchrun")
    devices = parse_devices(devices_text)
    config = load_config(config_path, overrides)
    check_splits(config, EVAL_SPLITS)  # every point is evaluated on them once trained: fail now, not then
    if config.train.tensorboard:  # before the first point trains, not at each point
        check_tensorboard()
    _absolute_cache_dir(config)
    if cluster is not None:
        extras = [point_settings(cluster)]
    else:
        extras = slot_overrides(jobs, devices, config.train.threads)
    factors = check_factors(list(vary), config)
    heads, seeds, points = plan_study(config, str(config_path), heads, seeds, extras, factors)
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
            overwrite,
            console,
            allow_code_change,
            factors,
        )
        record_session(study_dir, session(dry_run=dry_run))
        if dry_run:
            if factors:  # the cells and what they cost, on stderr: stdout holds the commands alone
                _show_plan(study, config, Console(stderr=True, soft_wrap=True))
            _print_commands(study, extras, console)
            return None
        _show_plan(study, config, console)
        if (
            not devices
            and (warning := slow_bf16_warning(resolve_device(config.train.device), config.train.precision)) is not None
        ):
            console.print(warning, highlight=False)
        todo = [p for p in study.points if study.state(p) != "done"]
        done_before = len(study.points) - len(todo)
        if done_before:
            console.print(f"{done_before} of {len(study.points)} runs already finished: skipped")
        if todo:
            if cluster is not None:
                run_jobs(study, todo, extras[0], cluster, done_before, console)
            elif jobs == 1:
                _run_here(study, todo, extras[0], done_before, console)
            else:
                _run_subprocesses(study, todo, extras, done_before, console)
    return report_study(study_dir, console)


def _print_commands(study: Study, extras: list[list[str]], console: Console) -> None:
    """One shell line per grid point on stdout (nothing else), for a scheduler or `parallel`."""
    sys.stderr.write(
        f"# study {study.dir}: {len(study.points)} grid points; each line trains (or resumes) one point "
        f"and evaluates it; `mhatrain report {study.dir}` gathers them\n"
    )
    for i, point in enumerate(study.points):
        print(shell_line(point_commands(study, point, extras[i % len(extras)])), flush=True)


def _show_plan(study: Study, config: Config, console: Console) -> None:
    if study.factors:
        from .regimes import plan_lines

        console.print("\n".join(plan_lines(study, config)), highlight=False)
        return
    heads = ", ".join(map(str, sorted({p.heads for p in study.points})))
    seeds = ", ".join(map(str, dict.fromkeys(p.seed for p in study.points)))
    lines = [
        f"study {study.dir}: h ∈ {{{heads}}} × seeds {{{seeds}}} = {len(study.points)} runs; "
        f"d_model={config.model.d_model}, so d_k = d_v = d_model / h keeps parameters and compute constant"
    ]
    for point in study.points:
        lines.append(
            f"  {point.name}: h={point.heads:<3} d_k={head_size(config.model.d_model, point.heads, config.model.d_head):<4} "
            f"{study.state(point)}"
        )
    console.print("\n".join(lines), highlight=False)


def _run_here(study: Study, todo: list[Point], extra: list[str], done_before: int, console: Console) -> None:
    total = done_before + len(todo)
    with GridDisplay(console, total, done_before, 1, _past_durations(study, todo)) as grid:
        for point in todo:
            grid.start(point, resumed=study.state(point) != "pending")
            try:
                run_point(study, point, extra, console)
            except SystemExit:  # a signal stopped training after a checkpoint
                console.print(
                    f"study interrupted during {point.name}: run the same `mhatrain ablate` command "
                    f"again to continue from its last checkpoint",
                    highlight=False,
                )
                raise
            grid.finish(point, point_outcome(study, point), seconds=point_seconds(study, point))


def _past_durations(study: Study, todo: list[Point]) -> list[float]:
    seconds = (point_seconds(study, point) for point in study.points if point not in todo)
    return [s for s in seconds if s]


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 2048))
            lines = [line for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def _run_subprocesses(
    study: Study, todo: list[Point], extras: list[list[str]], done_before: int, console: Console
) -> None:
    """Run grid points as `python -m mhatrain` subprocesses, one per slot (device / thread share)."""
    import queue

    slots: queue.Queue = queue.Queue()
    for index in range(len(extras)):
        slots.put(index)
    procs: dict[str, subprocess.Popen] = {}
    failed: dict[str, Path] = {}
    stopping = threading.Event()
    guard = threading.Lock()
    grid = GridDisplay(console, done_before + len(todo), done_before, len(extras), _past_durations(study, todo))

    def work(point: Point) -> None:
        slot = slots.get()
        try:
            if stopping.is_set():
                return
            extra = extras[slot]
            needed = needed_commands(study, point, extra)
            log = study.log_path(point)
            log.parent.mkdir(parents=True, exist_ok=True)
            device = next((e.split("=", 1)[1] for e in extra if e.startswith("train.device=")), "")
            grid.start(point, f" on {device}" if device else "", resumed=study.state(point) != "pending")
            threads = next((e.split("=", 1)[1] for e in extra if e.startswith("train.threads=")), None)
            env = {**os.environ, **({"OMP_NUM_THREADS": threads} if threads else {})}
            code = 0
            with open(log, "a", encoding="utf-8") as f:
                for argv in needed:
                    f.write(f"$ {shlex.join(argv)}\n")
                    f.flush()
                    with guard:
                        if stopping.is_set():
                            return
                        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
                        procs[point.name] = proc
                    code = proc.wait()
                    with guard:
                        procs.pop(point.name, None)
                    if code:
                        break
            if stopping.is_set():
                return
            if code:
                failed[point.name] = log
            grid.finish(
                point,
                point_outcome(study, point) if not code else f"exit status {code}, see {log}",
                ok=not code,
                seconds=point_seconds(study, point) if not code else None,
            )
        finally:
            slots.put(slot)

    received = []

    def on_sigterm(signum, frame):
        received.append("SIGTERM")
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_sigterm) if threading.current_thread() is threading.main_thread() else None
    try:
        with grid, ThreadPoolExecutor(max_workers=len(extras)) as pool:
            futures = [pool.submit(work, point) for point in todo]
            try:
                while not all(f.done() for f in futures):
                    for point in todo:
                        if point.name in grid.running:
                            grid.show_point_status(point, _tail(study.log_path(point)))
                    time.sleep(0.5)
            except KeyboardInterrupt:
                stopping.set()
                with guard:
                    running = list(procs.values())
                for proc in running:  # SIGTERM: each run saves a checkpoint and exits
                    with contextlib.suppress(ProcessLookupError):
                        proc.terminate()
                for proc in running:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=120)
                console.print(
                    "study interrupted: run the same `mhatrain ablate` command again to continue "
                    "(finished runs are kept, interrupted ones resume from their last checkpoint)"
                )
                raise SystemExit(143 if received else 130) from None  # the exit status of an interrupted `train`
            for future in futures:
                future.result()
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    if failed:
        report_study(study.dir, console)
        names = ", ".join(f"{name} (log: {log})" for name, log in failed.items())
        raise MhatrainError(f"{len(failed)} of {len(todo)} runs failed: {names}")
