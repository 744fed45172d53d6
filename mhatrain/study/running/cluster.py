"""Grid points as cluster jobs through submitit: `mhatrain ablate --executor slurm` (or `local`).

Each unfinished grid point becomes one job. The job runs the point's commands that its state still
needs (directory.needed_commands: the lines of `--dry-run`), decided when the job starts, so a job
started twice, or requeued, does only what is left. `--executor local` runs the same jobs as local
subprocesses through submitit's LocalExecutor: for a machine without SLURM, and for the tests.

Submitit's files (the pickled job, its stdout and stderr) go to STUDY/jobs/<job id>/, and
STUDY/jobs/jobs.json records the job of each point, so that a rerun waits for a point whose SLURM
job is still queued or running instead of submitting it again.

submitit is an optional dependency (pip install 'mhatrain[slurm]'): it is imported where a job is
made or looked up, so that `ablate` without --executor runs without it.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from ...core.errors import MhatrainError
from ...core.files import atomic_write_json, read_json
from ..grid.directory import Study, needed_commands, point_outcome, point_seconds
from ..grid.points import Point, Slot
from .grid_progress import GridDisplay

EXECUTORS = ("slurm", "local")
JOBS_DIR = "jobs"
JOBS_FILE = "jobs.json"
IN_FLIGHT = {"PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING"}  # SLURM states
POLL_SECONDS = 2.0


@dataclass
class JobOptions:
    """What each grid point's job asks the scheduler for."""

    executor: str  # slurm | local
    partition: str | None = None  # SLURM partition
    time_min: int | None = None  # wall-clock limit per point, minutes
    gpus: int | None = None  # GPUs per point
    cpus: int | None = None  # CPU cores per point (also train.threads)


def job_options(
    executor: str | None, partition: str | None, time_min: int | None, gpus: int | None, cpus: int | None
) -> JobOptions | None:
    """`ablate --executor ... --partition ... --time ... --gpus ... --cpus ...` → JobOptions (None: no
    cluster); the scheduler's options without --executor are an error."""
    if executor is None:
        if any(v is not None for v in (partition, time_min, gpus, cpus)):
            raise MhatrainError("--partition, --time, --gpus and --cpus go with --executor slurm or local")
        return None
    return JobOptions(executor, partition, time_min, gpus, cpus)  # check_options checks the executor


def check_options(options: JobOptions, jobs: int, devices: str | None) -> None:
    """One-line errors for options that cannot work, before anything is recorded or submitted."""
    if options.executor not in EXECUTORS:
        raise MhatrainError(f"--executor must be {' or '.join(EXECUTORS)}, got {options.executor!r}")
    if jobs != 1 or devices:
        raise MhatrainError(
            f"{'--jobs' if jobs != 1 else '--devices'} applies to runs on this machine; with "
            f"--executor the scheduler places each point (use --gpus and --cpus per point)"
        )
    for option, value in (("--time", options.time_min), ("--gpus", options.gpus), ("--cpus", options.cpus)):
        if value is not None and value < (0 if option == "--gpus" else 1):
            raise MhatrainError(f"{option} must be {'≥ 0' if option == '--gpus' else 'positive'}, got {value}")
    try:
        import submitit  # noqa: F401  (optional: see the module docstring)
    except ImportError:
        raise MhatrainError("--executor needs the submitit package: pip install 'mhatrain[slurm]'") from None
    if options.executor == "slurm" and shutil.which("sbatch") is None:
        raise MhatrainError(
            "--executor slurm: no sbatch command here (run `ablate` on a SLURM login node, or use "
            "--executor local to run the jobs on this machine)"
        )
    if options.partition is not None and options.executor != "slurm":
        raise MhatrainError("--partition applies to --executor slurm")


def job_slot(options: JobOptions) -> Slot:
    """Where every job runs its point: the scheduler picks the device; --cpus is its CPU threads."""
    return Slot(threads=options.cpus or None)


def run_point_job(study: Study, point: Point, slot: Slot) -> None:
    """The body of one job: the point's remaining commands, one after another, as subprocesses."""
    for argv in needed_commands(study, point, slot):
        print(f"$ {shlex.join(argv)}", flush=True)
        code = subprocess.run(argv).returncode
        if code:
            raise RuntimeError(f"`{shlex.join(argv)}` exited with status {code}")


def _executor(study: Study, options: JobOptions):
    import submitit  # optional: see the module docstring

    executor = submitit.AutoExecutor(folder=study.dir / JOBS_DIR / "%j", cluster=options.executor)
    executor.update_parameters(
        timeout_min=options.time_min,
        gpus_per_node=options.gpus,
        cpus_per_task=options.cpus,
        nodes=1,
        tasks_per_node=1,
        slurm_partition=options.partition,
    )
    return executor


def job_name(study_name: str, point_name: str) -> str:
    """The SLURM job name of a point: letters, digits, '.', '_' and '-' only. A varied study's point names
    hold '/', '=' and ',' (model.norm=post,model.d_model=512/h08-seed1), which an #SBATCH line would
    carry into the scheduler's own syntax."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"mhatrain-{study_name}-{point_name}")


def _in_flight(study: Study, options: JobOptions, recorded: dict) -> dict:
    """Recorded SLURM jobs of this study that are still queued or running, by point name."""
    if options.executor != "slurm":  # a local job ends with the `ablate` that started it
        return {}
    from submitit.slurm.slurm import SlurmJob  # optional: see the module docstring

    jobs = {}
    for name, job_id in recorded.items():
        job = SlurmJob(study.dir / JOBS_DIR / str(job_id), str(job_id))
        if job.state in IN_FLIGHT:
            jobs[name] = job
    return jobs


def run_jobs(
    study: Study, todo: list[Point], slot: Slot, options: JobOptions, done_before: int, console: Console
) -> dict[str, Path]:
    """Submit a job per unfinished point (unless its job is still in flight), wait for them all; the
    failed points' names and logs (ablate reports what finished, then stops)."""
    jobs_file = study.dir / JOBS_DIR / JOBS_FILE
    recorded = read_json(jobs_file) or {}
    waiting = _in_flight(study, options, {p.name: recorded[p.name] for p in todo if p.name in recorded})
    executor = _executor(study, options)
    points = {p.name: p for p in todo}
    grid = GridDisplay(console, done_before + len(todo), done_before, len(todo))
    with grid:
        for point in todo:
            if point.name in waiting:
                console.print(f"{point.name}: job {waiting[point.name].job_id} is still in flight: waiting for it")
            else:
                executor.update_parameters(name=job_name(study.dir.name, point.name))
                waiting[point.name] = executor.submit(run_point_job, study, point, slot)
                recorded[point.name] = waiting[point.name].job_id
                atomic_write_json(jobs_file, recorded)
            grid.start(
                point,
                f" as {options.executor} job {waiting[point.name].job_id}",
                resumed=study.state(point) != "pending",
            )
        return _wait(study, points, waiting, grid, options, console)


def _wait(
    study: Study, points: dict[str, Point], waiting: dict, grid: GridDisplay, options: JobOptions, console: Console
) -> dict[str, Path]:
    failed: dict[str, Path] = {}
    try:
        while waiting:
            for name, job in list(waiting.items()):
                if not job.done():
                    continue
                del waiting[name]
                point = points[name]
                error = job.exception()
                if error is None:
                    grid.finish(point, point_outcome(study, point), seconds=point_seconds(study, point))
                else:
                    failed[name] = job.paths.stderr
                    grid.finish(point, f"{str(error).strip().splitlines()[-1][:200]}; see {job.paths.stderr}", ok=False)
            time.sleep(POLL_SECONDS if waiting else 0)
    except KeyboardInterrupt:
        if options.executor == "slurm":
            console.print(
                f"stopped waiting: the jobs keep running on the cluster. `mhatrain report {study.dir}` shows "
                f"how far they are; the same `mhatrain ablate` command waits for them again and resubmits "
                f"the points whose jobs ended unfinished"
            )
        else:
            console.print(
                "stopped: run the same `mhatrain ablate` command again to continue (finished points are "
                "kept, interrupted ones resume from their last checkpoint)"
            )
        raise SystemExit(130) from None
    return failed


def jobs_record(study_dir: Path) -> dict:
    """The job id of each point, as the last `ablate --executor` recorded them."""
    return read_json(Path(study_dir) / JOBS_DIR / JOBS_FILE) or {}
