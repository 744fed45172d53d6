"""`mhatrain export STUDY|RUN DEST`: copy a study's or a run's light files (no checkpoints) into a
directory meant to be committed or shared, with every absolute path they record made relative, so they
name no machine.

Copied per run directory: config.yaml, metrics.jsonl, train_summary.json, eval/ and heads/ reports;
per study: study.yaml, base-config.yaml, report files and logs. Checkpoints (*.pt) and the SentencePiece
model stay behind. A path under the base directory (default: the current directory, the repository
root when run from a checkout) becomes relative to it; the home directory becomes `~`.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ...core.errors import MhatrainError
from ...core.files import atomic_write, atomic_write_text, portable_text
from ...core.provenance import PROVENANCE_FILE
from ...core.rundir import CONFIG_FILE, EVAL_DIR, METRICS_FILE, SUMMARY_FILE
from ..grid.directory import LOGS_DIR, STUDY_FILE, is_study
from ..grid.points import parse_cell, parse_point_name

RUN_FILES = (CONFIG_FILE, METRICS_FILE, SUMMARY_FILE, PROVENANCE_FILE)
RUN_DIRS = (EVAL_DIR, "heads")  # heads/: the reports of `mhatrain heads` (analysis/importance.py, analysis/roles.py)
STUDY_SUFFIXES = (".yaml", ".md", ".csv", ".json", ".png", ".log", ".txt")
TEXT_SUFFIXES = (".yaml", ".md", ".csv", ".json", ".jsonl", ".log", ".txt")


def _copy(source: Path, target: Path, base: Path) -> Path:
    if source.suffix in TEXT_SUFFIXES:
        atomic_write_text(target, portable_text(source.read_text(encoding="utf-8"), base))
    else:
        atomic_write(target, lambda f: f.write(source.read_bytes()), binary=True)
    return target


def _export_run(run_dir: Path, dest: Path, base: Path) -> list[Path]:
    written = []
    for name in RUN_FILES:
        if (run_dir / name).is_file():
            written.append(_copy(run_dir / name, dest / name, base))
    for sub in RUN_DIRS:
        for item in sorted((run_dir / sub).glob("*")) if (run_dir / sub).is_dir() else []:
            if item.is_file():
                written.append(_copy(item, dest / sub / item.name, base))
    return written


def _check(source: Path, dest: Path, what: str) -> None:
    if source.exists() and not source.is_dir():
        raise MhatrainError(f"export: {source} is a file, not a {what} directory")
    if not source.is_dir():
        raise MhatrainError(f"{what} directory not found: {source}")
    if dest.resolve() == source.resolve():
        raise MhatrainError(f"export: the destination {dest} is the {what} directory itself")


def check_destination(dest: Path, overwrite: bool) -> list[Path]:
    """The files already in `dest` (which must be a directory or not exist yet); with some there, only
    `overwrite` lets an export replace its own files among them, so that two exports never mix silently."""
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise MhatrainError(f"export: the destination {dest} is a file, not a directory")
    present = sorted(p for p in dest.rglob("*") if not p.is_dir()) if dest.is_dir() else []
    if present and not overwrite:
        raise MhatrainError(
            f"export: the destination {dest} is not empty ({len(present)} files): give a new directory, or "
            f"--overwrite to replace the files this export writes there (others are kept)"
        )
    return present


def export_study(study_dir: Path, dest: Path, base: Path | None = None) -> list[Path]:
    """Copy the study's light files to `dest` with portable paths; returns the files written."""
    study_dir, dest, base = Path(study_dir), Path(dest), Path(base or Path.cwd())
    _check(study_dir, dest, "study")
    written = []
    for path in sorted(study_dir.iterdir()):
        if path.is_file() and path.suffix in STUDY_SUFFIXES:
            written.append(_copy(path, dest / path.name, base))
        elif path.is_dir() and path.name == LOGS_DIR:
            for log in sorted(path.rglob("*.log")):  # logs/CELL/h08-seed1.log in a study made with --vary
                written.append(_copy(log, dest / LOGS_DIR / log.relative_to(path), base))
        elif path.is_dir() and parse_point_name(path.name) is not None:
            written += _export_run(path, dest / path.name, base)
        elif path.is_dir() and parse_cell(path.name) is not None:  # a cell of a --vary study: laid out as a study
            written += export_study(path, dest / path.name, base)
    return written


def export_run(run_dir: Path, dest: Path, base: Path | None = None) -> list[Path]:
    """Copy one run directory's light files to `dest` with portable paths; returns the files written."""
    run_dir, dest, base = Path(run_dir), Path(dest), Path(base or Path.cwd())
    _check(run_dir, dest, "run")
    if not (run_dir / CONFIG_FILE).is_file():
        raise MhatrainError(f"{run_dir} is neither a study ({STUDY_FILE}) nor a run directory ({CONFIG_FILE})")
    return _export_run(run_dir, dest, base)


def export_light_files(source: Path, dest: Path | None, overwrite: bool, int8: bool, console: Console) -> None:
    """`mhatrain export SOURCE DEST`: export, and the lines that say what was written and what was kept."""
    if int8:
        raise MhatrainError("--int8 applies to export --ctranslate2 only")
    if dest is None:
        raise MhatrainError("export needs DEST (a directory to copy the light files into), or --ctranslate2 DIR")
    count, kept = export(source, dest, overwrite=overwrite)
    console.print(
        f"export: {count} files written to {dest} (absolute paths made relative to {Path.cwd()})", highlight=False
    )
    if kept:
        shown = ", ".join(str(p.relative_to(dest)) for p in kept[:5]) + (", ..." if len(kept) > 5 else "")
        console.print(
            f"export: {len(kept)} file{'s' if len(kept) != 1 else ''} already there "
            f"{'was' if len(kept) == 1 else 'were'} kept: {shown}",
            highlight=False,
        )


def export(source: Path, dest: Path, base: Path | None = None, overwrite: bool = False) -> tuple[int, list[Path]]:
    """Export a study (a directory with study.yaml or grid points) or else a single run directory.
    Returns the number of files written and the files already in `dest` that the export did not write."""
    source, dest = Path(source), Path(dest)
    study = is_study(source)
    _check(source, dest, "study" if study else "run")  # a missing source is named before a full destination
    present = check_destination(dest, overwrite)
    written = set(export_study(source, dest, base) if study else export_run(source, dest, base))
    return len(written), [p for p in present if p not in written]
