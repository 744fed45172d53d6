"""What produced a result: the code, the software and machine, the command, and the data.

One session record says all of it for one command on one machine:
    started      UTC time
    command      the command line
    code         mhatrain's version, git commit and whether the tree was dirty (code_version)
    environment  Python, torch, CUDA, cuDNN, platform, host, CPU model, CPU threads, the device and its name
    data         per role (train, valid, test, a file pair's name): the source and the sha256 of each local
                 file read, or a hub dataset's fingerprint
    tokenizer    the SentencePiece model's path and sha256

A run directory keeps a list of sessions in provenance.json (a resumed run, maybe on another machine,
appends one), a study directory keeps one per `mhatrain ablate`, and every evaluation report carries
the session that made it. `compare` finds what differs between the points of a study.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from .files import atomic_write_json, read_json

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # mhatrain/, all of it: a change anywhere makes the code dirty
PROVENANCE_FILE = "provenance.json"


# ----------------------------------------------------------------------------- the code


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


# ----------------------------------------------------------------------------- the machine


def cpu_model() -> str:
    """The CPU's marketing name (Linux: /proc/cpuinfo), else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def environment(device=None) -> dict:
    """Software versions and the machine; `device` (a torch.device or string) is the one computing."""
    import torch  # only when a session is recorded: data.sources and inference.scoring import this module without torch

    cuda = torch.cuda.is_available()
    device = str(device) if device is not None else ("cuda" if cuda else "cpu")
    # the accelerator's model; "cpu" for the CPU, whose model is recorded apart
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") and cuda else device
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "platform": platform.platform(),
        "host": platform.node(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "device": device,
        "device_name": name,
    }


def command_line() -> str:
    """The command as typed: `mhatrain ARGS` (or `python -m mhatrain ARGS`, as the entry point records it)."""
    program = Path(sys.argv[0]).name if sys.argv else "mhatrain"
    program = "mhatrain" if program in ("__main__.py", "mhatrain") else program
    return shlex.join([program, *sys.argv[1:]])


# ----------------------------------------------------------------------------- the data


_hashes: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) → sha256: a study hashes each file once


def sha256_file(path: Path) -> str:
    path = Path(path).resolve()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _hashes:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _hashes[key] = digest.hexdigest()
    return _hashes[key]


def corpus_record(corpus) -> dict:
    """Where a data.Corpus came from: the sha256 of each local file, or the hub dataset's fingerprint."""
    record = {"source": corpus.name, "pairs": len(corpus)}
    if corpus.files:
        record["sha256"] = {str(Path(f).resolve()): sha256_file(f) for f in corpus.files}
    else:
        record["hub_fingerprint"] = corpus.hub_fingerprint
    return record


def files_record(*paths: Path) -> dict:
    """The sha256 of text files read as they are (a hypothesis or reference file, a sacreBLEU test set)."""
    return {
        "source": "+".join(str(p) for p in paths),
        "sha256": {str(Path(p).resolve()): sha256_file(p) for p in paths},
    }


# ----------------------------------------------------------------------------- sessions


def session(device=None, data: dict | None = None, tokenizer: Path | None = None, **extra) -> dict:
    """The provenance of one command: see the module docstring. `data` maps a role to a corpus_record."""
    record = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        "code": code_version(),
        "environment": environment(device),
        **extra,
    }
    if data is not None:
        record["data"] = data
    if tokenizer is not None and Path(tokenizer).is_file():
        record["tokenizer"] = {"path": str(tokenizer), "sha256": sha256_file(tokenizer)}
    return record


def record_session(directory: Path, entry: dict) -> None:
    """Append a session to DIRECTORY/provenance.json (a run or a study keeps every session it took)."""
    atomic_write_json(Path(directory) / PROVENANCE_FILE, {"sessions": [*read_sessions(directory), entry]})


def read_sessions(directory: Path) -> list[dict]:
    sessions = (read_json(Path(directory) / PROVENANCE_FILE) or {}).get("sessions")
    return [s for s in sessions if isinstance(s, dict)] if isinstance(sessions, list) else []


# ----------------------------------------------------------------------------- comparing


def _digest(hashes: dict) -> str:
    return hashlib.sha256("".join(sorted(hashes.values())).encode()).hexdigest()[:12]


def facts(entry: dict) -> dict[str, str]:
    """What should be the same across the points of a study, by label, from one session."""
    code, env = entry.get("code") or {}, entry.get("environment") or {}
    found = {}
    if code:
        found["code"] = (
            f"{(code.get('commit') or '')[:12] or 'mhatrain ' + str(code.get('version'))}"
            f"{' (dirty)' if code.get('dirty') else ''}"
        )
    for label, key in (
        ("Python", "python"),
        ("torch", "torch"),
        ("CUDA", "cuda"),
        ("cuDNN", "cudnn"),
        ("CPU", "cpu"),
        ("device", "device_name"),
    ):
        if key in env:
            found[label] = str(env[key])
    for role, record in (entry.get("data") or {}).items():
        if record.get("sha256"):
            found[f"data {role}"] = "sha256 " + _digest(record["sha256"])
        elif record.get("hub_fingerprint"):
            found[f"data {role}"] = "hub fingerprint " + str(record["hub_fingerprint"])
    if entry.get("tokenizer"):
        found["tokenizer"] = "sha256 " + entry["tokenizer"]["sha256"][:12]
    return found


def compare(sessions: dict[str, list[dict]]) -> dict:
    """sessions: point name → its sessions (training and evaluation). Returns
    {"values": {label: {value: [points]}}, "differs": [labels with several values], "unrecorded": [points]}."""
    values: dict[str, dict[str, list[str]]] = {}
    for name, entries in sessions.items():
        for entry in entries:
            for label, value in facts(entry).items():
                points = values.setdefault(label, {}).setdefault(value, [])
                if name not in points:
                    points.append(name)
    return {
        "values": values,
        "differs": [label for label, seen in values.items() if len(seen) > 1],
        "unrecorded": [name for name, entries in sessions.items() if not entries],
    }


def summary_line(compared: dict) -> str:
    """One line: the facts every recorded point shares (labels that differ say so)."""
    if not compared["values"]:
        return "provenance: not recorded (runs made before mhatrain recorded it)"
    parts = []
    for label, seen in compared["values"].items():
        parts.append(f"{label} {next(iter(seen))}" if len(seen) == 1 else f"{label} differs")
    return "provenance: " + "; ".join(parts)


def difference_notes(compared: dict) -> list[str]:
    """A note per fact that differs between points, naming the points of each value."""
    notes = []
    for label in compared["differs"]:
        shown = "; ".join(f"{value} ({', '.join(points)})" for value, points in compared["values"][label].items())
        notes.append(f"points of this study differ in {label}: {shown}")
    if compared["unrecorded"] and compared["values"]:
        notes.append(f"no provenance recorded for {', '.join(compared['unrecorded'])}")
    return notes
