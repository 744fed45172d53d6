"""How well a model predicts the references: the per-token cross-entropy of each reference sentence,
teacher-forced and without label smoothing (`reference_cross_entropy`).

This is the model's own objective measured on held-out text, the steadier of a head-count study's two
outcomes (BLEU scores the translations search produces; cross-entropy the model that search uses).
Each sentence's summed negative log-likelihood (nats) and its number of target tokens (subwords + EOS)
are kept, so that a study can compute the sentence noise of a difference exactly
(study.significance.cross_entropy_covariance). A pair whose source or reference is empty is left out
of the loss (0 tokens), and each side is cut to `max_length` ids, as validation does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..core.runtime import autocast
from ..data.batches import batch_indices, collate, pair_lengths
from ..data.encode import encode_corpus, loss_pairs
from ..data.sources import Corpus
from ..data.tokenizer import Tokenizer
from ..data.tokens import PAD
from ..model.transformer import Transformer

ROWS_PER_BLOCK = 1024  # target positions widened to fp32 log-probabilities at once ([rows, V])


@dataclass
class CrossEntropy:
    """Per reference sentence (in corpus order): summed NLL in nats and target tokens (0: left out)."""

    nll: np.ndarray  # [N] float64
    tokens: np.ndarray  # [N] int64

    @property
    def per_token(self) -> float:
        """Nats per target token over the whole text."""
        return float(self.nll.sum() / self.tokens.sum())

    def summary(self, precision: str) -> dict:
        """What eval's JSON holds: nats per target token, perplexity, and what they were computed on."""
        return {
            "nats_per_token": round(self.per_token, 6),
            "perplexity": round(math.exp(min(self.per_token, 50.0)), 4),
            "tokens": int(self.tokens.sum()),
            "sentences": int(np.count_nonzero(self.tokens)),
            "left_out": int(np.count_nonzero(self.tokens == 0)),
            "precision": precision,
            "label_smoothing": 0.0,
        }


@torch.no_grad()
def reference_cross_entropy(
    model: Transformer,
    tokenizer: Tokenizer,
    corpus: Corpus,
    max_length: int,
    max_tokens: int,
    device: torch.device,
    precision: str,
) -> CrossEntropy:
    """Teacher-forced NLL of every reference of `corpus` under `model` (in `precision`, as validation
    computes its loss), batched by length as training batches are (`max_tokens`)."""
    model.eval()
    pairs = loss_pairs(encode_corpus(tokenizer, corpus, None), max_length)
    nll, tokens = np.zeros(len(corpus)), np.zeros(len(corpus), dtype=np.int64)
    with autocast(device, precision):
        for indices in batch_indices(pair_lengths(pairs), max_tokens):
            batch = collate(pairs, indices).to(device)
            per_token = _token_nll(model(batch.src, batch.tgt_in), batch.tgt_out)  # [B, T], 0 at PAD
            rows = pairs.index[indices]  # positions in the corpus
            nll[rows] = per_token.sum(dim=1).double().cpu().numpy()
            tokens[rows] = (batch.tgt_out != PAD).sum(dim=1).cpu().numpy()
    return CrossEntropy(nll, tokens)


def _token_nll(logits: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """logits [B, T, V], gold [B, T] → −log p(gold) [B, T] in fp32 (0 at PAD), a block of rows at a time
    so that no [B·T, V] fp32 tensor exists at once."""
    flat_logits, flat_gold = logits.reshape(-1, logits.size(-1)), gold.reshape(-1)
    out = torch.empty(flat_gold.shape, dtype=torch.float32, device=logits.device)
    for start in range(0, len(flat_gold), ROWS_PER_BLOCK):
        rows = slice(start, start + ROWS_PER_BLOCK)
        out[rows] = F.cross_entropy(flat_logits[rows].float(), flat_gold[rows], reduction="none", ignore_index=PAD)
    return out.view_as(gold)


def sentence_file_text(cross_entropy: CrossEntropy) -> str:
    """The per-sentence file eval writes beside its hypotheses: a header, then `nll<TAB>tokens` per line."""
    lines = ["nll\ttokens"] + [f"{n:.6f}\t{t}" for n, t in zip(cross_entropy.nll, cross_entropy.tokens)]
    return "\n".join(lines) + "\n"


def read_sentence_file(text: str) -> CrossEntropy:
    """The inverse of sentence_file_text (ValueError on a malformed file)."""
    rows = text.splitlines()
    if not rows or rows[0] != "nll\ttokens":
        raise ValueError("no 'nll<TAB>tokens' header")
    values = [row.split("\t") for row in rows[1:]]
    if any(len(v) != 2 for v in values):
        raise ValueError("a line without exactly two fields")
    return CrossEntropy(np.array([float(n) for n, _ in values]), np.array([int(t) for _, t in values], dtype=np.int64))
