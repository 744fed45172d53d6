"""Looking inside the heads: attention maps, per-head statistics, head importance and pruning.

Three kinds of attention, each with its own layer stack:
    enc-self  encoder self-attention     queries and keys: source subwords + </s>
    dec-self  decoder self-attention     queries and keys: decoder inputs <s> + target (causal)
    cross     decoder → encoder          queries: decoder inputs; keys: source subwords + </s>
A kind's maps are [L, H, Tq, Tk]; heads are never averaged. Layers and heads are numbered from 1
in everything a person reads (tables, JSON records, plots); arrays are indexed from 0.

Head importance, three ways (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?"):
  masking   the change in loss (and BLEU) when one head alone is masked, all others open;
  gradient  I_h = Σ_sentences |∂L_s/∂ξ_h| / target tokens, with L_s a sentence's summed NLL and ξ_h
            the head's gate held at 1 (the absolute value per sentence, as Michel et al. take it). Reported raw and normalised to unit L2 norm within each layer,
            as Michel et al. do before ranking heads across layers;
  pruning   the metric as heads are removed in order of normalised gradient importance (least
            important first), for each kind alone and for all kinds together.
A gate multiplies its head's output before W_O (attention.py), so a gate of 0 removes the head exactly.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
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

from . import data as D
from .config import DecodeConfig
from .decode import translate_ids
from .errors import MhatrainError
from .evaluate import bleu_score
from .io import atomic_write, atomic_write_json
from .model import Attention, HeadGates, Transformer
from .precision import autocast
from .runner import check_input_length

KINDS = ("enc-self", "dec-self", "cross")
FIELDS = {"enc-self": "enc_self", "dec-self": "dec_self", "cross": "cross"}  # HeadGates / Attention fields
TITLES = {
    "enc-self": "encoder self-attention",
    "dec-self": "decoder self-attention",
    "cross": "cross-attention (decoder → encoder)",
}
PRUNE_FRACTIONS = tuple(i / 10 for i in range(11))  # share of a group's heads removed at each point
BLEU_TOLERANCE = 1.0  # a head is prunable if removing it (with the ones before it) costs less BLEU than this


class Head(NamedTuple):
    """One head: its attention kind, layer index and head index (both from 0)."""

    kind: str
    layer: int
    head: int

    def __str__(self) -> str:
        return f"{self.kind} L{self.layer + 1} H{self.head + 1}"


def n_layers(model: Transformer, kind: str) -> int:
    return len(model.encoder) if kind == "enc-self" else len(model.decoder)


def all_heads(model: Transformer, kinds=KINDS) -> list[Head]:
    return [Head(k, layer, h) for k in kinds for layer in range(n_layers(model, k)) for h in range(model.cfg.n_heads)]


def parse_kinds(kind: str) -> list[str]:
    """--kind: one of KINDS or 'all'."""
    if kind == "all":
        return list(KINDS)
    if kind not in KINDS:
        raise MhatrainError(f"--kind must be one of {', '.join(KINDS)} or all, got {kind!r}")
    return [kind]


def parse_layers(layer: str, model: Transformer, kinds: list[str]) -> dict[str, list[int]]:
    """--layer: a layer number (from 1) or 'all' → for each kind, the layer indices (from 0)."""
    if layer == "all":
        return {k: list(range(n_layers(model, k))) for k in kinds}
    try:
        number = int(layer)
    except ValueError:
        raise MhatrainError(f"--layer must be a layer number (from 1) or all, got {layer!r}") from None
    for k in kinds:
        if not 1 <= number <= n_layers(model, k):
            raise MhatrainError(f"--layer {number}: {TITLES[k]} has layers 1..{n_layers(model, k)}")
    return {k: [number - 1] for k in kinds}


# ----------------------------------------------------------------------------- attention maps


@torch.no_grad()
def attention_maps(
    model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor, gates: HeadGates | None = None
) -> Attention:
    """One teacher-forced pass that returns every layer's per-head probabilities.

    src: [B, S] (ids + EOS, PAD-padded); tgt_in: [B, T] (BOS + target). Attention fields hold one
    [B, H, Tq, Tk] tensor per layer; each row sums to 1 over the keys it may attend to.
    """
    attention = Attention()
    memory, src_mask = model.encode(src, attention=attention, gates=gates)
    model.decode(tgt_in, memory, src_mask, attention=attention, gates=gates)
    return attention


@dataclass
class SentenceMaps:
    """All attention maps of one sentence and its translation."""

    source: str
    translation: str
    src_ids: list[int]  # keys of enc-self and cross: source subwords + </s>
    tgt_ids: list[int]  # queries of dec-self and cross: <s> + translation subwords
    src_pieces: list[str]
    tgt_pieces: list[str]
    maps: dict[str, torch.Tensor]  # kind → [L, H, Tq, Tk], float32 on the CPU

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """(query labels, key labels) of a kind's maps."""
        if kind == "enc-self":
            return self.src_pieces, self.src_pieces
        if kind == "dec-self":
            return self.tgt_pieces, self.tgt_pieces
        return self.tgt_pieces, self.src_pieces

    def key_ids(self, kind: str) -> list[int]:
        return self.tgt_ids if kind == "dec-self" else self.src_ids


def check_sentence(sentence: str) -> None:
    if not sentence.strip():
        raise MhatrainError("empty sentence: nothing to translate")
    check_input_length(sentence, "sentence")


def sentence_maps(
    model: Transformer, tokenizer: D.Tokenizer, sentence: str, cfg: DecodeConfig, device, beam: int | None = None
) -> SentenceMaps:
    """Translate `sentence`, then collect the maps of (source, <s> + translation) in one pass.

    The decoder row at input position t is the query that predicts target token t + 1.
    """
    check_sentence(sentence)
    ids = tokenizer.encode([sentence])[0]
    if not ids:
        raise MhatrainError(f"sentence {sentence!r} has no tokens")
    limit = model.cfg.max_positions - 1
    src_ids = ids[: limit - 1] + [D.EOS]  # as translate_ids truncates
    hyp = translate_ids(model, [ids], cfg, device, beam)[0]
    tgt_ids = [D.BOS] + hyp[:limit]
    attention = attention_maps(model, torch.tensor([src_ids], device=device), torch.tensor([tgt_ids], device=device))
    maps = {kind: torch.stack(getattr(attention, FIELDS[kind]))[:, 0].float().cpu() for kind in KINDS}
    return SentenceMaps(
        sentence,
        tokenizer.decode([hyp])[0],
        src_ids,
        tgt_ids,
        tokenizer.pieces(src_ids),
        tokenizer.pieces(tgt_ids),
        maps,
    )


STATISTICS = ("entropy", "distance", "same", "previous", "next", "eos", "bos")


def head_statistics(probs: torch.Tensor, key_ids: list[int]) -> dict[str, torch.Tensor | None]:
    """Per-head averages over the query rows of one unpadded example; probs: [L, H, Tq, Tk].

    entropy   -Σ_j p_ij log p_ij, in nats (0 = all weight on one key; log Tk = uniform)
    distance  Σ_j p_ij |i - j|, in positions (for cross-attention: distance from the diagonal)
    same, previous, next   p_i,i · p_i,i-1 · p_i,i+1 (0 where that key does not exist)
    eos, bos  weight on keys that are </s> (source side) or <s> (decoder side); None without such keys
    Returns {name: [L, H]}.
    """
    p = probs.float()
    Tq, Tk = p.shape[-2:]
    offset = torch.arange(Tk)[None, :] - torch.arange(Tq)[:, None]  # [Tq, Tk]: key j − query i
    rows = {
        "entropy": -torch.special.xlogy(p, p).sum(-1),
        "distance": (p * offset.abs()).sum(-1),
        "same": (p * (offset == 0)).sum(-1),
        "previous": (p * (offset == -1)).sum(-1),
        "next": (p * (offset == 1)).sum(-1),
    }
    stats: dict[str, torch.Tensor | None] = {name: value.mean(-1) for name, value in rows.items()}
    for name, token in (("eos", D.EOS), ("bos", D.BOS)):
        is_token = torch.tensor([i == token for i in key_ids])
        stats[name] = (p * is_token).sum(-1).mean(-1) if is_token.any() else None
    return stats


def statistics_records(sm: SentenceMaps, layers: dict[str, list[int]]) -> list[dict]:
    """One record per selected head: kind, layer and head (from 1) and the head_statistics values."""
    records = []
    for kind, indices in layers.items():
        stats = head_statistics(sm.maps[kind][indices], sm.key_ids(kind))
        for row, layer in enumerate(indices):
            for head in range(sm.maps[kind].size(1)):
                record = {"kind": kind, "layer": layer + 1, "head": head + 1}
                for name in STATISTICS:
                    value = stats[name]
                    record[name] = None if value is None else round(float(value[row, head]), 4)
                records.append(record)
    return records


def _slug(sentence: str) -> str:
    words = re.sub(r"[^A-Za-z0-9]+", "-", sentence).strip("-").lower()[:40].strip("-")
    digest = hashlib.sha1(sentence.encode("utf-8")).hexdigest()[:6]
    return f"{words}-{digest}" if words else digest


def show_attention(
    run_dir: Path,
    sentence: str,
    layer: str = "all",
    kind: str = "all",
    out: Path | None = None,
    console: Console | None = None,
    overrides=(),
    html: str | None = None,
) -> dict:
    """The `mhatrain attention` command: maps, grid plots, statistics table and files.

    html: also write the interactive page (attention_html) to this file; "" = <out dir>/attention.html.
    """
    from .runner import load_run

    console = console or Console()
    check_sentence(sentence)
    kinds = parse_kinds(kind)
    out_dir = Path(out) if out is not None else Path(run_dir) / "heads"
    page_path = None if html is None else Path(html) if html else out_dir / "attention.html"
    if page_path is not None and page_path.is_dir():
        raise MhatrainError(f"--html {page_path} is a directory; give a file name, e.g. {page_path / 'attention.html'}")
    run = load_run(run_dir, overrides=list(overrides))
    _set_threads(run.config.train.threads)
    layers = parse_layers(layer, run.model, kinds)
    sm = sentence_maps(run.model, run.tokenizer, sentence, run.config.decode, run.device)
    report = {
        "run_dir": str(run_dir),
        "update": run.step,
        "source": sm.source,
        "translation": sm.translation,
        "beam": run.config.decode.beam,
        "src_pieces": sm.src_pieces,
        "tgt_pieces": sm.tgt_pieces,
        "note": "maps[kind][l][h][i][j]: weight of query i on key j in layer layers[kind][l], head h+1; "
        "enc-self: source×source, dec-self: decoder input×decoder input, cross: decoder input×source",
        "layers": {k: [i + 1 for i in layers[k]] for k in kinds},
        "statistics": statistics_records(sm, layers),
        "maps": {k: np.round(sm.maps[k][layers[k]].numpy().astype(np.float64), 5).tolist() for k in kinds},
    }
    written = write_attention_files(sm, layers, report, out_dir / f"attention-{_slug(sentence)}")
    if page_path is not None:
        write_attention_page(sm, layers, page_path, f"{run_dir}, update {run.step}, beam {run.config.decode.beam}")
    _print_attention(sm, report["statistics"], console)
    console.print("files: " + "  ".join(map(str, written)), highlight=False, markup=False)
    if page_path is not None:
        console.print(f"html: {page_path}", highlight=False, markup=False)
    return report


def axis_names(kind: str) -> tuple[str, str]:
    """What a kind's queries and keys are, for axis labels and column headings."""
    query = "source token" if kind == "enc-self" else "decoder input (predicts the next token)"
    key = "decoder input" if kind == "dec-self" else "source token"
    return query, key


def write_attention_page(sm: SentenceMaps, layers: dict[str, list[int]], path: Path, caption: str) -> Path:
    """The self-contained HTML head view of the selected kinds and layers (attention_html)."""
    from .attention_html import AttentionView, write_attention_html

    views = [
        AttentionView(
            kind,
            TITLES[kind],
            *axis_names(kind),
            *sm.labels(kind),
            [i + 1 for i in indices],
            sm.maps[kind][indices].numpy(),
        )
        for kind, indices in layers.items()
    ]
    return write_attention_html(path, sm.source, sm.translation, views, caption)


def write_attention_files(sm: SentenceMaps, layers: dict[str, list[int]], report: dict, stem: Path) -> list[Path]:
    """STEM-<kind>.png grids, STEM.json (report) and STEM.npz (float32 maps + tokens)."""
    from .plots import attention_grid

    written = []
    for kind, indices in layers.items():
        q_labels, k_labels = sm.labels(kind)
        q_name, k_name = axis_names(kind)
        path = stem.with_name(f"{stem.name}-{kind}.png")
        attention_grid(
            sm.maps[kind][indices].numpy(),
            [i + 1 for i in indices],
            q_labels,
            k_labels,
            f"{TITLES[kind]} — {sm.source!r} → {sm.translation!r}",
            path,
            q_name,
            k_name,
        )
        written.append(path)
    json_path, npz_path = stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".npz")
    atomic_write_json(json_path, report)
    arrays = {FIELDS[k]: sm.maps[k][indices].numpy() for k, indices in layers.items()}
    arrays.update({f"{FIELDS[k]}_layers": np.array([i + 1 for i in indices]) for k, indices in layers.items()})
    arrays.update(src_pieces=np.array(sm.src_pieces), tgt_pieces=np.array(sm.tgt_pieces))
    atomic_write(npz_path, lambda f: np.savez_compressed(f, **arrays), binary=True)
    return written + [json_path, npz_path]


def _print_attention(sm: SentenceMaps, records: list[dict], console: Console) -> None:
    console.print(
        f"source:         {sm.source}\ntranslation:    {sm.translation}\n"
        f"source pieces:  {' '.join(sm.src_pieces)}\ndecoder inputs: {' '.join(sm.tgt_pieces)}",
        highlight=False,
        markup=False,
    )
    table = Table(
        title="per-head attention statistics (means over query positions)",
        caption="entropy in nats; dist: mean distance |i - j| in positions; the rest: shares of "
        "attention weight on the same, previous and next position and on </s> and <s>",
        show_edge=False,
    )
    for name in ("kind", "layer", "head", "entropy", "dist", "same", "prev", "next", "</s>", "<s>"):
        table.add_column(name, justify="left" if name == "kind" else "right", no_wrap=True)
    for r in records:
        table.add_row(
            r["kind"],
            str(r["layer"]),
            str(r["head"]),
            f"{r['entropy']:.2f}",
            f"{r['distance']:.2f}",
            *(_share(r[name]) for name in ("same", "previous", "next", "eos", "bos")),
        )
    console.print(table)


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _set_threads(threads: int) -> None:
    if threads:
        torch.set_num_threads(threads)


# ----------------------------------------------------------------------------- importance


@dataclass
class EvalSet:
    """The sentences heads are judged on: sources to translate, raw references, loss batches."""

    name: str
    sources: list[list[int]]  # token ids, no EOS (translate_ids adds it)
    references: list[str]
    batches: list[D.Batch]  # teacher-forcing batches of the non-empty pairs, on the device
    n_tokens: int  # target tokens (+ EOS) in the batches


def load_eval_set(run, split: str, max_sentences: int) -> EvalSet:
    """The first `max_sentences` pairs (0 = all) of a split; loss pairs are truncated like validation's."""
    from .runner import split_name

    corpus = D.load_split(run.config.data, split_name(run.config, split))
    if max_sentences:
        corpus = corpus.head(max_sentences)
    encoded = D.encode_corpus(run.tokenizer, corpus, None)
    pairs = D.loss_pairs(encoded, run.config.data.max_length)
    if not len(pairs):
        raise MhatrainError(f"{corpus.name}: no non-empty sentence pairs to judge heads on")
    batches = [
        D.collate(pairs, indices).to(run.device)
        for indices in D.batch_indices(D.pair_lengths(pairs), run.config.train.max_tokens)
    ]
    return EvalSet(corpus.name, encoded.src.tolist(), corpus.tgt, batches, sum(b.n_tgt_tokens for b in batches))


def open_gates(model: Transformer, device, requires_grad: bool = False) -> HeadGates:
    """Gates of 1 for every head: [n_layers, H] per kind (the model's outputs are unchanged)."""
    H = model.cfg.n_heads
    return HeadGates(
        **{FIELDS[k]: torch.ones(n_layers(model, k), H, device=device, requires_grad=requires_grad) for k in KINDS}
    )


def gates_without(model: Transformer, heads, device) -> HeadGates:
    """Open gates except for `heads` (Head tuples), which are set to 0."""
    gates = open_gates(model, device)
    for kind, layer, head in heads:
        getattr(gates, FIELDS[kind])[layer, head] = 0.0
    return gates


def summed_nll(model: Transformer, batch: D.Batch, gates: HeadGates | None) -> torch.Tensor:
    """Summed NLL of the batch's target tokens under head gates (train.batch_loss, without smoothing)."""
    memory, src_mask = model.encode(batch.src, gates=gates)
    logits = model.decode(batch.tgt_in, memory, src_mask, gates=gates).float()  # [B, T, V]
    return F.cross_entropy(
        logits.view(-1, logits.size(-1)), batch.tgt_out.reshape(-1), ignore_index=D.PAD, reduction="sum"
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
    tokenizer: D.Tokenizer
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
        ids = translate_ids(
            self.model, self.evalset.sources, self.decode, self.device, self.beam, precision=self.precision, gates=gates
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
    heads = [
        Head(k, layer, h) for k in kinds for layer in range(normalised[k].size(0)) for h in range(normalised[k].size(1))
    ]
    return sorted(heads, key=lambda head: float(normalised[head.kind][head.layer, head.head]))


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
    """(last count before the first one scoring below `floor`, that first count or None)."""
    counts = sorted(scores)
    for before, count in zip(counts, counts[1:]):
        if scores[count]["bleu"] < floor:
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
            f"baseline: {shown} ({each:.1f}s; all {total} evaluations: about {total * each / 60:.0f} min)",
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
    "gradient": "sum over batches of |dL/dgate| / target tokens, L = summed NLL of the batch (Michel et al. 2019)",
    "gradient_normalised": "gradient divided by the L2 norm of its layer's gradients (Michel et al. 2019)",
    "prune_rank": "position in the all-kinds pruning order (1 = removed first, least important)",
    "pruning": "scores with the k least important heads (by gradient_normalised) of each group removed",
    "prunable": f"most heads of the group removed before BLEU first falls {BLEU_TOLERANCE} or more below the baseline",
}


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
    """The `mhatrain heads` command: measure, then save JSON and plots and print the tables."""
    from .runner import load_run

    console = console or Console()
    if metric not in ("bleu", "loss"):
        raise MhatrainError(f"--metric must be bleu or loss, got {metric!r}")
    if checkpoint not in ("best", "last"):
        raise MhatrainError(f"--checkpoint must be best or last, got {checkpoint!r}")
    if beam < 1 or max_sentences < 0:
        raise MhatrainError("--beam must be at least 1 and --max-sentences at least 0")
    run = load_run(run_dir, checkpoint, list(overrides))
    _set_threads(run.config.train.threads)
    evalset = load_eval_set(run, split, max_sentences)
    model = run.model
    judge = Judge(
        model,
        run.tokenizer,
        evalset,
        run.config.decode,
        run.device,
        run.config.train.precision,
        beam,
        with_bleu=metric == "bleu",
    )
    decoding = f", {'greedy' if beam == 1 else f'beam {beam}'} decoding" if metric == "bleu" else ""
    console.print(
        f"judging {len(all_heads(model))} heads ({model.cfg.n_heads} per layer) on {len(evalset.sources)} "
        f"sentences of '{split}' ({evalset.name}); metric {metric}{decoding}",
        highlight=False,
        markup=False,
    )
    started = time.perf_counter()
    analysis = measure_heads(judge, console)
    seconds = time.perf_counter() - started

    g, gn = analysis.gradient, analysis.normalised
    rank = {head: i + 1 for i, head in enumerate(analysis.orders["all"])}
    records = [
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
    report = {
        "run_dir": str(run_dir),
        "checkpoint": checkpoint,
        "update": run.step,
        "split": split,
        "source": evalset.name,
        "sentences": len(evalset.sources),
        "target_tokens": evalset.n_tokens,
        "metric": metric,
        "beam": beam if metric == "bleu" else None,
        "n_heads": model.cfg.n_heads,
        "layers": {k: n_layers(model, k) for k in KINDS},
        "seconds": round(seconds, 1),
        "baseline": analysis.baseline,
        "bleu_signature": judge.signature,
        "notes": NOTES,
        "heads": records,
        "pruning": {
            grp: {
                "heads": len(analysis.orders[grp]),
                "points": analysis.curves[grp],
                **({"prunable": prunable(analysis.curves[grp], analysis.baseline["bleu"])} if metric == "bleu" else {}),
            }
            for grp in GROUPS
        },
    }
    out_dir = Path(out) if out is not None else Path(run_dir) / "heads"
    paths = [out_dir / f"heads-{split}{suffix}" for suffix in (".json", "-importance.png", "-pruning.png")]
    atomic_write_json(paths[0], report)
    _plot_heads(report, g, gn, paths[1], paths[2])
    _print_heads(report, console)
    console.print(f"{seconds:.0f}s.  files: " + "  ".join(map(str, paths)), highlight=False, markup=False)
    return report


def _matrix(records: list[dict], kind: str, key: str, shape: tuple[int, int]) -> np.ndarray:
    out = np.full(shape, np.nan)
    for r in records:
        if r["kind"] == kind and r.get(key) is not None:
            out[r["layer"] - 1, r["head"] - 1] = r[key]
    return out


def _plot_heads(report: dict, raw, normalised, importance_path: Path, pruning_path: Path) -> None:
    from .plots import head_heatmaps, pruning_plot

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
    head_heatmaps(rows, importance_path, title, diverging=tuple(r[0].startswith("Δ") for r in rows))
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
