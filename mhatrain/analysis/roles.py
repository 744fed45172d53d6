"""What each head does over a corpus: `mhatrain heads RUN_DIR --roles`.

Every head of every attention kind is measured over N sentence pairs of a split, teacher-forced on
the reference translations (one pass per batch, no decoding), averaging over every query row of
every sentence (padding rows excluded):

    entropy      -Σ_j p_ij log p_ij in nats, and normalised by log(keys the row may attend to)
    confidence   max_j p_ij, the weight of the row's strongest key
    previous, same, next   weight on key i-1, i, i+1 (self-attention: the neighbouring tokens)
    sink         weight on the end-of-sentence token </s> of the source (enc-self, cross) or on the
                 start token <s> of the decoder input (dec-self): the tokens heads park weight on
    diagonal     (cross-attention) weight on source keys within one position of the proportional
                 diagonal j = i · (S - 1) / (T - 1), S source keys and T target rows

Each head then gets one class, tested in this order (thresholds in ROLE_THRESHOLDS):
    sink        sink weight ≥ 0.5
    positional  previous, same or next weight ≥ 0.5 (self-attention), or diagonal ≥ 0.5 (cross)
    diffuse     normalised entropy ≥ 0.75 (weight spread over most keys)
    other       none of these (content heads, syntactic heads, mixed behaviour)
These are coarse labels in the spirit of Voita et al. 2019 and Clark et al. 2019, not their exact
criteria: they say where a head's weight goes on average, not why.
"""

from __future__ import annotations

from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from ..core.files import atomic_write_json
from ..data.batches import Batch
from ..data.tokens import BOS, EOS, PAD
from ..inference.trained import load_run
from .importance import checkpoint_suffix, load_eval_set
from .maps import FIELDS, KINDS, attention_maps

ROLE_THRESHOLDS = {"sink": 0.5, "positional": 0.5, "diffuse": 0.75}
ROLES = ("sink", "positional", "diffuse", "other")
MEASURES = ("entropy", "entropy_normalised", "confidence", "previous", "same", "next", "sink", "diagonal")


def row_measures(
    p: torch.Tensor, query_valid: torch.Tensor, key_valid: torch.Tensor, sink_keys: torch.Tensor, kind: str
) -> dict[str, torch.Tensor]:
    """Sums over valid query rows of one batch, per layer and head.

    p: [L, B, H, Tq, Tk] probabilities; query_valid: [B, Tq]; key_valid: [B, Tq, Tk] (the keys each row
    may attend to: padding and, for dec-self, future positions excluded); sink_keys: [B, Tk].
    Returns {measure: [L, H]} sums and, under "_rows" / "_normalised_rows", the row counts.
    """
    p = p.float()
    L, B, H, Tq, Tk = p.shape
    rows = query_valid[None, :, None, :].float()  # [1, B, 1, Tq]: a 0/1 weight on each row
    offset = torch.arange(Tk)[None, :] - torch.arange(Tq)[:, None]  # [Tq, Tk]: key − query position
    entropy = -torch.special.xlogy(p, p).sum(-1)  # [L, B, H, Tq]
    n_keys = key_valid.sum(-1).float()  # [B, Tq]
    many = (n_keys >= 2) & query_valid
    normaliser = torch.where(many, n_keys.clamp(min=2).log(), torch.ones_like(n_keys))
    values = {
        "entropy": entropy,
        "entropy_normalised": entropy / normaliser[None, :, None, :],
        "confidence": p.amax(-1),
        "previous": (p * (offset == -1)).sum(-1),
        "same": (p * (offset == 0)).sum(-1),
        "next": (p * (offset == 1)).sum(-1),
        "sink": (p * sink_keys[None, :, None, None, :]).sum(-1),
    }
    if kind == "cross":
        src_len = key_valid[:, 0, :].sum(-1).float()  # [B] source keys
        tgt_len = query_valid.sum(-1).float()  # [B] target rows
        scale = (src_len - 1) / (tgt_len - 1).clamp(min=1)
        centre = torch.arange(Tq)[None, :].float() * scale[:, None]  # [B, Tq]
        near = (torch.arange(Tk)[None, None, :].float() - centre[:, :, None]).abs() <= 1.0  # [B, Tq, Tk]
        values["diagonal"] = (p * near[None, :, None]).sum(-1)
    sums = {
        name: (value * (many[None, :, None, :].float() if name == "entropy_normalised" else rows)).sum((1, 3))
        for name, value in values.items()
    }
    sums["_rows"] = torch.tensor(float(query_valid.sum()))
    sums["_normalised_rows"] = torch.tensor(float(many.sum()))
    return sums


def _masks(batch: Batch, kind: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(query_valid [B, Tq], key_valid [B, Tq, Tk], sink_keys [B, Tk]) of one kind on a batch."""
    src_valid, tgt_valid = batch.src != PAD, batch.tgt_in != PAD
    if kind == "enc-self":
        query, keys, sink = src_valid, src_valid, batch.src == EOS
    elif kind == "cross":
        query, keys, sink = tgt_valid, src_valid, batch.src == EOS
    else:
        query, keys, sink = tgt_valid, tgt_valid, batch.tgt_in == BOS
    key_valid = keys[:, None, :].expand(-1, query.size(1), -1)
    if kind == "dec-self":
        causal = torch.ones(query.size(1), keys.size(1), dtype=torch.bool).tril()
        key_valid = key_valid & causal
    return query, key_valid, sink.float()


@torch.no_grad()
def measure_roles(model, batches: list[Batch]) -> dict[str, dict[str, torch.Tensor]]:
    """{kind: {measure: [L, H] mean over every valid query row of the batches}}."""
    totals: dict[str, dict[str, torch.Tensor]] = {}
    for batch in batches:
        attention = attention_maps(model, batch.src, batch.tgt_in)
        cpu = Batch(batch.src.cpu(), batch.tgt_in.cpu(), batch.tgt_out.cpu(), batch.indices)
        for kind in KINDS:
            maps = torch.stack([m.float().cpu() for m in getattr(attention, FIELDS[kind])])  # [L, B, H, Tq, Tk]
            sums = row_measures(maps, *_masks(cpu, kind), kind)
            into = totals.setdefault(kind, {})
            for name, value in sums.items():
                into[name] = into[name] + value if name in into else value
    means = {}
    for kind, sums in totals.items():
        rows, normalised_rows = sums.pop("_rows"), sums.pop("_normalised_rows")
        means[kind] = {
            name: value / (normalised_rows if name == "entropy_normalised" else rows).clamp(min=1)
            for name, value in sums.items()
        }
    return means


def classify(measures: dict[str, float], kind: str) -> str:
    """One head's class from its mean measures (see the module docstring)."""
    if measures["sink"] >= ROLE_THRESHOLDS["sink"]:
        return "sink"
    positional = measures.get("diagonal", 0.0) if kind == "cross" else strongest_neighbour(measures)
    if positional >= ROLE_THRESHOLDS["positional"]:
        return "positional"
    if measures["entropy_normalised"] >= ROLE_THRESHOLDS["diffuse"]:
        return "diffuse"
    return "other"


def strongest_neighbour(measures: dict[str, float]) -> float:
    """Self-attention: the weight on the previous, same or next token, whichever is largest."""
    return max(measures["previous"], measures["same"], measures["next"])


def role_records(means: dict[str, dict[str, torch.Tensor]]) -> list[dict]:
    """One record per head: kind, layer and head (from 1), its measures and its class."""
    records = []
    for kind, measures in means.items():
        L, H = next(iter(measures.values())).shape
        for layer in range(L):
            for head in range(H):
                values = {name: round(float(measures[name][layer, head]), 4) for name in MEASURES if name in measures}
                records.append(
                    {"kind": kind, "layer": layer + 1, "head": head + 1, **values, "role": classify(values, kind)}
                )
    return records


def role_counts(records: list[dict]) -> dict[str, dict[str, int]]:
    """{kind, in the records' order, then "all": {role: number of heads}}."""
    counts: dict[str, dict[str, int]] = {}
    for record in records:
        counts.setdefault(record["kind"], dict.fromkeys(ROLES, 0))[record["role"]] += 1
    counts["all"] = {role: sum(by_kind[role] for by_kind in counts.values()) for role in ROLES}
    return counts


def analyse_roles(
    run_dir: Path,
    split: str = "valid",
    max_sentences: int = 500,
    out: Path | None = None,
    checkpoint: str = "best",
    overrides=(),
    console: Console | None = None,
) -> dict:
    """`mhatrain heads RUN_DIR --roles`: measure, classify, write RUN_DIR/heads/roles-SPLIT.json, print."""
    console = console or Console()
    run = load_run(run_dir, checkpoint, list(overrides))
    evalset = load_eval_set(run, split, max_sentences)
    run.model.eval()
    means = measure_roles(run.model, evalset.batches)
    records = role_records(means)
    report = {
        "run_dir": Path(run_dir).name,
        "checkpoint": checkpoint,
        "update": run.step,
        "split": split,
        "source": evalset.name,
        "sentences": len(evalset.sources),
        "n_heads": run.model.cfg.n_heads,
        "teacher_forced": "on the reference translations",
        "thresholds": ROLE_THRESHOLDS,
        "counts": role_counts(records),
        "heads": records,
    }
    name = f"roles-{split}{checkpoint_suffix(checkpoint)}.json"
    path = (Path(out) if out is not None else Path(run_dir) / "heads") / name
    atomic_write_json(path, report)
    _print_roles(report, console)
    console.print(f"roles: {path}", highlight=False)
    return report


def _print_roles(report: dict, console: Console) -> None:
    table = Table(
        title=f"Head roles over {report['sentences']} sentences of '{report['split']}' "
        f"(h={report['n_heads']}, update {report['update']})",
        title_justify="left",
    )
    table.add_column("attention")
    for role in ROLES:
        table.add_column(role, justify="right")
    for kind, counts in report["counts"].items():
        total = sum(counts.values())
        table.add_row(kind, *[f"{counts[r]} ({counts[r] / total:.0%})" for r in ROLES])
    console.print(table)
    letters = {"sink": "S", "positional": "P", "diffuse": "D", "other": "."}
    for kind in dict.fromkeys(r["kind"] for r in report["heads"]):
        kind_records = [r for r in report["heads"] if r["kind"] == kind]
        layers = max(r["layer"] for r in kind_records)
        grid = [
            " ".join(letters[r["role"]] for r in kind_records if r["layer"] == layer) for layer in range(1, layers + 1)
        ]
        console.print(
            f"{kind}: " + " | ".join(grid) + "   (S sink, P positional, D diffuse, . other; layers left to right)",
            highlight=False,
        )


# What the study report averages per h and attention kind: how spread a head's weight is, how much goes
# to its strongest key, to its strongest neighbour (self-attention: max of previous/same/next), to the
# diagonal (cross-attention) and to the sink token.
STUDY_MEASURES = ("entropy_normalised", "confidence", "neighbour", "diagonal", "sink")


def study_role_measures(records_by_run: dict[str, dict]) -> dict[str, dict[str, float]] | None:
    """{kind: {measure: mean over every head of the runs of one h}} (None when no run has roles), so
    that points of different h can be compared when the classes alone say little (e.g. all "other")."""
    sums: dict[str, dict[str, float]] = {}
    heads: dict[str, int] = {}
    for report in records_by_run.values():
        for record in report["heads"]:
            kind = record["kind"]
            values = record if kind == "cross" else {**record, "neighbour": strongest_neighbour(record)}
            into = sums.setdefault(kind, {})
            for name in STUDY_MEASURES:
                if name in values:
                    into[name] = into.get(name, 0.0) + values[name]
            heads[kind] = heads.get(kind, 0) + 1
    return {
        kind: {name: round(total / heads[kind], 4) for name, total in by.items()} for kind, by in sums.items()
    } or None


def study_role_shares(records_by_run: dict[str, dict]) -> dict[str, float] | None:
    """Share of heads in each class over the runs of one h (None when no run has roles)."""
    counts = dict.fromkeys(ROLES, 0)
    for report in records_by_run.values():
        for role, n in report["counts"]["all"].items():
            counts[role] += n
    total = sum(counts.values())
    return {role: round(n / total, 4) for role, n in counts.items()} if total else None
