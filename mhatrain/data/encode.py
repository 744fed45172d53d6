"""Sentence pairs to token ids: a corpus encoded in blocks into compact TokenTables, and the on-disk
cache of an encoded training set (keyed by the data, the tokenizer and the length limit).
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import numpy as np

from ..core.config import DataConfig
from .sources import Corpus
from .tokenizer import Tokenizer
from .tokens import Encoded, TokenTable, id_dtype

ENCODE_BLOCK = 50_000  # sentence pairs per SentencePiece call: bounds the Python lists alive at once


def encode_corpus(tokenizer: Tokenizer, corpus: Corpus, max_length: int | None, block: int = ENCODE_BLOCK) -> Encoded:
    """Tokenize a split. With `max_length`, empty and over-length pairs are dropped and counted.

    SentencePiece encodes each block of `block` pairs on all its threads; each block's ids go into
    flat arrays straight away, so the lists of Python ints never exist for the whole split. Each
    block is also filtered on its own: `TokenTable.select` indexes token by token with int64
    arrays (measured ~16 bytes a token at its peak), which on a whole WMT-size split came to
    ~3 GB on top of ~0.7 GB of ids.
    """
    dtype = id_dtype(tokenizer.vocab_size)
    blocks = [
        _encode_pairs(tokenizer, corpus.src[k : k + block], corpus.tgt[k : k + block], k, dtype, max_length)
        for k in range(0, max(len(corpus), 1), block)
    ]
    index = np.concatenate([b.index for b in blocks])
    dropped_empty, dropped_long = sum(b.dropped_empty for b in blocks), sum(b.dropped_long for b in blocks)
    src_blocks, tgt_blocks = [b.src for b in blocks], [b.tgt for b in blocks]
    del blocks  # each side's blocks are freed once joined, so only one side is ever held twice
    src = TokenTable.concat(src_blocks)
    del src_blocks
    tgt = TokenTable.concat(tgt_blocks)
    return Encoded(src, tgt, index, dropped_empty, dropped_long, corpus.name)


def loss_pairs(data: Encoded, max_length: int) -> Encoded:
    """The non-empty pairs of an evaluation split, each side cut to `max_length` ids: what a loss is
    computed on (BLEU is scored on every sentence)."""
    keep = np.flatnonzero((data.src.lengths > 0) & (data.tgt.lengths > 0))
    return Encoded(data.src.select(keep, max_length), data.tgt.select(keep, max_length), keep, name=data.name)


def _encode_pairs(
    tokenizer: Tokenizer, src: list[str], tgt: list[str], first: int, dtype, max_length: int | None
) -> Encoded:
    """The pairs of one block, encoded and (with `max_length`) filtered; `index` counts from `first`,
    the block's first line in the corpus."""
    src_ids, tgt_ids = _encode_block(tokenizer, src, dtype), _encode_block(tokenizer, tgt, dtype)
    if max_length is None:
        return Encoded(src_ids, tgt_ids, np.arange(first, first + len(src), dtype=np.int64))
    src_len, tgt_len = src_ids.lengths, tgt_ids.lengths
    empty = (src_len == 0) | (tgt_len == 0)
    long = ~empty & ((src_len > max_length) | (tgt_len > max_length))
    keep = np.flatnonzero(~empty & ~long)
    if len(keep) < len(src_ids):  # (no copy when every pair is kept)
        src_ids, tgt_ids = src_ids.select(keep), tgt_ids.select(keep)
    return Encoded(src_ids, tgt_ids, keep + first, int(empty.sum()), int(long.sum()))


def _encode_block(tokenizer: Tokenizer, texts: list[str], dtype) -> TokenTable:
    ids = tokenizer.encode(texts)
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum()))
    return TokenTable(flat, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))


def encoded_cache_dir(cfg: DataConfig, data_key: str, tokenizer: Tokenizer, max_length: int | None) -> Path:
    """Where the encoded training split is cached (next to the tokenizers, in data.cache_dir): keyed by
    the data (`train_data_key`), the tokenizer and the length filter."""
    key = repr((data_key, tokenizer.fingerprint(), max_length))
    return Path(cfg.cache_dir).expanduser() / "encoded" / hashlib.sha256(key.encode()).hexdigest()[:20]
