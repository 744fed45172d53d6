"""Importance pruning at given open-head counts: a trained run with its (total − n) least important heads
masked, scored on a split as `eval` scores a run, so that learned gates (`mhatrain prune`) can be set
beside it at the same number of open heads.

The order and the masks are `mhatrain heads`' own (importance.py): heads ranked by gradient importance
normalised per layer, all kinds together, measured as `heads` measures it by default (the first
ORDER_SENTENCES pairs of the validation split); a head is removed by a gate of 0 before W_O. The scores
are eval's: BLEU and chrF of the decoded split (its beam and length penalty), and the references'
teacher-forced cross-entropy per target token (inference/likelihood.py), in the run's precision.

The results file (JSON, written after every count) makes the measuring resumable: a count it holds is
not measured again, and a file made from another run, checkpoint, split or decoding is measured anew.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..core.files import atomic_write_json, read_json
from ..data.sources import Corpus
from ..inference.likelihood import reference_cross_entropy
from ..inference.scoring import score
from ..inference.trained import LoadedRun, eval_text, load_run, translate_with
from ..model.transformer import HeadGates, Transformer, gated_heads
from .importance import Head, Judge, gates_without, load_eval_set, normalise_per_layer, pruning_order
from .maps import KINDS

ORDER_SPLIT, ORDER_SENTENCES = "valid", 500  # `mhatrain heads`' defaults (--split, --max-sentences)


def importance_order(run: LoadedRun, split: str = ORDER_SPLIT, max_sentences: int = ORDER_SENTENCES) -> list[Head]:
    """Every head of the run, least important first: `heads`' all-kinds pruning order (its prune_rank)."""
    evalset = load_eval_set(run, split, max_sentences)
    config = run.config
    judge = Judge(run.model, run.tokenizer, evalset, config.decode, run.device, config.train.precision, 1, False)
    return pruning_order(normalise_per_layer(judge.gradient_importance()), KINDS)


def gates_with_open(model: Transformer, order: list[Head], n_open: int) -> HeadGates:
    """Gates that keep `n_open` heads: the first len(order) − n_open heads of `order` are masked (gate 0)."""
    if not 0 <= n_open <= len(order):
        raise ValueError(f"{n_open} open heads: the model has {len(order)}")
    return gates_without(model, order[: len(order) - n_open], next(model.parameters()).device)


def score_masked(run: LoadedRun, text: Corpus, gates: HeadGates | None, beam: int, alpha: float) -> dict:
    """BLEU, chrF and reference cross-entropy (nats per target token) of `text` under `gates`, as eval
    scores a run."""
    config = run.config
    with gated_heads(run.model, gates):
        hypotheses = translate_with(run, text.src, beam, alpha)
        nll = reference_cross_entropy(
            run.model,
            run.tokenizer,
            text,
            config.data.max_length,
            config.train.max_tokens,
            run.device,
            config.train.precision,
        )
    scores = score(hypotheses, text.tgt)
    return {"bleu": scores["bleu"], "chrf": scores["chrf"], "cross_entropy": round(nll.per_token, 6)}


def importance_at_counts(
    run_dir: Path,
    counts: list[int],
    path: Path,
    beam: int,
    alpha: float,
    console: Console,
    split: str = "test",
    checkpoint: str = "best",
) -> dict:
    """The run's scores with n heads open, for each n of `counts` and for all its heads (the unpruned
    model), in `path`: {run, checkpoint, split, beam, alpha, order_split, order_sentences, heads_total,
    order: [[kind, layer, head], …] least important first, points: {"n": {open, removed, bleu, chrf, cross_entropy}}}.
    Only the counts the file lacks are measured; the file is written after each."""
    settings = {
        "run": str(Path(run_dir).resolve()),
        "checkpoint": checkpoint,
        "split": split,
        "beam": beam,
        "alpha": alpha,
        "order_split": ORDER_SPLIT,
        "order_sentences": ORDER_SENTENCES,
    }
    record = read_json(path)
    if record is None or any(record.get(k) != v for k, v in settings.items()):
        record = {**settings, "heads_total": None, "order": None, "points": {}}
    total = record["heads_total"]
    if total is not None and all(str(n) in record["points"] for n in {*counts, total}):
        return record  # nothing to measure: the model is not even loaded
    run = load_run(run_dir, checkpoint, strict=True)
    text = eval_text(run.config, split)
    order = [Head(kind, int(layer), int(head)) for kind, layer, head in record["order"] or []]
    if not order:
        console.print(f"importance pruning: ranking the heads of {run_dir} by gradient importance", highlight=False)
        order = importance_order(run)
        record.update(heads_total=len(order), order=[list(head) for head in order])
    for n in sorted(set(counts) | {len(order)}, reverse=True):
        if str(n) in record["points"]:
            continue
        console.print(f"importance pruning: {n} of {len(order)} heads open, scoring '{split}'", highlight=False)
        gates = gates_with_open(run.model, order, n)
        scores = score_masked(run, Corpus(text.name, text.src, text.ref), gates, beam, alpha)
        record["points"][str(n)] = {"open": n, "removed": len(order) - n, **scores}
        atomic_write_json(path, record)
    return record
