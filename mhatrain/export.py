"""`mhatrain export STUDY DEST`: copy a study's light files (no checkpoints) into a directory meant to be
committed or shared, with every absolute path they record made relative, so they name no machine.

Copied per run directory: config.yaml, metrics.jsonl, train_summary.json, eval/ and heads/ reports;
per study: study.yaml, base-config.yaml, report files and logs. Checkpoints (*.pt) and the SentencePiece
model stay behind. A path under the base directory (default: the current directory, the repository
root when run from a checkout) becomes relative to it; the home directory becomes `~`.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from .errors import MhatrainError

RUN_FILES = ("config.yaml", "metrics.jsonl", "train_summary.json", "provenance.json")
RUN_DIRS = ("eval", "heads")
STUDY_SUFFIXES = (".yaml", ".md", ".csv", ".json", ".png", ".log", ".txt")
TEXT_SUFFIXES = (".yaml", ".md", ".csv", ".json", ".jsonl", ".log", ".txt")
ABSOLUTE = re.compile(r"(?<![\w.~/-])(/[^\s\"',:|+]+)")


def portable_text(text: str, base: Path) -> str:
    """Every absolute path in `text` rewritten relative to `base` (or to ~ under the home directory)."""
    base, home = base.resolve(), Path.home().resolve()

    def relative(match: re.Match) -> str:
        path = Path(match.group(1))
        if path.is_relative_to(home) and not base.is_relative_to(home):
            return "~/" + path.relative_to(home).as_posix()
        return os.path.relpath(path, base)

    return ABSOLUTE.sub(relative, text)


def _copy(source: Path, target: Path, base: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.suffix in TEXT_SUFFIXES:
        target.write_text(portable_text(source.read_text(encoding="utf-8"), base), encoding="utf-8")
    else:
        shutil.copyfile(source, target)


def export_study(study_dir: Path, dest: Path, base: Path | None = None) -> int:
    """Copy the study's light files to `dest` with portable paths; returns the number of files written."""
    from .ablate import parse_point_name

    study_dir, dest, base = Path(study_dir), Path(dest), Path(base or Path.cwd())
    if not study_dir.is_dir():
        raise MhatrainError(f"study directory not found: {study_dir}")
    if dest.resolve() == study_dir.resolve():
        raise MhatrainError(f"export: the destination {dest} is the study directory itself")
    written = 0
    for path in sorted(study_dir.iterdir()):
        if path.is_file() and path.suffix in STUDY_SUFFIXES:
            _copy(path, dest / path.name, base)
            written += 1
        elif path.is_dir() and path.name == "logs":
            for log in sorted(path.glob("*.log")):
                _copy(log, dest / "logs" / log.name, base)
                written += 1
        elif path.is_dir() and parse_point_name(path.name) is not None:
            for name in RUN_FILES:
                if (path / name).is_file():
                    _copy(path / name, dest / path.name / name, base)
                    written += 1
            for sub in RUN_DIRS:
                for item in sorted((path / sub).glob("*")) if (path / sub).is_dir() else []:
                    if item.is_file():
                        _copy(item, dest / path.name / sub / item.name, base)
                        written += 1
    return written
