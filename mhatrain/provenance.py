"""What produced a result: the code (mhatrain's version, git commit and whether the tree was dirty)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from . import __version__

PACKAGE_DIR = Path(__file__).resolve().parent


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=PACKAGE_DIR, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def code_version() -> dict:
    """{"version", "commit", "dirty"} of the mhatrain code running now; commit and dirty are None
    outside a git checkout (an installed wheel). `dirty` counts changes to tracked files only."""
    commit = _git("rev-parse", "HEAD")
    dirty = None
    if commit is not None:
        status = _git("status", "--porcelain", "--untracked-files=no", "--", ".")
        dirty = bool(status) if status is not None else None
    return {"version": __version__, "commit": commit, "dirty": dirty}
