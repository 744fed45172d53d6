"""A run's data, ready to train on (`prepare_data`): the tokenizer trained or reused, the training split
encoded once and then mapped from the cache, the validation split encoded. The loop (loop.py) and
validation (validation.py) read what it returns, a `Prepared`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..core import provenance
from ..core.config import Config
from ..core.errors import DataError
from ..core.rundir import TOKENIZER_FILE
from ..data.encode import encode_corpus, encoded_cache_dir, loss_pairs
from ..data.sources import load_split, load_train_corpus, split_record
from ..data.tokenizer import Tokenizer, install_tokenizer, train_data_key, train_or_load_tokenizer
from ..data.tokens import Encoded, load_encoded, save_encoded


@dataclass
class Prepared:
    """A run's data, ready to train on: the tokenizer, the encoded training pairs (mapped from the
    cache), and the validation split as validation.py reads it."""

    tokenizer: Tokenizer
    train: Encoded
    valid: Encoded
    valid_refs: list[str]
    valid_src: list[list[int]]
    sources: dict  # "train", "valid": where the text came from (provenance.corpus_record)


def prepare_data(config: Config, run_dir: Path, log=print) -> Prepared:
    """Train or reuse the tokenizer, then map the encoded training split from the cache, or encode,
    filter and cache it first; encode the (small) validation split."""
    cfg = config.data
    data_key = train_data_key(cfg)
    existing = run_dir / TOKENIZER_FILE
    source = existing if existing.is_file() else train_or_load_tokenizer(cfg, log, data_key)
    tokenizer = install_tokenizer(source, run_dir)
    cache = encoded_cache_dir(cfg, data_key, tokenizer, cfg.max_length)
    train = load_encoded(cache)
    if train is not None:
        log(f"data: mapped the encoded training data from {cache}")
    else:
        started = time.perf_counter()
        corpus = load_train_corpus(cfg)
        encoded = encode_corpus(tokenizer, corpus, cfg.max_length)
        if len(encoded) == 0:
            raise DataError(f"{corpus.name}: no training pairs left after filtering")
        save_encoded(cache, encoded)
        del encoded, corpus  # the text and the arrays: from now on the cache's mapped pages serve
        train = load_encoded(cache)
        log(f"data: encoded the training data in {time.perf_counter() - started:.1f}s, cached in {cache}")
    valid_corpus = load_split(cfg, cfg.valid_split)
    log(
        f"data: {len(train)} training pairs kept of {len(train) + train.dropped_empty + train.dropped_long} "
        f"({train.dropped_empty} empty, {train.dropped_long} longer than {cfg.max_length} tokens dropped); "
        f"{len(valid_corpus)} validation pairs; vocabulary {tokenizer.vocab_size}"
    )
    valid = encode_corpus(tokenizer, valid_corpus, None)
    sources = {"train": split_record(cfg, cfg.train_split), "valid": provenance.corpus_record(valid_corpus)}
    return Prepared(tokenizer, train, loss_pairs(valid, cfg.max_length), valid_corpus.tgt, valid.src.tolist(), sources)
