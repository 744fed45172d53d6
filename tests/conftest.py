"""Shared fixtures. Tests run on one CPU thread so the suite behaves the same on any machine."""

from __future__ import annotations

import errno
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from mhatrain.data.tokenizer import Tokenizer, train_or_load_tokenizer

from .forked import ForkedCLI

torch.set_num_threads(1)
# pytest-xdist's workers export COLUMNS=80 and LINES=24, and a developer's shell may export its own: output
# off a terminal keeps to $COLUMNS (mhatrain.core.columns), so a test sets it where it means to, never inherits it
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "tests" / "data" / "toy"
TINY = ROOT / "configs" / "tiny.yaml"


def run_cli(
    *args: str,
    cwd: Path = ROOT,
    stdin: str | bytes | None = None,
    timeout: float = 300,
    env: dict | None = None,
    fresh: bool = False,
) -> subprocess.CompletedProcess:
    """Run `mhatrain ARGS` in a process of its own, as a user would: forked from a server that has imported
    torch once (tests/forked.py), or with `fresh`, a new `python -m mhatrain`. Python reads its PYTHON*
    variables only when it starts, so a call that sets one always gets a new interpreter."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    fresh = fresh or any(key.startswith("PYTHON") for key in env or {})
    if not fresh and hasattr(os, "fork"):
        return _forked_cli()(*args, cwd=cwd, stdin=stdin, env=full_env, timeout=timeout)
    result = subprocess.run(
        [sys.executable, "-m", "mhatrain", *args],
        cwd=cwd,
        input=stdin.encode() if isinstance(stdin, str) else stdin,
        capture_output=True,
        timeout=timeout,
        env=full_env,
    )
    return subprocess.CompletedProcess(result.args, result.returncode, _text(result.stdout), _text(result.stderr))


def set_args(*items: str) -> list[str]:
    """`--set ITEM` for each item, as a command line repeats the option."""
    return [arg for item in items for arg in ("--set", item)]


def train_argv(
    out: Path, *sets: str, spm_cache: Path | None = None, config: Path | str = TINY, flags: tuple[str, ...] = ()
) -> list[str]:
    """The `train` command line of a test: CONFIG (configs/tiny.yaml) --out OUT, then FLAGS (--resume, ...),
    the tests' shared tokenizer cache where `spm_cache` is given, and a --set for each of `sets`."""
    cache = (f"data.cache_dir={spm_cache}",) if spm_cache is not None else ()
    return ["train", str(config), "--out", str(out), *flags, *set_args(*cache, *sets)]


def _text(output: bytes) -> str:
    """Output bytes as the forked runner reads its files: the locale's encoding, universal newlines."""
    return io.TextIOWrapper(io.BytesIO(output), errors="replace").read()


_server: ForkedCLI | None = None  # one per test process, started on first use


def _forked_cli() -> ForkedCLI:
    global _server
    if _server is None:
        _server = ForkedCLI(Path(tempfile.mkdtemp(prefix="mhatrain-cli-")))
    return _server


def pytest_sessionfinish(session, exitstatus):
    if _server is not None:
        _server.close()
        shutil.rmtree(_server.scratch, ignore_errors=True)


def assert_clean_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """Bad input's contract: exit 2, one line on stderr starting "error: " and holding each fragment, no traceback."""
    assert result.returncode == 2, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"


@pytest.fixture(scope="session")
def spm_cache(tmp_path_factory) -> Path:
    """A tokenizer cache shared by the tests' runs (keeps ~/.cache untouched)."""
    return tmp_path_factory.mktemp("spm-cache")


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, spm_cache) -> Path:
    """A run directory trained with configs/tiny.yaml (shared, treat as read-only)."""
    out = tmp_path_factory.mktemp("tiny") / "run"
    result = run_cli(*train_argv(out, spm_cache=spm_cache))
    assert result.returncode == 0, result.stderr + result.stdout
    return out


@pytest.fixture(scope="session")
def gated_run(tmp_path_factory, spm_cache) -> Path:
    """The tiny config trained a few updates with gates on every kind, then some gates closed in best.pt
    (a few updates cannot close them): what a run whose gates have settled looks like (shared, read-only)."""
    from mhatrain.core.checkpoint import load_checkpoint, save_checkpoint

    run = tmp_path_factory.mktemp("gated") / "run"
    sets = ("train.max_steps=6", "train.valid_bleu=false", "model.head_gates.l0=0.01")
    trained = run_cli(*train_argv(run, *sets, spm_cache=spm_cache))
    assert trained.returncode == 0, trained.stderr + trained.stdout
    state = load_checkpoint(run / "best.pt")
    weights = state["model"]
    for key, closed in (("encoder.0", [1]), ("decoder.1", [0, 2]), ("decoder.0", [0, 1, 2, 3])):
        name = f"{key}.{'cross_attn' if key == 'decoder.0' else 'self_attn'}.gate.log_alpha"
        weights[name][closed] = -10.0
    weights["decoder.1.cross_attn.gate.log_alpha"][1] = 0.2  # open, with a gate between 0 and 1
    save_checkpoint(run / "best.pt", state)
    return run


@pytest.fixture(scope="session")
def pruned_run(gated_run, tmp_path_factory) -> Path:
    """gated_run with its closed heads cut out (mhatrain prune's run directory; shared, read-only)."""
    from mhatrain.inference.pruned import write_pruned_run

    out = tmp_path_factory.mktemp("pruned") / "run"
    write_pruned_run(gated_run, out)
    return out


@pytest.fixture
def toy_copy(tmp_path) -> Path:
    """A writable copy of the toy corpus."""
    target = tmp_path / "toy"
    shutil.copytree(TOY, target)
    return target


class FullDisk:
    """A writable file wrapper that fails with ENOSPC once `room` bytes have been written."""

    def __init__(self, f, room: int):
        self.f, self.left = f, room

    def write(self, data):
        self.left -= len(data)
        if self.left < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.f.write(data)

    def flush(self):
        self.f.flush()


def library_translations(run_dir: Path, sentences: list[str], which: str = "best") -> list[str]:
    """What the library translates for `sentences` with a run's `which` checkpoint: the CLI must agree.
    (Translations of the toy model are not written into tests: its training differs across CPUs.)"""
    from mhatrain.inference.search import translate
    from mhatrain.inference.trained import load_run

    run = load_run(run_dir, which, strict=True)
    return translate(
        run.model, run.tokenizer, sentences, run.config.decode, run.device, precision=run.config.train.precision
    )


@pytest.fixture(scope="module")
def toy_tokenizer(tmp_path_factory):
    """A SentencePiece model of the toy corpus (vocabulary 64) in a cache of its own, and its data config."""
    from mhatrain.core.config import DataConfig

    cfg = DataConfig(local_dir=str(TOY), vocab_size=64, cache_dir=str(tmp_path_factory.mktemp("cache")))
    return Tokenizer(train_or_load_tokenizer(cfg, log=lambda *_: None)), cfg


def small_model(vocab: int, norm: str = "post", tie: bool = True, seed: int = 0, **overrides):
    """A random model for exact checks: d_model 32, 4 heads (unless overridden), 2+2 layers, no dropout."""
    from mhatrain.core.config import ModelConfig
    from mhatrain.data.tokens import PAD
    from mhatrain.model.transformer import build_model

    torch.manual_seed(seed)
    settings = dict(d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2, max_positions=64)
    cfg = ModelConfig(**{**settings, **overrides}, dropout=0.0, norm=norm, tie_embeddings=tie)
    return build_model(cfg, vocab, PAD).eval()
