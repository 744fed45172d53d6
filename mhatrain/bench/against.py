"""`mhatrain bench train --against CHECKOUT`: another checkout's mhatrain as a peer of ours.

The other tree's package is imported under its own name (`mhatrain_against_<hash of its path>`),
next to ours, in the same process: its training step is then timed alternately with ours on the same batches, exactly as
the other peers are (see timing.py). An A/B measured this way sees the same phases of the machine,
which two separate runs on a shared machine do not. mhatrain's modules import each other relatively,
so the other tree's modules find each other, not ours.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from ..errors import MhatrainError

PACKAGE = "mhatrain_against"


def check_checkout(path: Path) -> Path:
    """The checkout's root (it has mhatrain/__init__.py), or a one-line error."""
    root = Path(path).expanduser().resolve()
    if not (root / "mhatrain" / "__init__.py").is_file():
        raise MhatrainError(f"--against {path}: not a checkout of mhatrain (no mhatrain/__init__.py there)")
    return root


def label(path: Path) -> str:
    """The peer's name in the tables: its commit (with '+dirty' for local changes), else the folder's name."""
    root = check_checkout(path)
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"against {root.name}"
    return f"against {commit}{'+dirty' if dirty else ''}"


def has_module(path: Path, module: str) -> bool:
    """Whether the checkout's mhatrain has `module` (e.g. "step", which older checkouts lack)."""
    return (check_checkout(path) / "mhatrain" / f"{module}.py").is_file()


def import_checkout(path: Path, module: str) -> ModuleType:
    """`module` (e.g. "train") of the checkout's mhatrain, imported as mhatrain_against_<hash>.<module>."""
    root = check_checkout(path)
    name = f"{PACKAGE}_{hashlib.sha1(str(root).encode()).hexdigest()[:12]}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, root / "mhatrain" / "__init__.py", submodule_search_locations=[str(root / "mhatrain")]
        )
        package = importlib.util.module_from_spec(spec)
        sys.modules[name] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"{name}.{module}")
