"""The head-count study of the paper's Table 3, rows (A): one run per (h, seed), d_k = d_v = d_model / h.

Because every head has d_model / h dimensions, W_Q, W_K, W_V and W_O stay d_model × d_model for any h:
parameters and compute are the same at every grid point, only the way attention is split changes.

A study directory:
    study.yaml            the grid (heads, seeds), the source config and its --set overrides
    base-config.yaml      the resolved config every grid point starts from
    provenance.json       one session per `mhatrain ablate`: command, code, software, machine (provenance.py)
    h08-seed1/ ...        one run directory per grid point, laid out with its config.yaml when the study
                          is recorded; `mhatrain train` fills it, then `mhatrain eval` adds
                          eval/valid.beamK.json and eval/test.beamK.json
    logs/h08-seed1.log    output of a point run in a subprocess (--jobs N)
    jobs/                 with --executor slurm|local: submitit's files per job, jobs.json (cluster.py)
    report.md .csv .json .png, report-runs.csv   written by `mhatrain report` (and at the end of `ablate`)

A grid point is three steps on base-config.yaml with `--set model.n_heads=H --set train.seed=S`:
`train --resume` (a run directory without a checkpoint starts from the beginning, an interrupted
one continues, a finished one does nothing), `eval --split valid` and `eval --split test`.
`--dry-run` prints exactly these commands, `--jobs N` runs them as subprocesses, and `--jobs 1`
calls the same library functions in-process, so a study gives the same results whichever way it runs.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from .checkpoint import config_differences, eval_path
from .config import Config, apply_override, dump_config, load_config, validate
from .dashboard import check_available as check_tensorboard
from .distributed import read_launch, resolve_device
from .errors import MhatrainError
from .export import portable_text
from .io import atomic_write_text, read_json
from .provenance import PROVENANCE_FILE, code_version, record_session, session
from .runtime import is_device_name, slow_bf16_warning

STUDY_FILE = "study.yaml"
BASE_CONFIG = "base-config.yaml"
EVAL_SPLITS = ("valid", "test")
POINT_NAME = re.compile(r"^h(\d+)-seed(\d+)$")
GRID_KEYS = {"model.n_heads", "train.seed"}  # set per grid point, so the base config's values do not matter
# Keys that change how a run executes, not what it computes: a study may be continued with other values.
EXECUTION_KEYS = {
    "train.threads",
    "train.device",
    "train.log_every",
    "train.compile",
    "decode.batch_tokens",
    "data.cache_dir",
    "train.dist_backend",
    "train.tensorboard",
}


# ----------------------------------------------------------------------------- the grid


@dataclass(frozen=True)
class Point:
    """One grid point: a head count and a seed."""

    heads: int
    seed: int

    @property
    def name(self) -> str:
        return f"h{self.heads:02d}-seed{self.seed}"

    @property
    def overrides(self) -> list[str]:
        return [f"model.n_heads={self.heads}", f"train.seed={self.seed}"]


def parse_point_name(name: str) -> Point | None:
    match = POINT_NAME.match(name)
    return Point(int(match.group(1)), int(match.group(2))) if match else None


def _parse_ints(text: str, option: str, what: str) -> list[int]:
    items = [item.strip() for item in str(text).split(",")]
    if not any(items):
        raise MhatrainError(f"{option}: give a comma-separated list of {what}, e.g. {option} 1,4,8")
    values: list[int] = []
    for item in items:
        if not re.fullmatch(r"[+-]?\d+", item):
            raise MhatrainError(f"{option}: {item!r} is not an integer (give a comma-separated list of {what})")
        value = int(item)
        if value in values:
            raise MhatrainError(f"{option}: {value} is given twice")
        values.append(value)
    return values


def parse_heads(text: str, d_model: int) -> list[int]:
    """`--heads 1,4,8`: positive, distinct integers that divide d_model (so d_k = d_model / h is whole)."""
    heads = _parse_ints(text, "--heads", "head counts")
    for h in heads:
        if h <= 0:
            raise MhatrainError(f"--heads: {h} is not a positive number of heads")
        if d_model % h:
            divisors = [d for d in range(1, d_model + 1) if d_model % d == 0]
            shown = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
            raise MhatrainError(
                f"--heads: {h} does not divide model.d_model={d_model} (d_k = d_model / h must be "
                f"a whole number; divisors: {shown})"
            )
    return sorted(heads)


def parse_seeds(text: str) -> list[int]:
    seeds = _parse_ints(text, "--seeds", "seeds")
    for seed in seeds:
        if seed < 0:
            raise MhatrainError(f"--seeds: {seed} is negative (seeds are integers ≥ 0)")
    return seeds


def expand_grid(heads: list[int], seeds: list[int]) -> list[Point]:
    """Seed-major order: the whole head curve for the first seed comes first, so a partial study already shows it."""
    return [Point(h, seed) for seed in seeds for h in sorted(heads)]


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


# ----------------------------------------------------------------------------- the study directory


@dataclass
class Study:
    dir: Path
    points: list[Point]  # the grid of this invocation
    heads: list[int]  # the whole recorded grid (a study can grow)
    seeds: list[int]
    beam: int  # decode.beam: names the eval files

    @property
    def base_config(self) -> Path:
        return self.dir / BASE_CONFIG

    def run_dir(self, point: Point) -> Path:
        return self.dir / point.name

    def log_path(self, point: Point) -> Path:
        return self.dir / "logs" / f"{point.name}.log"

    def eval_file(self, point: Point, split: str) -> Path:
        return eval_path(self.run_dir(point), split, self.beam)

    def state(self, point: Point) -> str:
        """done | trained (evaluation missing) | started | pending."""
        run_dir = self.run_dir(point)
        if (run_dir / "train_summary.json").is_file():
            if all(self.eval_file(point, split).is_file() for split in EVAL_SPLITS):
                return "done"
            return "trained"
        if any((run_dir / name).exists() for name in ("last.pt", "last.prev.pt", "metrics.jsonl")):
            return "started"
        return "pending"


def plan_study(
    config: Config, source: str, heads_text: str, seeds_text: str, extras: list[list[str]]
) -> tuple[list[int], list[int], list[Point]]:
    """Check the grid and every point's config (with each slot's extra settings) before anything is written."""
    heads = parse_heads(heads_text, config.model.d_model)
    seeds = parse_seeds(seeds_text)
    points = expand_grid(heads, seeds)
    for point in points:  # every point's config must load exactly as its command will load it
        for extra in extras:
            point_config(config, point, extra, source)
    return heads, seeds, points


def point_config(config: Config, point: Point, extra: list[str] = (), source: str = BASE_CONFIG) -> Config:
    """The base config with the point's (and a slot's) `--set` values applied and checked."""
    result = copy.deepcopy(config)
    items = [*point.overrides, *extra]
    for item in items:
        apply_override(result, item)
    validate(result, f"{source} with --set {' --set '.join(items)}")
    return result


def _absolute_cache_dir(config: Config) -> None:
    cache = config.data.cache_dir
    if not cache.startswith("~") and not Path(cache).is_absolute():
        config.data.cache_dir = str(Path(cache).resolve())


def open_study(
    study_dir: Path,
    config: Config,
    config_path: Path,
    overrides: list[str],
    heads: list[int],
    seeds: list[int],
    points: list[Point],
    overwrite: bool,
    console: Console,
) -> Study:
    """Create the study directory, or check that an existing one was made with the same config."""
    study_file = study_dir / STUDY_FILE
    recorded = _read_yaml(study_file) if study_file.is_file() else None
    if recorded is None and study_dir.is_dir() and any(p.name != ".lock" for p in study_dir.iterdir()):
        raise MhatrainError(
            f"{study_dir} is not empty and holds no study ({STUDY_FILE} is missing): choose another --out"
        )
    if recorded is not None:
        base = _read_yaml(study_dir / BASE_CONFIG) if (study_dir / BASE_CONFIG).is_file() else {}
        differs = [k for k in config_differences(base, config.to_dict()) if k not in GRID_KEYS | EXECUTION_KEYS]
        if differs and not overwrite:
            shown = "; ".join(f"{k}: {_get(base, k)!r} there, {_get(config.to_dict(), k)!r} now" for k in differs[:4])
            more = f" (and {len(differs) - 4} more)" if len(differs) > 4 else ""
            raise MhatrainError(
                f"{study_dir} holds a study made with a different config ({shown}{more}); "
                f"use another --out, or --overwrite to delete its runs and start again"
            )
        if differs:
            _discard_study(study_dir, console)
            recorded = None
    if recorded is not None:  # a study can grow: new head counts or seeds join the recorded grid
        heads = sorted(set(recorded.get("heads", [])) | set(heads))
        seeds = list(dict.fromkeys([*recorded.get("seeds", []), *seeds]))
    record = {
        "heads": heads,
        "seeds": seeds,
        "config": portable_text(str(Path(config_path).resolve()), Path.cwd()),
        "overrides": list(overrides),
        "created": recorded.get("created") if recorded else datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "note": "each grid point is base-config.yaml with --set model.n_heads=H --set train.seed=S",
        # Every code version that has run this study: one entry if a single commit ran every point.
        "code": _append_new(list((recorded or {}).get("code") or []), code_version()),
    }
    _write_if_changed(study_file, yaml.safe_dump(record, sort_keys=False))
    _write_if_changed(study_dir / BASE_CONFIG, yaml.safe_dump(config.to_dict(), sort_keys=False))
    study = Study(study_dir, points, heads, seeds, config.decode.beam)
    for point in points:  # laid out in advance, so that `train --resume` is the one command for any state
        if not (study.run_dir(point) / "config.yaml").is_file():
            dump_config(point_config(config, point), study.run_dir(point) / "config.yaml")
    return study


def _append_new(items: list, item) -> list:
    return items if item in items else [*items, item]


def _discard_study(study_dir: Path, console: Console) -> None:
    import shutil

    removed = 0
    for path in sorted(study_dir.iterdir()):
        if path.is_dir() and parse_point_name(path.name) is not None:
            shutil.rmtree(path)
            removed += 1
        elif path.name == "logs" and path.is_dir():
            shutil.rmtree(path)
        elif path.is_file() and (
            path.name.startswith("report") or path.name in (STUDY_FILE, BASE_CONFIG, PROVENANCE_FILE)
        ):
            path.unlink()
    console.print(f"--overwrite: deleted the {removed} run directories of the previous study in {study_dir}")


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise MhatrainError(f"{path}: cannot read ({exc})") from None
    if not isinstance(data, dict):
        raise MhatrainError(f"{path}: not a study record")
    return data


def _write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)


def _get(d: dict, dotted: str):
    section, key = dotted.split(".")
    return (d.get(section) or {}).get(key)


@contextlib.contextmanager
def study_lock(study_dir: Path):
    """One `ablate` at a time per study directory (the lock goes with the process, even on SIGKILL)."""
    import fcntl

    try:
        study_dir.mkdir(parents=True, exist_ok=True)
        handle = open(study_dir / ".lock", "a+")
    except OSError as exc:
        raise MhatrainError(f"cannot create study directory {study_dir}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise MhatrainError(f"another `mhatrain ablate` is running on {study_dir}; wait for it to finish") from None
        yield
    finally:
        handle.close()


# ----------------------------------------------------------------------------- one grid point


def point_commands(study: Study, point: Point, extra: list[str]) -> list[list[str]]:
    """The three commands of a grid point: train (or resume), then evaluate on validation and test."""
    python = [sys.executable, "-m", "mhatrain"]
    sets = [arg for item in [*point.overrides, *extra] for arg in ("--set", item)]
    run_dir = str(study.run_dir(point))
    return [
        [*python, "train", str(study.base_config), "--out", run_dir, "--resume", *sets],
        *[[*python, "eval", run_dir, "--split", split] for split in EVAL_SPLITS],
    ]


def needed_commands(study: Study, point: Point, extra: list[str]) -> list[list[str]]:
    """The commands of a point that its state still needs: training unless it has trained, and the
    evaluations whose reports are missing."""
    train_cmd, *eval_cmds = point_commands(study, point, extra)
    needed = [] if study.state(point) in ("trained", "done") else [train_cmd]
    return needed + [cmd for cmd, split in zip(eval_cmds, EVAL_SPLITS) if not study.eval_file(point, split).is_file()]


def shell_line(commands: list[list[str]]) -> str:
    return " && ".join(shlex.join(argv) for argv in commands)


def run_point(study: Study, point: Point, extra: list[str], console: Console) -> None:
    """Train (or resume) and evaluate one grid point in this process: the library calls of its commands."""
    from .runner import evaluate_run
    from .train import train

    run_dir = study.run_dir(point)
    if study.state(point) in ("pending", "started"):
        config = load_config(study.base_config, [*point.overrides, *extra])
        train(config, run_dir, resume=True, console=console)
    for split in EVAL_SPLITS:
        if not study.eval_file(point, split).is_file():
            evaluate_run(run_dir, split, None, None, "best", [], console)


def _finished_files(study: Study, point: Point) -> tuple[dict, dict[str, dict]] | None:
    """A finished point's train_summary.json and its evaluation reports by split; None if one is
    missing or unreadable."""
    summary = read_json(study.run_dir(point) / "train_summary.json")
    evals = {split: read_json(study.eval_file(point, split)) for split in EVAL_SPLITS}
    if summary is None or None in evals.values():
        return None
    return summary, evals


def point_outcome(study: Study, point: Point) -> str:
    files = _finished_files(study, point)
    if files is None:
        return ""
    summary, evals = files
    test = evals["test"]
    return f"{summary['parameters']:,} parameters, test BLEU {test['bleu']:.2f}, chrF {test['chrf']:.2f}"


def point_seconds(study: Study, point: Point) -> float | None:
    """A finished point's training, validation and evaluation time from its files: over all the
    sessions it took, where the clock of one invocation sees only the last."""
    files = _finished_files(study, point)
    if files is None:
        return None
    summary, evals = files
    try:
        return (
            float(summary["train_seconds"])
            + float(summary["valid_seconds"])
            + sum(float(report["decode_seconds"]) for report in evals.values())
        )
    except (KeyError, TypeError, ValueError):
        return None


# ----------------------------------------------------------------------------- grid progress


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class GridDisplay:
    """Grid progress (runs done, running, left, ETA) above each run's own progress display.

    On a terminal it is a live bar (rich ≥ 14 stacks it above the training bar of the run in this
    process, or above one line per subprocess run); elsewhere, one printed line per event.
    """

    def __init__(self, console: Console, total: int, done: int, jobs: int, durations: list[float] = ()):
        """durations: seconds of points finished before (point_seconds), the first basis of the ETA."""
        self.console, self.total, self.done, self.jobs = console, total, done, jobs
        self.running: dict[str, float] = {}
        self.resumed: set[str] = set()
        self.durations: list[float] = list(durations)
        self.failed = 0
        nested_ok = hasattr(console, "_live_stack")  # rich < 14 allows one live display at a time
        self.live = console.is_terminal and (jobs > 1 or nested_ok)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=30),
            TextColumn("{task.fields[status]}"),
            console=console,
            transient=True,
            disable=not self.live,
        )
        self.task = self.progress.add_task("[bold]grid", total=total, completed=done, status=self.summary())
        self.point_tasks: dict[str, int] = {}
        self._lock = threading.Lock()

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def summary(self) -> str:
        left = self.total - self.done - self.failed - len(self.running)
        failed = f", {self.failed} failed" if self.failed else ""
        return f"{self.done}/{self.total} runs done, {len(self.running)} running, {left} left{failed}, ETA {self.eta()}"

    def eta(self) -> str:
        if not self.durations:
            return "after the first run"
        mean = sum(self.durations) / len(self.durations)
        now = time.monotonic()
        left = self.total - self.done - self.failed - len(self.running)
        remaining = left * mean + sum(max(0.0, mean - (now - start)) for start in self.running.values())
        return _clock(remaining / max(1, min(self.jobs, left + len(self.running))))

    def start(self, point: Point, where: str = "", resumed: bool = False) -> None:
        with self._lock:
            self.running[point.name] = time.monotonic()
            if resumed:
                self.resumed.add(point.name)
            self.console.print(
                f"[bold]grid[/] {point.name} (h={point.heads}, seed {point.seed}) starting{where}: {self.summary()}",
                highlight=False,
            )
            if self.live and self.jobs > 1:
                self.point_tasks[point.name] = self.progress.add_task(f"  {point.name}", total=None, status="")
            self._refresh()

    def finish(self, point: Point, outcome: str, ok: bool = True, seconds: float | None = None) -> None:
        """seconds: the point's time over all its sessions (point_seconds), if known."""
        with self._lock:
            wall = time.monotonic() - self.running.pop(point.name, time.monotonic())
            if ok:
                self.done += 1
                self.durations.append(seconds or wall)
            else:
                self.failed += 1
            if point.name in self.point_tasks:
                self.progress.remove_task(self.point_tasks.pop(point.name))
            word = "done" if ok else "[bold red]failed[/]"
            took = _clock(wall)
            if point.name in self.resumed:
                took += f" (resumed; {_clock(seconds)} in all its sessions)" if seconds else " (resumed)"
            self.console.print(
                f"[bold]grid[/] {point.name} {word} in {took}{': ' + outcome if outcome else ''} — {self.summary()}",
                highlight=False,
            )
            self._refresh()

    def show_point_status(self, point: Point, status: str) -> None:
        with self._lock:
            if point.name in self.point_tasks:
                self.progress.update(self.point_tasks[point.name], status=status[-100:])

    def _refresh(self) -> None:
        self.progress.update(self.task, completed=self.done, status=self.summary())


# ----------------------------------------------------------------------------- running a study


def run_study(
    config_path: Path,
    heads_text: str,
    seeds_text: str,
    out: Path | None,
    overrides: list[str],
    jobs: int,
    devices_text: str | None,
    dry_run: bool,
    overwrite: bool,
    console: Console,
    cluster=None,
) -> dict | None:
    """`mhatrain ablate`: check, record, run every unfinished grid point, then report.

    cluster: a cluster.JobOptions to run each point as a submitit job (SLURM, or local subprocesses)."""
    if cluster is not None:
        from .cluster import check_options

        check_options(cluster, jobs, devices_text)
    if jobs < 1:
        raise MhatrainError(f"--jobs must be at least 1, got {jobs}")
    if read_launch() is not None:  # every process would run the whole study, and its runs would join the group
        raise MhatrainError("ablate starts its runs itself: run it as `mhatrain ablate`, not under torchrun")
    devices = parse_devices(devices_text)
    config = load_config(config_path, overrides)
    if config.train.tensorboard:  # before the first point trains, not at each point
        check_tensorboard()
    _absolute_cache_dir(config)
    if cluster is not None:
        from .cluster import point_settings

        extras = [point_settings(cluster)]
    else:
        extras = slot_overrides(jobs, devices, config.train.threads)
    heads, seeds, points = plan_study(config, str(config_path), heads_text, seeds_text, extras)
    study_dir = Path(out) if out is not None else Path("studies") / Path(config_path).stem
    with study_lock(study_dir):
        study = open_study(study_dir, config, Path(config_path), overrides, heads, seeds, points, overwrite, console)
        record_session(study_dir, session(dry_run=dry_run))
        if dry_run:
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
                from .cluster import run_jobs

                run_jobs(study, todo, extras[0], cluster, done_before, console)
            elif jobs == 1:
                _run_here(study, todo, extras[0], done_before, console)
            else:
                _run_subprocesses(study, todo, extras, done_before, console)
    from .report import report_study

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
    heads = ", ".join(map(str, sorted({p.heads for p in study.points})))
    seeds = ", ".join(map(str, dict.fromkeys(p.seed for p in study.points)))
    lines = [
        f"study {study.dir}: h ∈ {{{heads}}} × seeds {{{seeds}}} = {len(study.points)} runs; "
        f"d_model={config.model.d_model}, so d_k = d_v = d_model / h keeps parameters and compute constant"
    ]
    for point in study.points:
        lines.append(
            f"  {point.name}: h={point.heads:<3} d_k={config.model.d_model // point.heads:<4} {study.state(point)}"
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
        from .report import report_study

        report_study(study.dir, console)
        names = ", ".join(f"{name} (log: {log})" for name, log in failed.items())
        raise MhatrainError(f"{len(failed)} of {len(todo)} runs failed: {names}")
