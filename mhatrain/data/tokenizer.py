"""The joint SentencePiece model of source and target: trained once per training data (and cached
under data.cache_dir), installed into each run directory as spm.model.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import sentencepiece as spm

from ..core.config import DataConfig
from ..core.errors import DataError
from ..core.files import atomic_write
from ..core.rundir import TOKENIZER_FILE
from .sources import load_train_corpus, source_fingerprint
from .tokens import BOS, EOS, PAD, UNK


class Tokenizer:
    """A joint SentencePiece model with pad=0, unk=1, bos=2, eos=3."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.sp = spm.SentencePieceProcessor(model_file=str(path))
        except (OSError, RuntimeError) as exc:
            raise DataError(f"cannot load tokenizer {path}: {str(exc).splitlines()[0]}") from None

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts)  # a list is encoded on all of SentencePiece's threads

    def decode(self, ids: list[list[int]]) -> list[str]:
        return self.sp.decode(ids)

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.sp.id_to_piece(i) for i in ids]

    def fingerprint(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]


def train_data_key(cfg: DataConfig) -> str:
    """What the tokenizer and the encoded-data caches are keyed by: the training split's source data
    (`source_fingerprint`) and how much of it is used. Found without reading any sentence."""
    return f"{source_fingerprint(cfg, cfg.train_split)}-{cfg.max_train_examples}"


def train_or_load_tokenizer(cfg: DataConfig, log=print, data_key: str | None = None) -> Path:
    """Return a cached SentencePiece model for this training data (`train_data_key`) and these
    settings, training it on the training split when there is none."""
    settings = (cfg.vocab_size, cfg.tokenizer_type, cfg.character_coverage, cfg.tokenizer_sample)
    key = repr((data_key or train_data_key(cfg), settings))
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    cache = Path(cfg.cache_dir).expanduser() / "spm" / digest / "spm.model"
    if cache.is_file():
        log(f"tokenizer: reusing cached {cache}")
        return cache
    train = load_train_corpus(cfg)
    sentences = [s for s in (*train.src, *train.tgt) if s.strip()]
    buffer = io.BytesIO()
    log(
        f"tokenizer: training {cfg.tokenizer_type} SentencePiece, vocab {cfg.vocab_size}, on {len(sentences)} sentences"
    )
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=buffer,
            vocab_size=cfg.vocab_size,
            model_type=cfg.tokenizer_type,
            character_coverage=cfg.character_coverage,
            input_sentence_size=cfg.tokenizer_sample,
            shuffle_input_sentence=True,
            hard_vocab_limit=False,
            pad_id=PAD,
            unk_id=UNK,
            bos_id=BOS,
            eos_id=EOS,
            num_threads=2,
            minloglevel=2,
        )
    except RuntimeError as exc:
        raise DataError(f"SentencePiece training failed: {str(exc).splitlines()[0]}") from None
    atomic_write(cache, lambda f: f.write(buffer.getvalue()), binary=True)
    return cache


def install_tokenizer(source: Path, run_dir: Path) -> Tokenizer:
    """Copy the tokenizer into the run directory so the run is self-contained."""
    target = run_dir / TOKENIZER_FILE
    data = Path(source).read_bytes()
    if not target.exists() or target.read_bytes() != data:
        atomic_write(target, lambda f: f.write(data), binary=True)  # a kill mid-copy must not leave half a model
    return Tokenizer(target)
