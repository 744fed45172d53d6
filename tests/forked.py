"""A server that forks each CLI run of the tests from a process that has already imported torch.

Importing torch costs ~3 s of CPU per process, more than most test runs of the CLI themselves; the suite
makes a few hundred of them. Each run is still a process of its own with its own argv, working
directory, environment, stdio and exit status, and it imports mhatrain (and what mhatrain imports
besides torch, numpy and matplotlib) after its environment is set, so a variable read at import time
(SACREBLEU, HF_HOME) takes effect as in `python -m mhatrain`. test_bad_input's
test_forked_cli_matches_python_dash_m compares the two.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

SERVER = r"""
import atexit, io, json, os, sys, traceback
import matplotlib, numpy, torch  # paid once here; nothing of these reads a test's environment at import
matplotlib.use("Agg")
import matplotlib.figure
encoding = sys.stdout.encoding
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)  # a timeout kills the run and whatever it started
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            for fd, name, flags in ((0, req["stdin"], os.O_RDONLY), (1, req["stdout"], os.O_WRONLY),
                                    (2, req["stderr"], os.O_WRONLY)):
                opened = os.open(name, flags)
                os.dup2(opened, fd)
                os.close(opened)
            sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, closefd=False)), encoding=encoding)
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=encoding)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=encoding,
                                          errors="backslashreplace", line_buffering=True)
            import mhatrain.cli
            # as `python -m mhatrain` sees itself (click derives the program name from these)
            sys.modules["__main__"].__package__ = "mhatrain"
            sys.argv = [os.path.join(os.path.dirname(mhatrain.cli.__file__), "__main__.py"), *req["args"]]
            mhatrain.cli.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                atexit._run_exitfuncs()  # as an interpreter at exit: logging's flush, temporary files
            except BaseException:
                traceback.print_exc()
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class ForkedCLI:
    """`python -m mhatrain ARGS` with the imports paid once: each call is a fresh process forked from the server."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.calls = 0
        self.log = open(scratch / "server.log", "w")
        self.server = subprocess.Popen(
            [sys.executable, "-c", SERVER],
            bufsize=0,  # unbuffered: select() sees every reply line that readline() has not taken
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )

    def __call__(
        self, *args: str, cwd: Path, stdin: str | bytes | None, env: dict, timeout: float
    ) -> subprocess.CompletedProcess:
        """Run main() with `args` in `cwd` with exactly the environment `env`."""
        self.calls += 1
        files = {name: self.scratch / f"{self.calls}.{name}" for name in ("stdin", "stdout", "stderr")}
        files["stdin"].write_bytes(stdin.encode() if isinstance(stdin, str) else stdin or b"")
        files["stdout"].write_bytes(b"")
        files["stderr"].write_bytes(b"")
        request = {"args": list(args), "cwd": str(cwd), "env": env, **{k: str(v) for k, v in files.items()}}
        self.server.stdin.write(json.dumps(request).encode() + b"\n")
        pid = self._reply(None)["pid"]
        try:
            code = self._reply(timeout)["code"]
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            self._reply(None)
            raise subprocess.TimeoutExpired(["mhatrain", *args], timeout) from None
        finally:
            files["stdin"].unlink()
        outputs = [files[name].read_text(errors="replace") for name in ("stdout", "stderr")]
        for name in ("stdout", "stderr"):
            files[name].unlink()
        return subprocess.CompletedProcess(["mhatrain", *args], code, *outputs)

    def _reply(self, timeout: float | None) -> dict:
        ready, _, _ = select.select([self.server.stdout], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired("mhatrain", timeout)
        line = self.server.stdout.readline()
        assert line, f"the CLI server died: {(self.scratch / 'server.log').read_text()}"
        return json.loads(line)

    def close(self) -> None:
        self.server.stdin.close()
        self.server.wait(timeout=60)
        self.log.close()
