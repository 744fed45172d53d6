"""`mhatrain export STUDY|RUN DEST`: copy a study's or a run's light files (no checkpoints) into a
directory meant to be committed or shared, with every absolute path they record made relative, so they
name no machine.

Copied per run directory: config.yaml, metrics.jsonl, train_summary.json, eval/ and heads/ reports;
per study: study.yaml, base-config.yaml, report files and logs. Checkpoints (*.pt) and the SentencePiece
model stay behind. A path under the base directory (default: the current directory, the repository
root when run from a checkout) becomes relative to it; the home directory becomes `~`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .checkpoint import CONFIG_FILE, EVAL_DIR, METRICS_FILE, SUMMARY_FILE
from .errors import MhatrainError
from .io import portable_text
from .provenance import PROVENANCE_FILE
from .study import LOGS_DIR, STUDY_FILE, is_study, parse_point_name

RUN_FILES = (CONFIG_FILE, METRICS_FILE, SUMMARY_FILE, PROVENANCE_FILE)
RUN_DIRS = (EVAL_DIR, "heads")  # heads/: the reports of `mhatrain heads` (heads.py, head_roles.py)
STUDY_SUFFIXES = (".yaml", ".md", ".csv", ".json", ".png", ".log", ".txt")
TEXT_SUFFIXES = (".yaml", ".md", ".csv", ".json", ".jsonl", ".log", ".txt")


def _copy(source: Path, target: Path, base: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.suffix in TEXT_SUFFIXES:
        target.write_text(portable_text(source.read_text(encoding="utf-8"), base), encoding="utf-8")
    else:
        shutil.copyfile(source, target)


def _export_run(run_dir: Path, dest: Path, base: Path) -> int:
    written = 0
    for name in RUN_FILES:
        if (run_dir / name).is_file():
            _copy(run_dir / name, dest / name, base)
            written += 1
    for sub in RUN_DIRS:
        for item in sorted((run_dir / sub).glob("*")) if (run_dir / sub).is_dir() else []:
            if item.is_file():
                _copy(item, dest / sub / item.name, base)
                written += 1
    return written


def _check(source: Path, dest: Path, what: str) -> None:
    if not source.is_dir():
        raise MhatrainError(f"{what} directory not found: {source}")
    if dest.resolve() == source.resolve():
        raise MhatrainError(f"export: the destination {dest} is the {what} directory itself")


def export_study(study_dir: Path, dest: Path, base: Path | None = None) -> int:
    """Copy the study's light files to `dest` with portable paths; returns the number of files written."""
    study_dir, dest, base = Path(study_dir), Path(dest), Path(base or Path.cwd())
    _check(study_dir, dest, "study")
    written = 0
    for path in sorted(study_dir.iterdir()):
        if path.is_file() and path.suffix in STUDY_SUFFIXES:
            _copy(path, dest / path.name, base)
            written += 1
        elif path.is_dir() and path.name == LOGS_DIR:
            for log in sorted(path.glob("*.log")):
                _copy(log, dest / LOGS_DIR / log.name, base)
                written += 1
        elif path.is_dir() and parse_point_name(path.name) is not None:
            written += _export_run(path, dest / path.name, base)
    return written


def export_run(run_dir: Path, dest: Path, base: Path | None = None) -> int:
    """Copy one run directory's light files to `dest` with portable paths; returns the number written."""
    run_dir, dest, base = Path(run_dir), Path(dest), Path(base or Path.cwd())
    _check(run_dir, dest, "run")
    if not (run_dir / CONFIG_FILE).is_file():
        raise MhatrainError(f"{run_dir} is neither a study ({STUDY_FILE}) nor a run directory ({CONFIG_FILE})")
    return _export_run(run_dir, dest, base)


def export(source: Path, dest: Path, base: Path | None = None) -> int:
    """Export a study (a directory with study.yaml or grid points) or else a single run directory."""
    source = Path(source)
    if is_study(source):
        return export_study(source, dest, base)
    return export_run(source, dest, base)
