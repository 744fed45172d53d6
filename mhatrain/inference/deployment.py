"""Our model in CTranslate2, the C++ engine translation models are deployed with (`pip install
'mhatrain[ctranslate2]'`).

`transformer_spec` maps a Transformer onto a CTranslate2 `TransformerSpec`, weight for weight:
scaled embeddings shared by both sides and tied to the output, our sinusoidal table as the position
encodings, fused [W_Q; W_K; W_V] (self-attention) and [W_K; W_V] (cross-attention), pre- or
post-norm. `export_ctranslate2` writes it as a model directory, with the run's SentencePiece model
beside the weights (SPM_FILE), so that the directory alone translates. `Engine` translates and
scores token ids with a loaded model, for the bench and the tests.

Sources end in EOS in both: CTranslate2 adds it itself (add_source_eos), our search appends it
(`source_ids`). Decoding starts from BOS in both.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.config import DecodeConfig
from ..core.errors import MhatrainError, require_optional
from ..data.tokenizer import Tokenizer
from ..data.tokens import BOS, EOS, UNK
from ..model.sizes import head_size
from ..model.transformer import Transformer
from .trained import load_run

SPM_FILE = "spm.model"  # the run's SentencePiece model, copied into the exported directory
QUANTIZATIONS = ("float32", "int8")  # what `export --ctranslate2` writes: as trained, or int8 weights
LAYER_NORM_EPS = 1e-5  # torch's nn.LayerNorm default, which every LayerNorm of ours uses


def require_ctranslate2(why: str):
    """Import ctranslate2, or fail with one line saying how to install it."""
    return require_optional("ctranslate2", "CTranslate2", "ctranslate2", "ctranslate2>=4.5", why)


def transformer_spec(model: Transformer, tokenizer: Tokenizer):
    """A CTranslate2 TransformerSpec holding the model's fp32 weights and the tokenizer's pieces."""
    require_ctranslate2("converting a model to CTranslate2")
    from ctranslate2.specs import transformer_spec as ts  # optional dependency, checked above

    cfg = model.cfg
    head_dim = None if cfg.d_head is None else head_size(cfg.d_model, cfg.n_heads, cfg.d_head)
    heads = cfg.n_heads  # every layer's, in CTranslate2: a pruned layer's missing heads are zero heads
    pre = cfg.norm == "pre"
    spec = ts.TransformerSpec(
        ts.TransformerEncoderSpec(cfg.n_encoder_layers, cfg.n_heads, pre_norm=pre, head_dim=head_dim),
        ts.TransformerDecoderSpec(cfg.n_decoder_layers, cfg.n_heads, pre_norm=pre, head_dim=head_dim),
    )
    _set_side(spec.encoder, model, model.enc_norm, pre)
    _set_side(spec.decoder, model, model.dec_norm, pre)
    spec.encoder.embeddings[0].weight = _tensor(model.embed.weight)
    spec.decoder.embeddings.weight = _tensor(model.embed.weight)
    spec.decoder.projection.weight = _tensor(model.output.weight)
    for encoder_layer, spec_layer in zip(model.encoder, spec.encoder.layer):
        _set_attention(spec_layer.self_attention, encoder_layer.self_attn, encoder_layer.res_attn.norm, 3, heads)
        _set_ffn(spec_layer.ffn, encoder_layer.ffn, encoder_layer.res_ffn.norm)
    for decoder_layer, spec_layer in zip(model.decoder, spec.decoder.layer):
        _set_attention(spec_layer.self_attention, decoder_layer.self_attn, decoder_layer.res_self.norm, 3, heads)
        _set_attention(spec_layer.attention, decoder_layer.cross_attn, decoder_layer.res_cross.norm, 2, heads)
        _set_ffn(spec_layer.ffn, decoder_layer.ffn, decoder_layer.res_ffn.norm)
    pieces = tokenizer.pieces(list(range(tokenizer.vocab_size)))
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = pieces[UNK], pieces[BOS], pieces[EOS]
    spec.config.decoder_start_token = pieces[BOS]
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    return spec


def _tensor(x: torch.Tensor) -> torch.Tensor:
    """A copy: CTranslate2's int8 quantization rewrites the spec's arrays in place (it changed our
    embeddings when they were shared)."""
    return x.detach().float().cpu().clone()


def _set_side(spec, model: Transformer, final_norm, pre: bool) -> None:
    """Positions (our table, so that both sides add the same encodings) and the pre-norm stack's final LayerNorm."""
    spec.position_encodings.encodings = _tensor(model.positions)
    if pre:
        _set_norm(spec.layer_norm, final_norm)


def _set_norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _tensor(norm.weight), _tensor(norm.bias)


def _set_linear(spec, *linears: torch.nn.Linear, rows: int | None = None, columns: int | None = None) -> None:
    """One Linear, or several stacked by rows (fused projections); each padded with zero rows to `rows` or
    zero columns to `columns` (a pruned layer's missing heads: see _set_attention)."""
    spec.weight = torch.cat([_padded(_tensor(m.weight), rows, columns) for m in linears])
    if linears[0].bias is not None:
        spec.bias = torch.cat([_padded(_tensor(m.bias), rows, None) for m in linears])


def _padded(x: torch.Tensor, rows: int | None, columns: int | None) -> torch.Tensor:
    if rows is not None and x.shape[0] < rows:
        x = torch.cat([x, x.new_zeros((rows - x.shape[0], *x.shape[1:]))])
    if columns is not None and x.shape[1] < columns:
        x = torch.cat([x, x.new_zeros((x.shape[0], columns - x.shape[1]))], dim=1)
    return x


def _set_attention(spec, attention, norm, fused: int, heads: int) -> None:
    """fused=3: self-attention, [W_Q; W_K; W_V] then W_O; fused=2: cross-attention, W_Q, [W_K; W_V], W_O.

    CTranslate2 holds one head count for every layer. A pruned layer with fewer heads gets zero heads up to
    `heads`: zero rows of W_Q, W_K, W_V and zero columns of W_O, so each added head's output is 0 and the
    layer computes what ours does."""
    _set_norm(spec.layer_norm, norm)
    inner = heads * attention.d_head
    if fused == 3:
        _set_linear(spec.linear[0], attention.w_q, attention.w_k, attention.w_v, rows=inner)
    else:
        _set_linear(spec.linear[0], attention.w_q, rows=inner)
        _set_linear(spec.linear[1], attention.w_k, attention.w_v, rows=inner)
    _set_linear(spec.linear[-1], attention.w_o, columns=inner)


def _set_ffn(spec, ffn, norm) -> None:
    _set_norm(spec.layer_norm, norm)
    _set_linear(spec.linear_0, ffn.w_1)
    _set_linear(spec.linear_1, ffn.w_2)


def export_ctranslate2(model: Transformer, tokenizer: Tokenizer, out: Path, quantization: str = "float32") -> Path:
    """Write the model as a CTranslate2 model directory `out` (weights in `quantization`), with the
    SentencePiece model beside them; returns `out`."""
    if quantization not in QUANTIZATIONS:
        raise MhatrainError(f"quantization must be {' or '.join(QUANTIZATIONS)}, got {quantization!r}")
    spec = transformer_spec(model, tokenizer)
    spec.validate()
    spec.optimize(quantization=quantization)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec.save(str(out))
    shutil.copyfile(tokenizer.path, out / SPM_FILE)
    return out


@dataclass
class Engine:
    """A loaded CTranslate2 Translator and the pieces its vocabulary is made of: it reads and writes
    token ids as ours does (sources without EOS, translations without BOS/EOS)."""

    translator: object  # ctranslate2.Translator
    pieces: list[str]

    @classmethod
    def load(cls, directory: Path, compute_type: str = "default", threads: int = 0, device: str = "cpu") -> Engine:
        """threads: CPU threads of one translation (0: CTranslate2's default)."""
        ct2 = require_ctranslate2("translating with CTranslate2")
        translator = ct2.Translator(str(directory), device=device, compute_type=compute_type, intra_threads=threads)
        tokenizer = Tokenizer(Path(directory) / SPM_FILE)
        return cls(translator, tokenizer.pieces(list(range(tokenizer.vocab_size))))

    def _tokens(self, ids: list[list[int]]) -> list[list[str]]:
        return [[self.pieces[i] for i in s] for s in ids]

    def translate_ids(self, sources: list[list[int]], cfg: DecodeConfig, beam: int) -> list[list[int]]:
        """Our search's settings mapped onto CTranslate2's options (see `search_options`)."""
        results = self.translator.translate_batch(self._tokens(sources), **search_options(cfg, beam, sources))
        index = {piece: i for i, piece in enumerate(self.pieces)}
        return [[index[p] for p in r.hypotheses[0]] for r in results]

    def target_log_probs(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        """Teacher-forced log P of each target token and of EOS after them."""
        return [r.log_probs for r in self.translator.score_batch(self._tokens(sources), self._tokens(targets))]


def teacher_forced_log_probs(
    model: Transformer, sources: list[list[int]], targets: list[list[int]]
) -> list[list[float]]:
    """Ours: log P of each target token and of EOS after them, given the encoder's inputs `sources`
    (ids + EOS, see `source_ids`), one sentence at a time (no padding)."""
    out = []
    with torch.no_grad():
        for src, tgt in zip(sources, targets):
            logits = model(torch.tensor([src]), torch.tensor([[BOS, *tgt]]))[0].float()
            gold = torch.tensor([*tgt, EOS])
            out.append(logits.log_softmax(-1).gather(1, gold[:, None])[:, 0].tolist())
    return out


def search_options(cfg: DecodeConfig, beam: int, sources: list[list[int]]) -> dict:
    """CTranslate2's translate_batch options for our decode settings: the same beam and length penalty
    (without normalize_scores it is Wu et al.'s ((5 + |Y|) / 6)^alpha, ours), and a length limit.
    CTranslate2 takes one limit per batch (max_decoding_length, EOS included), ours one per
    sentence (a · source length + b): the batch gets its longest sentence's."""
    longest = max(len(s) + 1 for s in sources)  # + EOS, as our limits count the encoder's input
    limit = int(cfg.max_len_a * longest + cfg.max_len_b) + 1
    return {
        "beam_size": beam,
        "length_penalty": cfg.alpha if beam > 1 else 0.0,
        "max_decoding_length": limit,
        "max_batch_size": 0,
        "return_scores": False,
    }


@dataclass
class Exported:
    directory: Path
    quantization: str
    load_seconds: float  # CTranslate2 loading the written directory, as a user's first line would


def export_for_deployment(run_dir: Path, dest: Path | None, out: Path, int8: bool, console) -> Exported:
    """`mhatrain export RUN --ctranslate2 DIR [--int8]`: export_run, and the line that says where it went."""
    if dest is not None:
        raise MhatrainError("export --ctranslate2 DIR writes DIR: give no DEST")
    written = export_run(run_dir, out, "int8" if int8 else "float32")
    console.print(
        f"export: CTranslate2 model ({written.quantization} weights) written to {written.directory}; "
        f"CTranslate2 loads it in {written.load_seconds:.2f} s",
        highlight=False,
    )
    return written


def export_run(run_dir: Path, out: Path, quantization: str = "float32") -> Exported:
    """`mhatrain export RUN --ctranslate2 DIR`: the run's best weights into a new (or empty) DIR, loaded
    back once to check that CTranslate2 reads it."""
    require_ctranslate2("export --ctranslate2")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise MhatrainError(f"--ctranslate2 {out}: exists and is not an empty directory")
    run = load_run(run_dir)
    export_ctranslate2(run.model.float(), run.tokenizer, out, quantization)
    started = time.perf_counter()
    Engine.load(out)
    return Exported(out, quantization, time.perf_counter() - started)
