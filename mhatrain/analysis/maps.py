"""`mhatrain attention`: every head's attention map for one sentence and its translation, with
per-head statistics, as PNG grids, JSON, NPZ and (--html) an interactive page.

Three kinds of attention, each with its own layer stack:
    enc-self  encoder self-attention     queries and keys: source subwords + </s>
    dec-self  decoder self-attention     queries and keys: decoder inputs <s> + target (causal)
    cross     decoder → encoder          queries: decoder inputs; keys: source subwords + </s>
A kind's maps are [L, H, Tq, Tk]; heads are never averaged. Layers and heads are numbered from 1
in everything a person reads (tables, JSON records, plots); arrays are indexed from 0.
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from ..core.config import DecodeConfig
from ..core.errors import MhatrainError
from ..core.files import atomic_write, atomic_write_json
from ..data.tokenizer import Tokenizer
from ..data.tokens import BOS, EOS
from ..inference.search import cut_warning, source_ids, translate_ids
from ..inference.trained import check_input_length, load_run
from ..model.transformer import Attention, Transformer
from .figures import attention_grid, missing_glyphs
from .page import AttentionView, write_attention_html

KINDS = ("enc-self", "dec-self", "cross")
FIELDS = {"enc-self": "enc_self", "dec-self": "dec_self", "cross": "cross"}  # HeadGates / Attention fields
TITLES = {
    "enc-self": "encoder self-attention",
    "dec-self": "decoder self-attention",
    "cross": "cross-attention (decoder → encoder)",
}


def n_layers(model: Transformer, kind: str) -> int:
    """The layers of a kind's stack: the encoder's for enc-self, the decoder's for dec-self and cross."""
    return len(model.encoder) if kind == "enc-self" else len(model.decoder)


def select_layers(model: Transformer, kinds: list[str], layer: int | None) -> dict[str, list[int]]:
    """For each kind, the layer indices (from 0) to show: `layer` (a number from 1) of each, or all of them."""
    if layer is None:
        return {k: list(range(n_layers(model, k))) for k in kinds}
    for k in kinds:
        if not 1 <= layer <= n_layers(model, k):
            raise MhatrainError(f"--layer {layer}: {TITLES[k]} has layers 1..{n_layers(model, k)}")
    return {k: [layer - 1] for k in kinds}


@torch.no_grad()
def attention_maps(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor) -> Attention:
    """One teacher-forced pass that returns every layer's per-head probabilities.

    src: [B, S] (ids + EOS, PAD-padded); tgt_in: [B, T] (BOS + target). Attention fields hold one
    [B, H, Tq, Tk] tensor per layer; each row sums to 1 over the keys it may attend to.
    """
    attention = Attention()
    memory, src_mask = model.encode(src, attention=attention)
    model.decode(tgt_in, memory, src_mask, attention=attention)
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
    model: Transformer, tokenizer: Tokenizer, sentence: str, cfg: DecodeConfig, device, beam: int | None = None
) -> SentenceMaps:
    """Translate `sentence`, then collect the maps of (source, <s> + translation) in one pass.

    The decoder row at input position t is the query that predicts target token t + 1.
    """
    check_sentence(sentence)
    ids = tokenizer.encode([sentence])[0]
    if not ids:
        raise MhatrainError(f"sentence {sentence!r} has no tokens")
    src_ids = source_ids(ids, model.cfg.max_positions)  # what translate_ids encodes
    hyp = translate_ids(model, [ids], cfg, device, beam)[0]
    tgt_ids = [BOS] + hyp[: model.cfg.max_positions - 1]
    attention = attention_maps(model, torch.tensor([src_ids], device=device), torch.tensor([tgt_ids], device=device))
    maps = {kind: stacked_heads(getattr(attention, FIELDS[kind]))[:, 0].float().cpu() for kind in KINDS}
    return SentenceMaps(
        sentence,
        tokenizer.decode([hyp])[0],
        src_ids,
        tgt_ids,
        tokenizer.pieces(src_ids),
        tokenizer.pieces(tgt_ids),
        maps,
    )


def stacked_heads(layers: list[torch.Tensor]) -> torch.Tensor:
    """One [B, H_l, Tq, Tk] per layer → [L, B, H, Tq, Tk], H the most heads of a layer. A layer with fewer
    heads (of a pruned model: model.heads_per_layer) is padded with NaN maps, for heads it does not have."""
    H = max(t.size(1) for t in layers)
    return torch.stack([F.pad(t, (0, 0, 0, 0, 0, H - t.size(1)), value=math.nan) for t in layers])


def json_maps(maps: torch.Tensor) -> list:
    """Maps as nested lists rounded to 5 decimals; the NaN maps of heads a pruned layer lacks are null."""
    values = np.round(maps.numpy().astype(np.float64), 5).astype(object)
    values[np.isnan(maps.numpy())] = None
    return values.tolist()


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
    for name, token in (("eos", EOS), ("bos", BOS)):
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
                if sm.maps[kind][layer, head].isnan().all():  # a head the pruned layer does not have
                    continue
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
    layer: int | None = None,
    kinds: tuple[str, ...] = KINDS,
    out: Path | None = None,
    console: Console | None = None,
    overrides=(),
    html: str | None = None,
) -> dict:
    """The `mhatrain attention` command: maps, grid plots, statistics table and files.

    layer: one layer number (from 1) of each of `kinds`, or None for all layers.
    html: also write the interactive page (attention_html) to this file; "" = <out dir>/attention-<sentence>.html,
    named as the sentence's other files, so that the pages of several sentences stand side by side.
    """
    console = console or Console()
    check_sentence(sentence)
    kinds = list(kinds)
    out_dir = Path(out) if out is not None else Path(run_dir) / "heads"
    stem = out_dir / f"attention-{_slug(sentence)}"
    page_path = None if html is None else Path(html) if html else stem.with_name(f"{stem.name}.html")
    if page_path is not None and page_path.is_dir():
        raise MhatrainError(f"--html {page_path} is a directory; give a file name, e.g. {page_path / 'attention.html'}")
    run = load_run(run_dir, overrides=list(overrides))
    layers = select_layers(run.model, kinds, layer)
    if (cut := cut_warning(run.tokenizer.encode([sentence]), run.model.cfg.max_positions)) is not None:
        print(cut, file=sys.stderr, flush=True)  # stderr, as translate and eval warn
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
        "maps": {k: json_maps(sm.maps[k][layers[k]]) for k in kinds},
    }
    with missing_glyphs() as missing:
        written = write_attention_files(sm, layers, report, stem)
    if missing:  # stderr, as the cut warning
        print(glyph_note(missing, page_path), file=sys.stderr, flush=True)
    if page_path is not None:
        write_attention_page(sm, layers, page_path, f"{run_dir}, update {run.step}, beam {run.config.decode.beam}")
    _print_attention(sm, report["statistics"], console)
    console.print("files: " + "  ".join(map(str, written)), highlight=False, markup=False)
    if page_path is not None:
        console.print(f"html: {page_path}", highlight=False, markup=False)
    return report


def glyph_note(missing: set[str], page_path: Path | None) -> str:
    """One line for characters the PNGs cannot show, naming the view that can."""
    where = f": {page_path}" if page_path is not None else " (--html)"
    return (
        f"note: the PNGs' font has no glyph for {' '.join(sorted(missing))}, drawn as empty boxes; "
        f"the HTML head view renders any script{where}"
    )


def axis_names(kind: str) -> tuple[str, str]:
    """What a kind's queries and keys are, for axis labels and column headings."""
    query = "source token" if kind == "enc-self" else "decoder input (predicts the next token)"
    key = "decoder input" if kind == "dec-self" else "source token"
    return query, key


def write_attention_page(sm: SentenceMaps, layers: dict[str, list[int]], path: Path, caption: str) -> Path:
    """The self-contained HTML head view of the selected kinds and layers (attention_html)."""
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
