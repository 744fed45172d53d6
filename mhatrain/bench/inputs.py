"""Inputs of the train and decode benches: real Multi30k batches from --data or the config's
data.local_dir, else synthetic ones with Multi30k-like lengths; the model config (shrunk by --quick).

Real data goes through the data module exactly as training does: the config's SentencePiece model
(trained once and cached, like `mhatrain train`), encoding, the max_length filter, and token-budget
batches from `batch_indices` with the config's train.max_tokens and seed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.config import Config
from ..core.errors import MhatrainError
from ..data.batches import Batch, batch_indices, collate, pair_lengths
from ..data.encode import encode_corpus
from ..data.sources import load_split
from ..data.tokenizer import Tokenizer, train_or_load_tokenizer
from ..data.tokens import EOS, Encoded, right_padded
from .options import QUICK_D_MODEL, BenchOptions

# --quick: a 2+2-layer d64 model, a 1,000-token vocabulary and small batches
QUICK_MODEL = {"d_model": QUICK_D_MODEL, "n_heads": 4, "d_ff": 128, "n_encoder_layers": 2, "n_decoder_layers": 2}
QUICK_VOCAB, QUICK_MAX_TOKENS = 1000, 256


def bench_config(options: BenchOptions) -> Config:
    """The config the bench measures: --config, shrunk by --quick."""
    config = options.load_config()
    if options.quick:
        config.model = dataclasses.replace(config.model, **QUICK_MODEL)
        config.data = dataclasses.replace(config.data, vocab_size=QUICK_VOCAB)
        config.train = dataclasses.replace(config.train, max_tokens=QUICK_MAX_TOKENS)
    return config


def data_dir(options: BenchOptions, config: Config) -> Path | None:
    """Where real text comes from, or None for synthetic input (always with --quick)."""
    if options.quick:
        return None
    if options.data_dir is not None:
        if not Path(options.data_dir).is_dir():
            raise MhatrainError(f"--data {options.data_dir}: not a directory")
        return Path(options.data_dir)
    if config.data.local_dir is not None and Path(config.data.local_dir).expanduser().is_dir():
        return Path(config.data.local_dir).expanduser()
    return None


def _with_local_dir(config: Config, directory: Path) -> Config:
    return dataclasses.replace(config, data=dataclasses.replace(config.data, local_dir=str(directory)))


def load_tokenizer(config: Config, directory: Path, log) -> Tokenizer:
    """The config's joint SentencePiece model for this data (cached in data.cache_dir)."""
    config = _with_local_dir(config, directory)
    return Tokenizer(train_or_load_tokenizer(config.data, log))


@dataclass
class TrainInputs:
    batches: list[Batch]
    vocab_size: int
    source: str  # where the batches came from, for the report


def training_batches(options: BenchOptions, config: Config, n_batches: int, log) -> TrainInputs:
    """`n_batches` token-budget batches (train.max_tokens) from the start of epoch 1's shuffled order."""
    directory = data_dir(options, config)
    if directory is None:
        encoded = synthetic_pairs(4000 if not options.quick else 200, config.data.vocab_size, options.seed)
        vocab, source = config.data.vocab_size, "synthetic Multi30k-like lengths"
    else:
        tokenizer = load_tokenizer(config, directory, log)
        corpus = load_split(_with_local_dir(config, directory).data, config.data.train_split)
        encoded = encode_corpus(tokenizer, corpus, config.data.max_length)
        vocab, source = tokenizer.vocab_size, f"{corpus.name} (train split)"
    order = batch_indices(pair_lengths(encoded), config.train.max_tokens, config.train.seed, 0)
    return TrainInputs([collate(encoded, indices) for indices in order[:n_batches]], vocab, source)


def synthetic_pairs(n: int, vocab_size: int, seed: int) -> Encoded:
    """Random token ids with Multi30k-like subword lengths: source ~ N(15, 5), target ≈ source + 2."""
    g = torch.Generator().manual_seed(seed)
    src_len = (torch.randn(n, generator=g) * 5 + 15).round().clamp(4, 40).long()
    tgt_len = (src_len + torch.randn(n, generator=g) * 3 + 2).round().clamp(4, 40).long()

    def ids(length: int) -> list[int]:
        return torch.randint(4, vocab_size, (length,), generator=g).tolist()

    return Encoded.from_lists([ids(int(s)) for s in src_len], [ids(int(t)) for t in tgt_len], list(range(n)))


def test_sources(
    options: BenchOptions, config: Config, tokenizer: Tokenizer | None, n: int, log
) -> tuple[list[list[int]], str, list[str] | None]:
    """Token ids of the test split (config's data.test_split, test_2016_flickr for Multi30k) or
    synthetic sources, at most `n` sentences (0 = all); where they came from; their references
    (None for synthetic sources)."""
    directory = data_dir(options, config)
    if directory is None or tokenizer is None:
        sources = synthetic_pairs(n or 1000, config.data.vocab_size, options.seed).src
        return sources, "synthetic Multi30k-like lengths", None
    corpus = load_split(_with_local_dir(config, directory).data, config.data.test_split)
    texts = corpus.src[:n] if n else corpus.src
    references = corpus.tgt[: len(texts)]
    return tokenizer.encode(texts), f"{corpus.name} ({len(texts)} sentences)", references


def pad_sources(sources: list[list[int]]) -> torch.Tensor:
    """[B, S] ids + EOS, right-padded, as `decode.translate_ids` builds them."""
    return torch.from_numpy(right_padded(sources, after=EOS))
