"""`mhatrain heads`: head importance and pruning (`--roles`: roles.py; one sentence's maps:
maps.py, which also names the three kinds of attention: enc-self, dec-self, cross).
Layers and heads are numbered from 1 in everything a person reads; arrays are indexed from 0.

Head importance, three ways (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?"):
  masking   the change in loss (and BLEU) when one head alone is masked, all others open;
  gradient  I_h = Σ_sentences |∂L_s/∂ξ_h| / target tokens, with L_s a sentence's summed NLL and ξ_h
            the head's gate held at 1 (the absolute value per sentence, as Michel et al. take it). Reported raw and normalised to unit L2 norm within each layer,
            as Michel et al. do before ranking heads across layers;
  pruning   the metric as heads are removed in order of normalised gradient importance (least
            important first), for each kind alone and for all kinds together.
A gate multiplies its head's output before W_O (model/attention.py), so a gate of 0 removes the head exactly.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..core.config import DecodeConfig
from ..core.errors import MhatrainError
from ..core.files import atomic_write_json
from ..core.runtime import autocast
from ..data.batches import Batch, batch_indices, collate, pair_lengths
from ..data.encode import encode_corpus, loss_pairs
from ..data.sources import load_split, split_name
from ..data.tokenizer import Tokenizer
from ..data.tokens import PAD
from ..inference.scoring import bleu_score
from ..inference.search import translate_ids
from ..inference.trained import load_run
from ..model.transformer import HeadGates, Transformer, gated_heads
from .figures import head_heatmaps, pruning_plot
from .maps import FIELDS, KINDS, n_layers

PRUNE_FRACTIONS = tuple(i / 10 for i in range(11))  # share of a group's heads removed at each point
BLEU_TOLERANCE = 1.0  # a head is prunable if removing it (with the ones before it) costs less BLEU than this


class Head(NamedTuple):
    """One head: its attention kind, layer index and head index (both from 0)."""

    kind: str
    layer: int
    head: int

    def __str__(self) -> str:
        return f"{self.kind} L{self.layer + 1} H{self.head + 1}"


def all_heads(model: Transformer, kinds=KINDS) -> list[Head]:
    return [Head(k, layer, h) for k in kinds for layer in range(n_layers(model, k)) for h in range(model.cfg.n_heads)]


# ----------------------------------------------------------------------------- importance


@dataclass
class EvalSet:
    """The sentences heads are judged on: sources to translate, raw references, loss batches."""

    name: str
    sources: list[list[int]]  # token ids, no EOS (translate_ids adds it)
    references: list[str]
    batches: list[Batch]  # teacher-forcing batches of the non-empty pairs, on the device
    n_tokens: int  # target tokens (+ EOS) in the batches


def load_eval_set(run, split: str, max_sentences: int) -> EvalSet:
    """The first `max_sentences` pairs (0 = all) of a split; loss pairs are truncated like validation's.
    Head measures ([n_layers, H] per kind) need the same heads in every layer: a pruned run is refused."""
    if run.config.model.heads_per_layer is not None:
        raise MhatrainError(
            "heads: the model has its own head count per layer (model.heads_per_layer, a pruned run); "
            "judge the heads of the run it was pruned from"
        )
    corpus = load_split(run.config.data, split_name(run.config, split))
    if max_sentences:
        corpus = corpus.head(max_sentences)
    encoded = encode_corpus(run.tokenizer, corpus, None)
    pairs = loss_pairs(encoded, run.config.data.max_length)
    if not len(pairs):
        raise MhatrainError(f"{corpus.name}: no non-empty sentence pairs to judge heads on")
    batches = [
        collate(pairs, indices).to(run.device)
        for indices in batch_indices(pair_lengths(pairs), run.config.train.max_tokens)
    ]
    return EvalSet(corpus.name, encoded.src.tolist(), corpus.tgt, batches, sum(b.n_tgt_tokens for b in batches))


def open_gates(model: Transformer, device, requires_grad: bool = False) -> HeadGates:
    """Gates of 1 for every head: [n_layers, H] per kind (the model's outputs are unchanged)."""
    H = model.cfg.n_heads
    return HeadGates(
        **{FIELDS[k]: torch.ones(n_layers(model, k), H, device=device, requires_grad=requires_grad) for k in KINDS}
    )


def gates_without(model: Transformer, removed: list[Head], device) -> HeadGates:
    """Open gates except for the `removed` heads, whose gates are 0."""
    gates = open_gates(model, device)
    for kind, layer, head in removed:
        getattr(gates, FIELDS[kind])[layer, head] = 0.0
    return gates


def summed_nll(model: Transformer, batch: Batch, gates: HeadGates | None) -> torch.Tensor:
    """Summed NLL of the batch's target tokens under head gates (train.batch_loss, without smoothing)."""
    with gated_heads(model, gates):
        logits = model(batch.src, batch.tgt_in).float()  # [B, T, V]
    return F.cross_entropy(
        logits.view(-1, logits.size(-1)), batch.tgt_out.reshape(-1), ignore_index=PAD, reduction="sum"
    )


@contextlib.contextmanager
def frozen(model: Transformer):
    """Parameters stop requiring gradients (only the gates' are wanted), then are restored."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


@dataclass
class Judge:
    """Scores a model on an EvalSet under given head gates."""

    model: Transformer
    tokenizer: Tokenizer
    evalset: EvalSet
    decode: DecodeConfig
    device: torch.device
    precision: str  # train.precision: autocast as the run was trained
    beam: int
    with_bleu: bool  # False: loss only (no decoding)
    signature: str | None = None  # sacreBLEU's, once a BLEU has been computed

    def _autocast(self):
        return autocast(self.device, self.precision)

    @torch.no_grad()
    def loss(self, gates: HeadGates | None) -> float:
        """Mean NLL per target token (teacher forcing)."""
        total = 0.0
        with self._autocast():
            for batch in self.evalset.batches:
                total += float(summed_nll(self.model, batch, gates))
        return total / self.evalset.n_tokens

    def bleu(self, gates: HeadGates | None) -> float:
        """Corpus BLEU of the decoded sources (sacreBLEU, cased, detokenised)."""
        with gated_heads(self.model, gates):
            ids = translate_ids(
                self.model, self.evalset.sources, self.decode, self.device, self.beam, precision=self.precision
            )
        bleu, self.signature = bleu_score(self.tokenizer.decode(ids), self.evalset.references)
        return round(bleu, 2)

    def score(self, gates: HeadGates | None) -> dict:
        result = {"loss": round(self.loss(gates), 5)}
        if self.with_bleu:
            result["bleu"] = self.bleu(gates)
        return result

    def gradient_importance(self) -> dict[str, torch.Tensor]:
        """Σ_sentences |∂L_s/∂gate| / target tokens per kind, [n_layers, H] (L_s = a sentence's summed NLL).

        As Michel et al. take it: the absolute value per sentence, so that sentences pulling a gate in
        opposite directions do not cancel. Each sentence of a batch gets its own gate ([n_layers, B, H],
        all 1); a sentence's loss depends only on its own gates, so one backward pass of the batch's
        summed loss gives every sentence's gradient.
        """
        shape = open_gates(self.model, self.device)
        totals = [torch.zeros_like(getattr(shape, FIELDS[k])) for k in KINDS]
        self.model.eval()
        with frozen(self.model), self._autocast():
            for batch in self.evalset.batches:
                B = batch.src.size(0)
                tensors = [torch.ones(t.size(0), B, t.size(1), device=self.device, requires_grad=True) for t in totals]
                gates = HeadGates(**{FIELDS[k]: t for k, t in zip(KINDS, tensors)})
                grads = torch.autograd.grad(summed_nll(self.model, batch, gates), tensors)
                for total, grad in zip(totals, grads):
                    total += grad.abs().sum(1)
        return {k: (t / self.evalset.n_tokens).float().cpu() for k, t in zip(KINDS, totals)}


def normalise_per_layer(importance: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Divide each layer's head importances by their L2 norm (Michel et al. 2019)."""
    return {k: v / v.norm(dim=-1, keepdim=True).clamp_min(1e-20) for k, v in importance.items()}


def pruning_order(normalised: dict[str, torch.Tensor], kinds) -> list[Head]:
    """Heads of `kinds`, least important first (stable: ties keep kind, layer, head order)."""
    candidates = [
        Head(k, layer, h) for k in kinds for layer in range(normalised[k].size(0)) for h in range(normalised[k].size(1))
    ]
    return sorted(candidates, key=lambda head: float(normalised[head.kind][head.layer, head.head]))


def prune_counts(n: int) -> list[int]:
    return sorted({round(f * n) for f in PRUNE_FRACTIONS})


def pruning_curve(judge: Judge, order: list[Head], baseline: dict, tick=lambda: None) -> list[dict]:
    """Scores with the first k heads of `order` removed, k at each PRUNE_FRACTIONS share of them;
    with BLEU, refined by bisection around the last point within BLEU_TOLERANCE (see `prunable`)."""
    scores = {0: baseline}
    for count in prune_counts(len(order))[1:]:
        scores[count] = judge.score(gates_without(judge.model, order[:count], judge.device))
        tick()
    if "bleu" in baseline:
        lo, hi = _tolerance_bracket(scores, baseline["bleu"] - BLEU_TOLERANCE)
        while hi is not None and hi - lo > 1:
            mid = (lo + hi) // 2
            scores[mid] = judge.score(gates_without(judge.model, order[:mid], judge.device))
            tick()
            lo, hi = (mid, hi) if scores[mid]["bleu"] >= baseline["bleu"] - BLEU_TOLERANCE else (lo, mid)
    points, previous = [], 0
    for count in sorted(scores):
        points.append(
            {
                "pruned": count,
                "fraction": round(count / len(order), 4),
                **scores[count],
                "removed": [str(h) for h in order[previous:count]],
            }
        )
        previous = count
    return points


def _tolerance_bracket(scores: dict[int, dict], floor: float) -> tuple[int, int | None]:
    """(last count before the first one scoring at or below `floor`, that first count or None): a drop of
    exactly BLEU_TOLERANCE already stops pruning, as prunable() and the figure caption say."""
    counts = sorted(scores)
    for before, count in zip(counts, counts[1:]):
        if scores[count]["bleu"] <= floor:
            return before, count
    return counts[-1], None


def prunable(points: list[dict], baseline_bleu: float) -> int:
    """Most heads removed, in importance order, before BLEU first falls BLEU_TOLERANCE or more below
    the baseline. Exact where `pruning_curve` bisected: its neighbour one head further is measured."""
    return _tolerance_bracket({p["pruned"]: p for p in points}, baseline_bleu - BLEU_TOLERANCE)[0]


def mask_each_head(judge: Judge, baseline: dict, tick=lambda: None) -> dict[Head, dict]:
    """Scores and their changes from the baseline with each head alone masked."""
    results = {}
    for head in all_heads(judge.model):
        scores = judge.score(gates_without(judge.model, [head], judge.device))
        results[head] = {f"masked_{m}": v for m, v in scores.items()}
        results[head].update({f"delta_{m}": round(v - baseline[m], 5) for m, v in scores.items()})
        tick()
    return results


GROUPS = {**{k: (k,) for k in KINDS}, "all": KINDS}  # pruning curves: each kind alone, then all together


@dataclass
class HeadAnalysis:
    """Everything `mhatrain heads` measures; Head keys and [n_layers, H] tensors per kind."""

    baseline: dict  # {"loss", "bleu"?} with every head open
    gradient: dict[str, torch.Tensor]  # raw gradient importance
    normalised: dict[str, torch.Tensor]  # per-layer L2-normalised
    masked: dict[Head, dict]  # masked_* and delta_* scores per head
    orders: dict[str, list[Head]]  # pruning order per group, least important first
    curves: dict[str, list[dict]]  # pruning curve points per group


def n_evaluations(model: Transformer, with_bleu: bool) -> int:
    """Scorings `measure_heads` makes at most: baseline, one per masked head, one per pruning point,
    and with BLEU the bisection steps between two neighbouring pruning points."""
    total = 1 + len(all_heads(model))
    for kinds in GROUPS.values():
        counts = prune_counts(len(all_heads(model, kinds)))
        gap = max(b - a for a, b in zip(counts, counts[1:]))
        total += len(counts) - 1 + (math.ceil(math.log2(gap)) if with_bleu and gap > 1 else 0)
    return total


def measure_heads(judge: Judge, console: Console) -> HeadAnalysis:
    """Baseline, gradient importance, single-head masking and pruning curves, with a progress bar."""
    total = n_evaluations(judge.model, judge.with_bleu)
    progress = Progress(
        TextColumn("[bold]heads"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    with progress:
        task = progress.add_task("heads", total=total)
        tick = lambda: progress.advance(task)  # noqa: E731
        started = time.perf_counter()
        baseline = judge.score(None)
        tick()
        each = time.perf_counter() - started
        shown = f"loss {baseline['loss']:.4f}" + (f", BLEU {baseline['bleu']:.2f}" if "bleu" in baseline else "")
        console.print(
            f"baseline: {shown} ({each:.1f}s; all {total} evaluations: {about(total * each)})",
            highlight=False,
        )
        gradient = judge.gradient_importance()
        normalised = normalise_per_layer(gradient)
        masked = mask_each_head(judge, baseline, tick)
        orders = {g: pruning_order(normalised, kinds) for g, kinds in GROUPS.items()}
        curves = {g: pruning_curve(judge, order, baseline, tick) for g, order in orders.items()}
    return HeadAnalysis(baseline, gradient, normalised, masked, orders, curves)


NOTES = {
    "loss": "mean NLL per target token (teacher forcing, no label smoothing)",
    "masked_*/delta_*": "score with this head alone masked (gate 0), and its change from the baseline",
    "gradient": "sum over sentences of |dL_s/dgate| / target tokens, L_s = a sentence's summed NLL (Michel et al. 2019)",
    "gradient_normalised": "gradient divided by the L2 norm of its layer's gradients (Michel et al. 2019)",
    "prune_rank": "position in the all-kinds pruning order (1 = removed first, least important)",
    "pruning": "scores with the k least important heads (by gradient_normalised) of each group removed",
    "prunable": f"most heads of the group removed before BLEU first falls {BLEU_TOLERANCE} or more below the baseline",
}


def checkpoint_suffix(checkpoint: str) -> str:
    """What names the files of a checkpoint other than best (`.last`, `.averaged`), as eval names its own:
    the study report reads the best checkpoint's files, and those of another must not take their place."""
    return "" if checkpoint == "best" else f".{checkpoint}"


def about(seconds: float) -> str:
    """An estimate of a duration as a person reads it: seconds under a minute and a half, else minutes."""
    if seconds < 90:
        return f"about {max(1, round(seconds))} s"
    return f"about {round(seconds / 60)} min"


def analyse_heads(
    run_dir: Path,
    split: str = "valid",
    metric: str = "bleu",
    max_sentences: int = 500,
    beam: int = 1,
    out: Path | None = None,
    checkpoint: str = "best",
    overrides=(),
    console: Console | None = None,
) -> dict:
    """The `mhatrain heads` command: measure, then save JSON and plots and print the tables.

    metric: "bleu" (decode with `beam`; also reports loss) or "loss"; checkpoint: best, last or averaged;
    max_sentences: the first N pairs of the split (0 = all)."""
    console = console or Console()
    run = load_run(run_dir, checkpoint, list(overrides))
    evalset = load_eval_set(run, split, max_sentences)
    judge = Judge(
        run.model,
        run.tokenizer,
        evalset,
        run.config.decode,
        run.device,
        run.config.train.precision,
        beam,
        with_bleu=metric == "bleu",
    )
    _announce(judge, split, metric, console)
    started = time.perf_counter()
    analysis = measure_heads(judge, console)
    seconds = time.perf_counter() - started
    report = heads_report(analysis, judge, run_dir, checkpoint, run.step, split, metric, seconds)

    out_dir = Path(out) if out is not None else Path(run_dir) / "heads"
    stem = f"heads-{split}{checkpoint_suffix(checkpoint)}"
    paths = [out_dir / f"{stem}{suffix}" for suffix in (".json", "-importance.png", "-pruning.png")]
    atomic_write_json(paths[0], report)
    _plot_heads(report, analysis.gradient, analysis.normalised, paths[1], paths[2])
    _print_heads(report, console)
    console.print(
        f"judged {len(report['heads'])} heads in {seconds:.0f} s; files: " + "  ".join(map(str, paths)),
        highlight=False,
        markup=False,
    )
    return report


def _announce(judge: Judge, split: str, metric: str, console: Console) -> None:
    """One line before the measuring starts: how many heads, on what, judged how."""
    model, evalset = judge.model, judge.evalset
    decoding = f", {'greedy' if judge.beam == 1 else f'beam {judge.beam}'} decoding" if metric == "bleu" else ""
    console.print(
        f"judging {len(all_heads(model))} heads ({model.cfg.n_heads} per layer) on {len(evalset.sources)} "
        f"sentences of '{split}' ({evalset.name}); metric {metric}{decoding}",
        highlight=False,
        markup=False,
    )


def heads_report(
    analysis: HeadAnalysis,
    judge: Judge,
    run_dir: Path,
    checkpoint: str,
    update: int,
    split: str,
    metric: str,
    seconds: float,
) -> dict:
    """What `mhatrain heads` saves as heads-SPLIT.json: what was judged and how, the baseline, one
    record per head (see NOTES) and the pruning curves of each group."""
    model, evalset = judge.model, judge.evalset
    return {
        "run_dir": str(run_dir),
        "checkpoint": checkpoint,
        "update": update,
        "split": split,
        "source": evalset.name,
        "sentences": len(evalset.sources),
        "target_tokens": evalset.n_tokens,
        "metric": metric,
        "beam": judge.beam if metric == "bleu" else None,
        "n_heads": model.cfg.n_heads,
        "layers": {k: n_layers(model, k) for k in KINDS},
        "seconds": round(seconds, 1),
        "baseline": analysis.baseline,
        "bleu_signature": judge.signature,
        "notes": NOTES,
        "heads": _head_records(analysis, model),
        "pruning": {
            grp: {
                "heads": len(analysis.orders[grp]),
                "points": analysis.curves[grp],
                **({"prunable": prunable(analysis.curves[grp], analysis.baseline["bleu"])} if metric == "bleu" else {}),
            }
            for grp in GROUPS
        },
    }


def _head_records(analysis: HeadAnalysis, model: Transformer) -> list[dict]:
    """One record per head (layers and heads numbered from 1): masking scores, gradient importance,
    and its place in the all-kinds pruning order."""
    g, gn = analysis.gradient, analysis.normalised
    rank = {head: i + 1 for i, head in enumerate(analysis.orders["all"])}
    return [
        {
            "kind": h.kind,
            "layer": h.layer + 1,
            "head": h.head + 1,
            **analysis.masked[h],
            "gradient": float(g[h.kind][h.layer, h.head]),
            "gradient_normalised": round(float(gn[h.kind][h.layer, h.head]), 5),
            "prune_rank": rank[h],
        }
        for h in all_heads(model)
    ]


def _matrix(records: list[dict], kind: str, key: str, shape: tuple[int, int]) -> np.ndarray:
    out = np.full(shape, np.nan)
    for r in records:
        if r["kind"] == kind and r.get(key) is not None:
            out[r["layer"] - 1, r["head"] - 1] = r[key]
    return out


def _plot_heads(report: dict, raw, normalised, importance_path: Path, pruning_path: Path) -> None:
    H, records = report["n_heads"], report["heads"]
    shape = {k: (report["layers"][k], H) for k in KINDS}
    rows = [("Δloss, head masked", {k: _matrix(records, k, "delta_loss", shape[k]) for k in KINDS})]
    if report["metric"] == "bleu":
        rows.append(("ΔBLEU, head masked", {k: _matrix(records, k, "delta_bleu", shape[k]) for k in KINDS}))
    rows.append(("|∂L/∂gate|", {k: raw[k].numpy() for k in KINDS}))
    rows.append(("|∂L/∂gate| ÷ layer norm", {k: normalised[k].numpy() for k in KINDS}))
    title = (
        f"head importance — {report['run_dir']} ({report['split']}, {report['sentences']} sentences, "
        f"update {report['update']})"
    )
    head_heatmaps(
        rows,
        importance_path,
        title,
        diverging=tuple(r[0].startswith("Δ") for r in rows),
        lower_is_important=tuple(r[0].startswith("ΔBLEU") for r in rows),  # masking an important head lowers BLEU
    )
    metric = report["metric"]
    curves = {g: [(p["fraction"], p[metric]) for p in c["points"]] for g, c in report["pruning"].items()}
    sizes = {g: c["heads"] for g, c in report["pruning"].items()}
    pruning_plot(
        curves,
        sizes,
        metric,
        report["baseline"][metric],
        pruning_path,
        f"pruning heads by gradient importance — {report['split']}, {report['sentences']} sentences",
    )


def _print_heads(report: dict, console: Console) -> None:
    bleu = report["metric"] == "bleu"
    base = report["baseline"]
    table = Table(
        title=f"head importance (baseline loss {base['loss']:.3f}"
        + (f", BLEU {base['bleu']:.2f}" if bleu else "")
        + ")",
        show_edge=False,
    )
    columns = ["kind", "layer", "head", "Δloss"] + (["ΔBLEU"] if bleu else []) + ["|∂L/∂g|", "normalised", "rank"]
    for name in columns:
        table.add_column(name, justify="left" if name == "kind" else "right", no_wrap=True)
    for r in report["heads"]:
        table.add_row(
            r["kind"],
            str(r["layer"]),
            str(r["head"]),
            f"{r['delta_loss']:+.4f}",
            *([f"{r['delta_bleu']:+.2f}"] if bleu else []),
            f"{r['gradient']:.2e}",
            f"{r['gradient_normalised']:.3f}",
            str(r["prune_rank"]),
        )
    table.caption = (
        "Δ: change when the head alone is masked; |∂L/∂g|: gradient importance (Michel et al. 2019), "
        "raw and normalised per layer; rank: order of removal in the all-kinds pruning curve"
    )
    console.print(table)
    metric = report["metric"]
    curve = Table(title=f"pruning curve: {'BLEU' if bleu else 'loss'} with the least important heads removed")
    curve.add_column("removed", justify="right")
    for group, c in report["pruning"].items():
        curve.add_column(f"{group} ({c['heads']})", justify="right")
    for fraction in PRUNE_FRACTIONS:
        cells = []
        for c in report["pruning"].values():
            point = next((p for p in c["points"] if p["pruned"] == round(fraction * c["heads"])), None)
            cells.append("–" if point is None else f"{point[metric]:.2f}" if bleu else f"{point[metric]:.3f}")
        curve.add_row(f"{fraction:.0%}", *cells)
    if bleu:
        curve.caption = f"heads removable losing less than {BLEU_TOLERANCE:g} BLEU: " + ", ".join(
            f"{g} {c['prunable']}/{c['heads']}" for g, c in report["pruning"].items()
        )
    console.print(curve)
