"""`mhatrain bench train --against CHECKOUT`: another checkout's mhatrain as a peer of ours.

The other tree's package is imported under its own name (`mhatrain_against_<hash of its path>`),
next to ours, in the same process: its training step is then timed alternately with ours on the same batches, exactly as
the other peers are (see timing.py). An A/B measured this way sees the same phases of the machine,
which two separate runs on a shared machine do not. mhatrain's modules import each other relatively,
so the other tree's modules find each other, not ours.

A peer is asked for a role (its model, its search, its update step), not a module path: the package
was flat before it was cut into layers (model.py, decode.py, step.py, train.py), and ROLES names
where each role lives in either layout, so a checkout from before the cut is still a peer.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from ..core.errors import MhatrainError

PACKAGE = "mhatrain_against"

# role -> its module in the layered package, then in the flat one (before mhatrain/__init__.py had LAYERS)
ROLES = {
    "model": ("model.transformer", "model"),  # build_model
    "search": ("inference.search", "decode"),  # beam_search
    "quantized": ("inference.quantized",),  # quantized_model (int8 decoding)
    "step": ("training.step", "step"),  # optimizer_update, batch_loss (a flat checkout from before step.py lacks it)
    "train": ("training.loop", "train"),  # the flat train.py of before step.py: its own update's parts
}


def peer_model(path: Path, cfg, vocab_size: int, pad_id: int):
    """The checkout's Transformer from its build_model, given pad_id where it takes one (a checkout from
    before the model was given the pad id imported it from its data layer)."""
    build = import_role(path, "model").build_model
    if "pad_id" in inspect.signature(build).parameters:
        return build(cfg, vocab_size, pad_id)
    return build(cfg, vocab_size)


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


def role_module(path: Path, role: str) -> str | None:
    """The checkout's module that plays `role` (a key of ROLES), or None if it has none."""
    package = check_checkout(path) / "mhatrain"
    return next((m for m in ROLES[role] if (package / (m.replace(".", "/") + ".py")).is_file()), None)


def import_role(path: Path, role: str) -> ModuleType:
    """The module of the checkout's mhatrain that plays `role`, imported as mhatrain_against_<hash>.<module>."""
    module = role_module(path, role)
    if module is None:
        raise MhatrainError(f"--against {path}: its mhatrain has none of {', '.join(ROLES[role])}")
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
