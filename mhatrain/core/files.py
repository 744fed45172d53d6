"""Files: atomic writes, tolerant JSON reads, and text with its absolute paths made portable.

An atomic write goes to a temporary file in the same directory, fsync, then rename: a reader never
sees a half-written file, and the previous version stays in place until the new one is complete.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from .errors import MhatrainError


def atomic_write(path: Path, write: Callable[[object], None], binary: bool = False) -> None:
    """Call `write(file)` on a temporary file, then atomically move it to `path`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise MhatrainError(f"cannot write {path}: cannot create a file in {path.parent} ({exc.strerror})") from None
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes it private; open() would follow the umask
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        _remove_quietly(tmp)
        cause = _os_error(exc)
        if cause is None:
            raise
        raise MhatrainError(f"cannot write {path}: {cause.strerror or cause}") from None
    _fsync_dir(path.parent)


def current_umask() -> int:
    """The process's umask: from /proc where there is one, else by setting it and putting it back."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text))


def atomic_write_json(path: Path, data) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def append_jsonl(path: Path, record: dict) -> None:
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise MhatrainError(f"cannot write {path}: {exc.strerror or exc}") from None


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError behind `exc`, if any: torch.save reports a failed write (a full disk) as a
    RuntimeError raised while handling the OSError."""
    for _ in range(4):
        if exc is None or isinstance(exc, OSError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def read_json(path: Path) -> dict | None:
    """The JSON object in a file; None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of a JSON-lines file; a line cut short by a kill is skipped."""
    if not Path(path).is_file():
        return []
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


ABSOLUTE_PATH = re.compile(r"(?<![\w.~/-])(/[^\s\"',:|+]+)")


def portable_text(text: str, base: Path) -> str:
    """Every absolute path in `text` rewritten relative to `base` (or to ~ under the home directory)."""
    base, home = base.resolve(), Path.home().resolve()

    def relative(match: re.Match) -> str:
        path = Path(match.group(1))
        if path.is_relative_to(home) and not base.is_relative_to(home):
            return "~/" + path.relative_to(home).as_posix()
        return os.path.relpath(path, base)

    return ABSOLUTE_PATH.sub(relative, text)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
