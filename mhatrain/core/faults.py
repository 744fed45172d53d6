"""Fault injection for the crash tests: kill the process with SIGKILL at a named point.

`MHATRAIN_FAULT=name` kills at the first time `fault_point(name)` is reached, `name:N` at the N-th.
Without the variable a call is one comparison, so the points stay in the code for good. Points:
    update             after backward, before the optimiser step      (step.optimizer_update)
    validation         after the validation loss, before BLEU decoding (train.run_validation)
    checkpoint-write   a checkpoint's temporary file holds its first 64 KiB, the rest is unwritten
    checkpoint-rename  the temporary file is complete; neither rename has happened
    checkpoint-swap    last.pt was moved to last.prev.pt; the new last.pt is not in place yet
"""

from __future__ import annotations

import os
import signal

from .errors import MhatrainError

ENV = "MHATRAIN_FAULT"


def _parse(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    name, _, nth = spec.partition(":")
    if not nth:
        return name, 1
    if not nth.isdigit() or int(nth) < 1:
        raise MhatrainError(f"{ENV}={spec}: expected NAME or NAME:N with N ≥ 1")
    return name, int(nth)


_target = _parse(os.environ.get(ENV))
_reached: dict[str, int] = {}


def fault_point(name: str) -> None:
    """SIGKILL this process if MHATRAIN_FAULT asks for this point (and this occurrence of it)."""
    if _target is None or _target[0] != name:
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] == _target[1]:
        os.kill(os.getpid(), signal.SIGKILL)


def interruptible(file, name: str, after_bytes: int = 1 << 16):
    """`file` itself, or, when MHATRAIN_FAULT names `name`, a wrapper that reaches
    `fault_point(name)` once `after_bytes` have been written through it."""
    if _target is None or _target[0] != name:
        return file
    return _Interruptible(file, name, after_bytes)


class _Interruptible:
    def __init__(self, file, name: str, after_bytes: int):
        self.file, self.name, self.left = file, name, after_bytes

    def write(self, data) -> int:
        written = self.file.write(data)
        if self.left > 0:
            self.left -= len(data)
            if self.left <= 0:
                self.file.flush()  # the bytes so far reach the file, as they would in a real crash
                fault_point(self.name)
        return written

    def flush(self) -> None:
        self.file.flush()
