"""CTranslate2, the engine translation models are deployed with, as a peer of our search in
`mhatrain bench decode` (`pip install 'mhatrain[ctranslate2]'`).

Our trained weights are converted in the same run (inference.deployment, float32, into a temporary
directory), and CTranslate2 loads them with the compute type that matches the case: float32 against
ours in fp32, int8 against our int8 (torch's dynamic quantization) and against bf16. It translates
the same length-sorted batches as ours, one call per batch, with our beam, length penalty and
(per batch) length limit, on the bench's threads, in a process of its own (EngineProcess).

Checked before timing: its teacher-forced log-probabilities of our translations equal ours (fp32),
scored in a child process as well.
"""

from __future__ import annotations

import multiprocessing
import weakref
from pathlib import Path

import torch

from ..core.config import DecodeConfig
from ..core.errors import MhatrainError
from ..data.tokens import PAD
from ..inference.deployment import Engine, export_ctranslate2, teacher_forced_log_probs
from ..inference.search import source_ids
from ..model.transformer import Transformer
from .report import Check
from .timing import Step

CT2 = "CTranslate2"
# ours' precision → CTranslate2's compute type: float32 for fp32, else its fastest on a CPU, int8
COMPUTE_TYPES = {"fp32": "float32", "bf16": "int8", "fp16": "int8", "int8": "int8"}
LOG_PROB_TOLERANCE = 1e-4  # largest |Δ log p| of a token between the two in fp32 (measured: ~1e-6)


def convert(model: Transformer, tokenizer, directory: Path) -> Path:
    """Our model as a CTranslate2 model directory (float32 weights; int8 is chosen when it is loaded)."""
    return export_ctranslate2(model.float(), tokenizer, directory)


def id_lists(batch: torch.Tensor) -> list[list[int]]:
    """A [B, S] batch of ours (ids + EOS, right-padded) → the id lists CTranslate2 reads (it adds EOS itself)."""
    return [[t for t in row if t != PAD][:-1] for row in batch.tolist()]


def engine_step(
    engine_dir: Path, batches: list[torch.Tensor], beam: int, decode_cfg: DecodeConfig, precision: str, device
) -> Step:
    """One sample: CTranslate2 translates every batch; returns each batch's translations (id lists).

    It translates in a process of its own (EngineProcess), as a deployment runs it, and the sample's time
    includes handing the batches over and the translations back (about 1,000 short id lists: milliseconds)."""
    engine = EngineProcess(engine_dir, COMPUTE_TYPES[precision], torch.get_num_threads(), torch.device(device).type)
    sources = [id_lists(batch) for batch in batches]

    def step():
        return engine.translate(sources, decode_cfg, beam)

    return step


class EngineProcess:
    """A CTranslate2 Translator loaded in a child process, serving translations (and scores) until dropped.

    Not in the bench's own process: there a loaded Translator slowed our search, timed in alternation with
    it, by up to about a quarter while it sat idle (greedy fp32 over the test set 6.6–9.6 s against
    5.8–6.7 s without it; our threads' CPU time unchanged, their wall time not), while one idling in
    another process did not (5.7–6.0 s; docs/performance.md, "The vocabulary step in row blocks").
    """

    def __init__(self, directory: Path, compute_type: str, threads: int, device: str):
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        process = context.Process(
            target=_serve, args=(child, str(directory), compute_type, threads, device), daemon=True
        )
        process.start()
        child.close()
        weakref.finalize(self, _stop, self._conn, process)
        self._reply()  # loaded, or its one-line error

    def translate(self, sources: list[list[list[int]]], cfg: DecodeConfig, beam: int) -> list[list[list[int]]]:
        """Each batch's translations (Engine.translate_ids)."""
        self._conn.send(("translate_ids", (sources, cfg, beam)))
        return self._reply()

    def target_log_probs(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        """Engine.target_log_probs of one batch."""
        self._conn.send(("target_log_probs", (sources, targets)))
        return self._reply()

    def _reply(self):
        try:
            ok, value = self._conn.recv()
        except EOFError:
            raise MhatrainError(f"{CT2}: its process ended without an answer") from None
        if not ok:
            raise MhatrainError(f"{CT2}: {value}")
        return value


def _serve(conn, directory: str, compute_type: str, threads: int, device: str) -> None:
    """The child process of EngineProcess: load the engine, then translate each request until None."""
    try:
        engine = Engine.load(Path(directory), compute_type, threads, device)
    except Exception as error:  # the parent reports it as one line
        conn.send((False, str(error)))
        return
    conn.send((True, None))
    while (request := conn.recv()) is not None:
        method, args = request
        if method == "translate_ids":
            sources, cfg, beam = args
            conn.send((True, [engine.translate_ids(batch, cfg, beam) for batch in sources]))
        else:
            conn.send((True, engine.target_log_probs(*args)))


def _stop(conn, process) -> None:
    try:
        conn.send(None)
    except OSError:
        pass
    process.join(timeout=10)
    if process.is_alive():
        process.terminate()


def log_prob_check(model: Transformer, engine_dir: Path, batch: torch.Tensor, targets: list[list[int]]) -> Check:
    """Teacher-forced log P of `targets` (our translations of `batch`, EOS included): theirs = ours in fp32."""
    engine = EngineProcess(engine_dir, "float32", torch.get_num_threads(), "cpu")
    sources = id_lists(batch)
    theirs = engine.target_log_probs(sources, targets)
    src = [source_ids(s, model.cfg.max_positions) for s in sources]
    ours = teacher_forced_log_probs(model.float(), src, targets)
    worst = max(abs(a - b) for t, o in zip(theirs, ours) for a, b in zip(t, o))
    same_length = all(len(t) == len(o) for t, o in zip(theirs, ours))
    tokens = sum(len(o) for o in ours)
    return Check(
        f"{CT2} float32 scores our translations as ours does (teacher-forced log-probabilities, fp32, first batch)",
        same_length and worst <= LOG_PROB_TOLERANCE,
        f"largest |Δ log p| {worst:.1e} over {tokens} tokens (tolerance {LOG_PROB_TOLERANCE:.0e})",
    )
