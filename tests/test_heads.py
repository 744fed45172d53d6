"""Looking inside the heads: exact masking, attention maps, statistics, importance, plots and the CLI."""

from __future__ import annotations

import copy
import io
import json
import math
import re
import sys

import numpy as np
import pytest
import torch
from rich.console import Console

from mhatrain import cli
from mhatrain.analysis.figures import attention_grid, head_heatmaps, pruning_plot
from mhatrain.analysis.importance import (
    EvalSet,
    Head,
    Judge,
    about,
    all_heads,
    gates_without,
    normalise_per_layer,
    open_gates,
    prunable,
    prune_counts,
    pruning_curve,
    pruning_order,
    summed_nll,
)
from mhatrain.analysis.maps import FIELDS, KINDS, attention_maps, head_statistics, show_attention
from mhatrain.core.config import DecodeConfig, ModelConfig
from mhatrain.data.batches import Batch
from mhatrain.data.tokens import BOS, EOS, PAD
from mhatrain.inference.search import translate_ids
from mhatrain.model.transformer import build_model, gated_heads

from .conftest import ROOT, run_cli

VOCAB = 24
DECODE = DecodeConfig(beam=3, alpha=0.6, max_len_a=0.0, max_len_b=8)


def random_model(n_heads: int = 4, seed: int = 0, n_encoder_layers: int = 2, n_decoder_layers: int = 3):
    """d_model 32, no dropout; different encoder and decoder depths catch mixed-up layer counts."""
    torch.manual_seed(seed)
    cfg = ModelConfig(
        d_model=32,
        n_heads=n_heads,
        d_ff=64,
        n_encoder_layers=n_encoder_layers,
        n_decoder_layers=n_decoder_layers,
        dropout=0.0,
        max_positions=64,
    )
    return build_model(cfg, VOCAB, PAD).eval()


def padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two pairs of different lengths: src [2, 6], tgt_in / tgt_out [2, 5], PAD-padded."""
    src = torch.tensor([[5, 6, 7, 8, 9, EOS], [10, 11, EOS, PAD, PAD, PAD]])
    tgt_in = torch.tensor([[BOS, 12, 13, 14, 15], [BOS, 16, 17, PAD, PAD]])
    tgt_out = torch.tensor([[12, 13, 14, 15, EOS], [16, 17, EOS, PAD, PAD]])
    return src, tgt_in, tgt_out


def logits(model, src, tgt_in, gates=None):
    with gated_heads(model, gates):
        memory, src_mask = model.encode(src)
        return model.decode(tgt_in, memory, src_mask)


def gated_translation(model, sources, beam, gates):
    with gated_heads(model, gates):
        return translate_ids(model, sources, DECODE, "cpu", beam)


def module_of(model, head: Head):
    if head.kind == "enc-self":
        return model.encoder[head.layer].self_attn
    layer = model.decoder[head.layer]
    return layer.self_attn if head.kind == "dec-self" else layer.cross_attn


def zero_w_o_slice(model, heads):
    """A copy of the model with each head's input columns of W_O zeroed (the head's output removed)."""
    pruned = copy.deepcopy(model)
    with torch.no_grad():
        for head in heads:
            attn = module_of(pruned, head)
            attn.w_o.weight[:, head.head * attn.d_head : (head.head + 1) * attn.d_head] = 0.0
    return pruned


# ----------------------------------------------------------------------------- exact masking

SOME_HEADS = [Head("enc-self", 1, 2), Head("dec-self", 2, 0), Head("cross", 0, 3)]


@pytest.mark.parametrize("heads", [[h] for h in SOME_HEADS] + [SOME_HEADS], ids=["enc", "dec", "cross", "all"])
def test_masking_a_head_equals_zeroing_its_slice_of_w_o(heads):
    model = random_model()
    src, tgt_in, _ = padded_batch()
    with torch.no_grad():
        masked = logits(model, src, tgt_in, gates_without(model, heads, "cpu"))
        zeroed = logits(zero_w_o_slice(model, heads), src, tgt_in)
        unmasked = logits(model, src, tgt_in)
    torch.testing.assert_close(masked, zeroed, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(masked, unmasked, atol=1e-4)  # the head did matter


@pytest.mark.parametrize("beam", [1, 3])
def test_gated_decoding_equals_decoding_the_zeroed_model(beam):
    model = random_model(seed=1)
    heads = [Head("dec-self", 0, 1), Head("cross", 2, 0), Head("enc-self", 0, 3)]
    sources = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]]
    gated = gated_translation(model, sources, beam, gates_without(model, heads, "cpu"))
    zeroed = translate_ids(zero_w_o_slice(model, heads), sources, DECODE, "cpu", beam)
    assert gated == zeroed


def test_open_gates_change_nothing():
    model = random_model()
    src, tgt_in, _ = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(
            logits(model, src, tgt_in, open_gates(model, "cpu")), logits(model, src, tgt_in), rtol=0, atol=0
        )
    sources = [[5, 6, 7, 8], [9, 10]]
    for beam in (1, 3):
        assert gated_translation(model, sources, beam, open_gates(model, "cpu")) == translate_ids(
            model, sources, DECODE, "cpu", beam
        )


def test_gates_have_one_row_per_layer_of_each_stack():
    model = random_model(n_heads=2, n_encoder_layers=2, n_decoder_layers=3)
    gates = open_gates(model, "cpu")
    assert gates.enc_self.shape == (2, 2) and gates.dec_self.shape == (3, 2) and gates.cross.shape == (3, 2)
    assert len(all_heads(model)) == 2 * 2 + 3 * 2 * 2


# ----------------------------------------------------------------------------- maps and statistics


def test_maps_have_the_right_shapes_and_rows_sum_to_one_over_unmasked_keys():
    model = random_model(n_heads=4)
    src, tgt_in, _ = padded_batch()
    attention = attention_maps(model, src, tgt_in)
    B, S, T, H = 2, src.size(1), tgt_in.size(1), 4
    assert (len(attention.enc_self), len(attention.dec_self), len(attention.cross)) == (2, 3, 3)
    src_keys = (src != PAD)[:, None, None, :]  # [B, 1, 1, S]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    tgt_keys = (tgt_in != PAD)[:, None, None, :] & causal
    for maps, shape, allowed in (
        (attention.enc_self, (B, H, S, S), src_keys),
        (attention.dec_self, (B, H, T, T), tgt_keys),
        (attention.cross, (B, H, T, S), src_keys),
    ):
        for probs in maps:
            assert probs.shape == shape
            allowed_full = allowed.expand(shape)
            torch.testing.assert_close(probs.sum(-1), torch.ones(shape[:-1]))
            assert (probs[~allowed_full] == 0).all()
            assert (probs >= 0).all()


def test_statistics_of_known_maps():
    T = 5
    identity = torch.eye(T)
    previous = torch.zeros(T, T)
    previous[0, 0] = 1.0
    previous[torch.arange(1, T), torch.arange(T - 1)] = 1.0
    uniform = torch.full((T, T), 1.0 / T)
    probs = torch.stack([identity, previous, uniform])[None]  # [L=1, H=3, T, T]
    key_ids = [7, 8, 9, 10, EOS]
    stats = head_statistics(probs, key_ids)
    assert stats["entropy"].shape == (1, 3)
    torch.testing.assert_close(stats["entropy"][0], torch.tensor([0.0, 0.0, math.log(T)]))
    torch.testing.assert_close(stats["same"][0], torch.tensor([1.0, 1 / T, 1 / T]))
    torch.testing.assert_close(stats["previous"][0], torch.tensor([0.0, (T - 1) / T, (T - 1) / T / T]))
    torch.testing.assert_close(stats["next"][0], torch.tensor([0.0, 0.0, (T - 1) / T / T]))
    torch.testing.assert_close(stats["distance"][0, :2], torch.tensor([0.0, (T - 1) / T]))
    torch.testing.assert_close(stats["eos"][0], torch.tensor([1 / T, 0.0, 1 / T]))
    assert stats["bos"] is None  # no <s> among the keys


# ----------------------------------------------------------------------------- importance and pruning


def judge_for(model, src, tgt_in, tgt_out) -> Judge:
    batch = Batch(src, tgt_in, tgt_out, [0, 1])
    evalset = EvalSet("toy", [[5, 6]], ["x"], [batch], batch.n_tgt_tokens)
    return Judge(model, None, evalset, DECODE, torch.device("cpu"), "fp32", beam=1, with_bleu=False)


def test_gradient_importance_sums_each_sentences_absolute_gate_derivative():
    """Michel et al.: I_h = Σ_sentences |∂L_s/∂ξ_h|, so sentences that pull a gate in opposite
    directions add up instead of cancelling, as they would in |∂(Σ_s L_s)/∂ξ_h|."""
    model = random_model()
    src, tgt_in, tgt_out = padded_batch()
    judge = judge_for(model, src, tgt_in, tgt_out)
    importance = judge.gradient_importance()
    assert {k: tuple(v.shape) for k, v in importance.items()} == {
        "enc-self": (2, 4),
        "dec-self": (3, 4),
        "cross": (3, 4),
    }
    assert all(p.grad is None and p.requires_grad for p in model.parameters())  # weights untouched
    eps = 3e-3  # truncation error ~eps², float32 rounding ~1/eps: both well under 2%
    sentences = [Batch(src[i : i + 1], tgt_in[i : i + 1], tgt_out[i : i + 1], [i]) for i in range(src.size(0))]
    cancelled = 0
    for head in SOME_HEADS:  # central finite differences of each sentence's summed NLL in the head's gate
        derivatives = []
        for sentence in sentences:
            losses = []
            for value in (1 + eps, 1 - eps):
                gates = open_gates(model, "cpu")
                getattr(gates, FIELDS[head.kind])[head.layer, head.head] = value
                with torch.no_grad():
                    losses.append(float(summed_nll(model, sentence, gates)))
            derivatives.append((losses[0] - losses[1]) / (2 * eps))
        expected = sum(abs(d) for d in derivatives) / judge.evalset.n_tokens
        assert importance[head.kind][head.layer, head.head].item() == pytest.approx(expected, rel=2e-2, abs=1e-6)
        cancelled += abs(sum(derivatives)) < 0.9 * sum(abs(d) for d in derivatives)
    assert cancelled  # some head's two sentences disagree in sign: the batch-level value would differ
    for values in normalise_per_layer(importance).values():
        torch.testing.assert_close(values.norm(dim=-1), torch.ones(values.size(0)))


def test_pruning_order_and_counts():
    normalised = {
        "enc-self": torch.tensor([[0.9, 0.1]]),
        "dec-self": torch.tensor([[0.5, 0.3]]),
        "cross": torch.tensor([[0.2, 0.8]]),
    }
    order = pruning_order(normalised, KINDS)
    assert [str(h) for h in order] == [
        "enc-self L1 H2",
        "cross L1 H1",
        "dec-self L1 H2",
        "dec-self L1 H1",
        "cross L1 H2",
        "enc-self L1 H1",
    ]
    assert pruning_order(normalised, ["cross"]) == [Head("cross", 0, 0), Head("cross", 0, 1)]
    assert prune_counts(1) == [0, 1]
    counts = prune_counts(144)
    assert counts[0] == 0 and counts[-1] == 144 and len(counts) == 11 and counts == sorted(counts)


class CountingJudge:
    """Scores a gate set by how many heads it closes: BLEU 30 minus `cost(closed heads)`."""

    def __init__(self, model, cost):
        self.model, self.device, self.cost, self.calls = model, torch.device("cpu"), cost, []

    def score(self, gates):
        closed = sum(int((g == 0).sum()) for g in (gates.enc_self, gates.dec_self, gates.cross))
        self.calls.append(closed)
        return {"loss": 1.0 + closed, "bleu": 30.0 - self.cost(closed)}


@pytest.mark.parametrize("cutoff", [0, 1, 13, 24, 30, 32])
def test_pruning_curve_finds_the_exact_number_of_prunable_heads(cutoff):
    model = random_model(n_heads=4)  # 32 heads: grid steps of 3-4 heads
    judge = CountingJudge(model, lambda closed: 0.5 if closed <= cutoff else 1.5)
    order = all_heads(model)
    points = pruning_curve(judge, order, {"loss": 1.0, "bleu": 30.0})
    assert prunable(points, 30.0) == cutoff
    measured = [p["pruned"] for p in points]
    assert measured == sorted(set(measured)) and set(prune_counts(32)) <= set(measured)
    assert cutoff == 32 or cutoff + 1 in measured  # the first head too many was measured, not guessed
    assert len(judge.calls) <= 10 + 2  # grid points plus at most log2(4) bisection steps
    assert [h for p in points for h in p["removed"]] == [str(h) for h in order]


def test_pruning_curve_without_bleu_measures_the_grid_only():
    model = random_model(n_heads=4)
    judge = CountingJudge(model, lambda closed: 0.0)
    judge.score = lambda gates, score=judge.score: {"loss": score(gates)["loss"]}
    points = pruning_curve(judge, all_heads(model), {"loss": 1.0})
    assert [p["pruned"] for p in points] == prune_counts(32)
    assert [p["loss"] for p in points] == [1.0 + k for k in prune_counts(32)]


# ----------------------------------------------------------------------------- plots


@pytest.mark.parametrize("n_heads", [1, 32])
def test_plots_work_for_any_head_count(tmp_path, n_heads):
    L, T, S = 2, 4, 5
    maps = torch.softmax(torch.randn(L, n_heads, T, S), -1).numpy()
    attention_grid(
        maps, [1, 2], [f"▁q{i}" for i in range(T)], [f"k{i}" for i in range(S)], "title", tmp_path / "grid.png"
    )
    values = {k: np.random.randn(L, n_heads) for k in KINDS}
    values["enc-self"][0, 0] = np.nan  # a missing value is left blank
    head_heatmaps(
        [("Δloss", values), ("gradient", {k: np.abs(v) for k, v in values.items()})],
        tmp_path / "importance.png",
        "title",
        diverging=(True, False),
    )
    pruning_plot(
        {"all": [(0.0, 30.0), (0.5, 20.0), (1.0, 0.0)]},
        {"all": 3 * L * n_heads},
        "bleu",
        30.0,
        tmp_path / "pruning.png",
        "title",
    )
    for name in ("grid.png", "importance.png", "pruning.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        attention_grid(maps[0], [1], [], [], "bad shape", tmp_path / "bad.png")


# ----------------------------------------------------------------------------- the commands on a trained run


@pytest.fixture(scope="module")
def attention_out(tiny_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("attention")
    result = run_cli("attention", str(tiny_run), "The red car likes the hat.", "--out", str(out))
    assert result.returncode == 0, result.stderr + result.stdout
    return out, result.stdout


def test_attention_command_writes_grids_maps_and_statistics(attention_out, tiny_run):
    out, stdout = attention_out
    assert len(list(out.glob("*.png"))) == 3
    assert all(len(list(out.glob(f"attention-*-{kind}.png"))) == 1 for kind in KINDS)
    report = json.loads(next(out.glob("*.json")).read_text())
    assert report["translation"] and report["src_pieces"][-1] == "</s>" and report["tgt_pieces"][0] == "<s>"
    S, T = len(report["src_pieces"]), len(report["tgt_pieces"])
    shapes = {"enc-self": (2, 4, S, S), "dec-self": (2, 4, T, T), "cross": (2, 4, T, S)}
    for kind, shape in shapes.items():
        maps = np.array(report["maps"][kind])
        assert maps.shape == shape
        np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-3)
    assert np.triu(np.array(report["maps"]["dec-self"]), k=1).max() == 0  # causal
    assert len(report["statistics"]) == 3 * 2 * 4
    assert {"entropy", "distance", "same", "previous", "next", "eos", "bos"} <= report["statistics"][0].keys()
    arrays = np.load(next(out.glob("*.npz")))
    assert arrays["enc_self"].shape == shapes["enc-self"] and arrays["cross"].shape == shapes["cross"]
    assert list(arrays["src_pieces"]) == report["src_pieces"]
    assert report["translation"] in stdout and "entropy" in stdout
    assert not (tiny_run / "heads").exists()  # --out was respected


def test_the_saved_statistics_are_those_of_the_saved_maps(attention_out):
    """Each statistics record, recomputed here row by row from the saved maps (STEM.npz) and pieces."""
    out, _ = attention_out
    report = json.loads(next(out.glob("*.json")).read_text())
    arrays = np.load(next(out.glob("*.npz")))
    keys = {"enc-self": report["src_pieces"], "dec-self": report["tgt_pieces"], "cross": report["src_pieces"]}
    records = {(r["kind"], r["layer"], r["head"]): r for r in report["statistics"]}
    assert len(records) == len(report["statistics"]) == 3 * 2 * 4
    for kind, pieces in keys.items():
        for layer, maps in zip(arrays[f"{FIELDS[kind]}_layers"], arrays[FIELDS[kind]]):
            for head, p in enumerate(maps.astype(np.float64)):  # p: [Tq, Tk]
                record = records[kind, int(layer), head + 1]
                rows = range(p.shape[0])
                weight = {
                    "entropy": [-sum(x * math.log(x) for x in row if x > 0) for row in p],
                    "distance": [sum(x * abs(j - i) for j, x in enumerate(p[i])) for i in rows],
                    "same": [p[i, i] if i < p.shape[1] else 0.0 for i in rows],
                    "previous": [p[i, i - 1] if 0 < i <= p.shape[1] else 0.0 for i in rows],
                    "next": [p[i, i + 1] if i + 1 < p.shape[1] else 0.0 for i in rows],
                }
                for token, name in (("</s>", "eos"), ("<s>", "bos")):
                    at = [j for j, piece in enumerate(pieces) if piece == token]
                    weight[name] = [sum(p[i, j] for j in at) for i in rows] if at else None
                for name, values in weight.items():
                    expected = None if values is None else pytest.approx(sum(values) / len(values), abs=2e-4)
                    assert record[name] == expected, (kind, int(layer), head + 1, name)


def test_characters_the_png_font_lacks_are_named_once_with_the_view_that_renders_them(tiny_run, tmp_path):
    """matplotlib's font (DejaVu Sans) has no CJK glyphs: one note instead of a warning per glyph and figure."""
    result = run_cli("attention", str(tiny_run), "The 中文 car.", "--out", str(tmp_path), "--html")
    assert result.returncode == 0, result.stderr
    (line,) = result.stderr.splitlines()
    page = next(tmp_path.glob("*.html"))
    assert line == (
        f"note: the PNGs' font has no glyph for 中 文, drawn as empty boxes; "
        f"the HTML head view renders any script: {page}"
    )
    assert len(list(tmp_path.glob("*.png"))) == 3


def test_attention_one_layer_one_kind(tiny_run, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    returned = show_attention(
        tiny_run,
        "The car sees the house.",
        layer=2,
        kinds=("cross",),
        out=tmp_path,
        console=Console(file=io.StringIO()),
    )
    assert len(list(tmp_path.glob("*.png"))) == 1
    report = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert report == json.loads(json.dumps(returned))
    assert report["layers"] == {"cross": [2]} and list(report["maps"]) == ["cross"]
    assert {(r["kind"], r["layer"]) for r in report["statistics"]} == {("cross", 2)}


def test_heads_command_writes_importance_and_pruning(tiny_run, tmp_path):
    result = run_cli("heads", str(tiny_run), "--split", "test", "--max-sentences", "8", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr + result.stdout
    report = json.loads((tmp_path / "heads-test.json").read_text())
    assert (tmp_path / "heads-test-importance.png").is_file() and (tmp_path / "heads-test-pruning.png").is_file()
    assert report["sentences"] == 8 and report["metric"] == "bleu" and report["beam"] == 1
    assert report["bleu_signature"].startswith("nrefs:1|case:mixed")
    assert len(report["heads"]) == 3 * 2 * 4
    assert sorted(r["prune_rank"] for r in report["heads"]) == list(range(1, 25))
    for record in report["heads"]:
        assert {
            "masked_loss",
            "delta_loss",
            "masked_bleu",
            "delta_bleu",
            "gradient",
            "gradient_normalised",
        } <= record.keys()
        assert record["gradient"] >= 0
    curves = report["pruning"]
    assert list(curves) == ["enc-self", "dec-self", "cross", "all"]
    assert curves["all"]["heads"] == 24 and curves["cross"]["heads"] == 8
    for curve in curves.values():
        points = curve["points"]
        assert points[0]["pruned"] == 0 and points[0]["bleu"] == report["baseline"]["bleu"]
        assert points[-1]["pruned"] == curve["heads"]
        assert sum(len(p["removed"]) for p in points) == curve["heads"]
        assert 0 <= curve["prunable"] <= curve["heads"]
    assert "pruning curve" in result.stdout and "losing less than 1 BLEU" in result.stdout
    assert_heads_report_follows_its_measurements(report)
    last = result.stdout.splitlines()[-1]  # the closing line says what it is, not "5s.  files: ..."
    assert re.fullmatch(r"judged 24 heads in \d+ s; files: .*", last), last
    assert last.endswith(f"{tmp_path / 'heads-test-importance.png'}  {tmp_path / 'heads-test-pruning.png'}")


def assert_heads_report_follows_its_measurements(report: dict) -> None:
    """What heads-SPLIT.json derives, recomputed here from what it measured: each head's Δ from its
    masked score, the per-layer normalised gradient from the raw ones, the pruning order (least
    normalised importance first, ties in kind, layer, head order) as prune_rank and as each curve's
    removals, and the heads prunable before BLEU first falls 1 or more below the baseline."""
    heads, base = report["heads"], report["baseline"]
    for r in heads:
        assert r["delta_loss"] == pytest.approx(r["masked_loss"] - base["loss"], abs=2e-5)
        assert r["delta_bleu"] == pytest.approx(r["masked_bleu"] - base["bleu"], abs=2e-5)
        layer = [g["gradient"] for g in heads if (g["kind"], g["layer"]) == (r["kind"], r["layer"])]
        assert r["gradient_normalised"] == pytest.approx(r["gradient"] / math.hypot(*layer), abs=1e-5)
    position = {kind: i for i, kind in enumerate(KINDS)}
    normalised = {
        (r["kind"], r["layer"], r["head"]): r["gradient"]
        / math.hypot(*[g["gradient"] for g in heads if (g["kind"], g["layer"]) == (r["kind"], r["layer"])])
        for r in heads
    }
    order = sorted(normalised, key=lambda h: (normalised[h], position[h[0]], h[1], h[2]))
    names = [f"{kind} L{layer} H{head}" for kind, layer, head in order]
    assert [(r["kind"], r["layer"], r["head"]) for r in sorted(heads, key=lambda r: r["prune_rank"])] == order
    for group, curve in report["pruning"].items():
        removed = [name for point in curve["points"] for name in point["removed"]]
        assert removed == [n for n in names if group == "all" or n.split()[0] == group], group
        kept = 0
        for point in sorted(curve["points"], key=lambda point: point["pruned"]):
            if base["bleu"] - point["bleu"] >= 1.0:
                break
            kept = point["pruned"]
        assert curve["prunable"] == kept, group


def call_main(monkeypatch, capsys, *args) -> str:
    """Run the CLI in this process (cheaper than a subprocess); returns its one-line error."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["mhatrain", *args])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["attention", "{run}", "The cat.", "--layer", "3"], "--layer 3: encoder self-attention has layers 1..2"),
        (["attention", "{run}", "The cat.", "--layer", "first"], "--layer must be a layer number"),
        (
            ["attention", "{run}", "The cat.", "--kind", "self"],
            "--kind must be enc-self, dec-self, cross or all",
        ),
        (["attention", "{run}", "   "], "empty sentence"),
        (["attention", "{tmp}", "The cat."], "is not a mhatrain run directory"),
        (["heads", "{run}", "--metric", "chrf"], "--metric must be bleu or loss"),
        (["heads", "{tmp}"], "is not a mhatrain run directory"),
        (["heads", "{run}", "--split", "nosuch"], "no files for split 'nosuch'"),
    ],
)
def test_bad_options_give_one_clear_line(tiny_run, tmp_path, monkeypatch, capsys, args, fragment):
    args = [a.format(run=tiny_run, tmp=tmp_path) for a in args]
    assert fragment in call_main(monkeypatch, capsys, *args)


def test_the_gradient_importance_note_in_the_heads_file_says_per_sentence():
    """The note written into heads JSON describes the method that ran: per-sentence |∂L_s/∂gate|."""
    from mhatrain.analysis.importance import NOTES

    assert "sentence" in NOTES["gradient"] and "of the batch" not in NOTES["gradient"]


@pytest.mark.parametrize(
    "seconds, text", [(0.2, "about 1 s"), (20.4, "about 20 s"), (89, "about 89 s"), (600, "about 10 min")]
)
def test_the_time_estimate_of_a_short_analysis_is_in_seconds_not_0_min(seconds, text):
    assert about(seconds) == text
