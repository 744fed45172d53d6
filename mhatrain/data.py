"""Data: parallel text sources, the joint SentencePiece model, and length-bucketed token batches.

Sources, chosen by the config:
  * a Hugging Face hub dataset (`data.dataset`), with per-language fields or `translation` dicts;
  * a local directory (`data.local_dir`) of `{split}.{lang}` text files, plain or gzipped,
    or `{split}.jsonl[.gz]` files of objects with one field per language (or a `translation` dict).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import json
import logging
import queue
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from .checkpoint import TOKENIZER_FILE
from .config import Config, DataConfig
from .errors import DataError
from .tokens import (  # noqa: F401  (Encoded: the type callers build batches from; the special ids, for callers)
    BOS,
    EOS,
    PAD,
    UNK,
    Encoded,
    TokenTable,
    id_dtype,
)

# Other names the same split often has on disk (Multi30k's raw release, WMT dev sets, ...).
SPLIT_ALIASES = {
    "validation": ("val", "valid", "dev"),
    "val": ("validation", "valid", "dev"),
    "test": ("test_2016_flickr", "test2016", "tst"),
}


@dataclass
class Corpus:
    """Raw sentence pairs of one split, aligned line by line."""

    name: str  # where it came from, for messages
    src: list[str]
    tgt: list[str]
    files: tuple[Path, ...] = ()  # the local files read (provenance hashes them)
    hub_fingerprint: str | None = None  # a hub dataset's fingerprint (its content hash, from `datasets`)

    def __len__(self) -> int:
        return len(self.src)

    def head(self, n: int) -> Corpus:
        """The first n pairs, from the same source."""
        return replace(self, src=self.src[:n], tgt=self.tgt[:n])


# ----------------------------------------------------------------------------- sources


def split_name(config: Config, split: str) -> str:
    """Map train/valid/test to the data source's split names (data.train_split, ...); other names pass through."""
    return {
        "train": config.data.train_split,
        "valid": config.data.valid_split,
        "validation": config.data.valid_split,
        "test": config.data.test_split,
    }.get(split, split)


def check_splits(config: Config, splits) -> None:
    """Read each of `splits` (train, valid, test or a source's own names) whole, so that a missing or broken
    file fails before anything trains, not when a long run comes to evaluate on it."""
    for split in splits:
        load_split(config.data, split_name(config, split))


def load_split(cfg: DataConfig, split: str) -> Corpus:
    """Load one split (by its name in the source) as raw text pairs."""
    if cfg.local_dir is not None:
        corpus = _load_local(Path(cfg.local_dir).expanduser(), split, cfg.src_lang, cfg.tgt_lang)
    else:
        corpus = _load_hub(cfg, split)
    if len(corpus) == 0:
        raise DataError(f"{corpus.name}: split '{split}' has no sentence pairs")
    return corpus


def _load_local(root: Path, split: str, src_lang: str, tgt_lang: str) -> Corpus:
    files = _local_files(root, split, src_lang, tgt_lang)
    if len(files) == 1:
        return _load_jsonl(files[0], src_lang, tgt_lang)
    src_file, tgt_file = files
    src, tgt = read_lines(src_file), read_lines(tgt_file)
    if len(src) != len(tgt):
        raise DataError(f"line counts differ: {src_file} has {len(src)} lines, {tgt_file} has {len(tgt)}")
    return Corpus(f"{src_file}+{tgt_file.name}", src, tgt, files=(src_file, tgt_file))


def _local_files(root: Path, split: str, src_lang: str, tgt_lang: str) -> list[Path]:
    """The files that hold a split: [source, target] text files, or [one JSON-lines file]."""
    for name in (split, *SPLIT_ALIASES.get(split, ())):
        src_file, tgt_file = _find(root, f"{name}.{src_lang}"), _find(root, f"{name}.{tgt_lang}")
        if src_file and tgt_file:
            return [src_file, tgt_file]
        if src_file or tgt_file:
            present = src_file or tgt_file
            missing = f"{name}.{tgt_lang if src_file else src_lang}[.gz]"
            raise DataError(f"{root}: found {present.name} but not its pair {missing}")
        jsonl = _find(root, f"{name}.jsonl")
        if jsonl:
            return [jsonl]
    raise DataError(
        f"{root}: no files for split '{split}' (looked for {split}.{src_lang}[.gz] + "
        f"{split}.{tgt_lang}[.gz] or {split}.jsonl[.gz])"
    )


def _find(root: Path, name: str) -> Path | None:
    for candidate in (root / name, root / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def read_lines(path: Path) -> list[str]:
    """Read a UTF-8 text file (gzipped if it ends in .gz), one sentence per line."""
    try:
        raw = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as exc:
        raise DataError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if b"\x00" in raw:
        raise DataError(f"{path}: binary file (contains NUL bytes), expected UTF-8 text")
    try:
        text = raw.decode("utf-8")  # at once: a line-by-line loop is slow at WMT size
    except UnicodeDecodeError as exc:
        line_start = raw.rfind(b"\n", 0, exc.start) + 1
        number = raw.count(b"\n", 0, exc.start) + 1
        raise DataError(f"{path}:{number}: not valid UTF-8 (byte {exc.start - line_start})") from None
    del raw  # one copy of the file less at the peak
    out = text.split("\n")
    if out and out[-1] == "":
        out.pop()
    if "\r" in text:
        out = [line.rstrip("\r") for line in out]
    if not out:
        raise DataError(f"{path}: file is empty")
    return out


def _load_jsonl(path: Path, src_lang: str, tgt_lang: str) -> Corpus:
    src, tgt = [], []
    for number, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: invalid JSON: {exc.msg}") from None
        s, t = _pair_from_row(row, src_lang, tgt_lang, f"{path}:{number}")
        src.append(s)
        tgt.append(t)
    return Corpus(str(path), src, tgt, files=(path,))


def _pair_from_row(row, src_lang: str, tgt_lang: str, where: str) -> tuple[str, str]:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected an object with fields '{src_lang}' and '{tgt_lang}'")
    fields = row.get("translation", row)
    if not isinstance(fields, dict):
        raise DataError(f"{where}: 'translation' must be an object")
    for lang in (src_lang, tgt_lang):
        if lang not in fields:
            raise DataError(f"{where}: missing language field '{lang}' (fields: {', '.join(map(str, fields))})")
        if not isinstance(fields[lang], str):
            raise DataError(f"{where}: field '{lang}' must be a string")
    return fields[src_lang], fields[tgt_lang]


# The hub client's logger of HTTP retries: an unreachable hub is one warning per try (11 lines) before
# the error, which the one-line DataError below quotes.
HUB_RETRY_LOGGER = "huggingface_hub.utils._http"


def _open_hub(cfg: DataConfig, split: str):
    retries = logging.getLogger(HUB_RETRY_LOGGER)
    level = retries.level
    try:
        import datasets

        retries.setLevel(logging.ERROR)
        ds = datasets.load_dataset(cfg.dataset, cfg.dataset_config, split=split)
    except Exception as exc:  # the hub raises many types; all mean "cannot load this"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(
            f"cannot load hub dataset '{cfg.dataset}' split '{split}': {first} "
            f"(to train offline, set data.local_dir to a directory of text files)"
        ) from None
    finally:
        retries.setLevel(level)
    # Columns are read from the Arrow table itself, which must then be in row order.
    return ds.flatten_indices() if getattr(ds, "_indices", None) is not None else ds


def _load_hub(cfg: DataConfig, split: str) -> Corpus:
    import pyarrow as pa
    import pyarrow.compute as pc

    ds = _open_hub(cfg, split)
    columns = set(ds.column_names)
    name = f"hub:{cfg.dataset}/{split}"
    fingerprint = getattr(ds, "_fingerprint", None)
    if {cfg.src_lang, cfg.tgt_lang} <= columns:
        src, tgt = (_hub_strings(ds.data.column(lang), name, lang) for lang in (cfg.src_lang, cfg.tgt_lang))
        return Corpus(name, src, tgt, hub_fingerprint=fingerprint)
    if "translation" in columns:
        nested = ds.data.column("translation")
        fields = [f.name for f in nested.type] if pa.types.is_struct(nested.type) else None
        if fields is None:
            raise DataError(f"{name}: 'translation' must hold objects, got {nested.type}")
        for lang in (cfg.src_lang, cfg.tgt_lang):
            if lang not in fields:
                raise DataError(
                    f"{name}: missing language field '{lang}' in 'translation' (fields: {', '.join(fields)})"
                )
        if nested.null_count:
            raise DataError(f"{name}: {nested.null_count} rows have no 'translation'")
        src, tgt = (
            _hub_strings(pc.struct_field(nested, lang), name, f"translation.{lang}")
            for lang in (cfg.src_lang, cfg.tgt_lang)
        )
        return Corpus(name, src, tgt, hub_fingerprint=fingerprint)
    raise DataError(
        f"{name}: no fields '{cfg.src_lang}'/'{cfg.tgt_lang}' or 'translation' (columns: {', '.join(sorted(columns))})"
    )


def _hub_strings(column, name: str, field_name: str) -> list[str]:
    """A hub column of strings as a list, read from its Arrow buffers at once (not row by row)."""
    import pyarrow as pa

    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise DataError(f"{name}: field '{field_name}' must hold strings, got {column.type}")
    if column.null_count:
        raise DataError(f"{name}: field '{field_name}' is missing in {column.null_count} rows")
    return column.to_pylist()


def source_fingerprint(cfg: DataConfig, split: str) -> str:
    """A digest of the split's source data: the bytes of its local files, or the hub dataset's own
    fingerprint. Cheap next to reading the text: it keys caches before any sentence is decoded."""
    key = hashlib.sha256(repr((cfg.src_lang, cfg.tgt_lang)).encode())
    if cfg.local_dir is not None:
        for path in _local_files(Path(cfg.local_dir).expanduser(), split, cfg.src_lang, cfg.tgt_lang):
            key.update(path.name.encode() + b"\x00")
            with open(path, "rb") as f:
                while block := f.read(1 << 24):
                    key.update(block)
    else:
        ds = _open_hub(cfg, split)
        key.update(f"hub:{cfg.dataset}/{cfg.dataset_config}/{split}/{getattr(ds, '_fingerprint', '')}".encode())
    return key.hexdigest()[:20]


# ----------------------------------------------------------------------------- tokenizer


class Tokenizer:
    """A joint SentencePiece model with pad=0, unk=1, bos=2, eos=3."""

    def __init__(self, path: Path):
        import sentencepiece as spm

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


def load_train_corpus(cfg: DataConfig) -> Corpus:
    """The training split, cut to its first data.max_train_examples pairs when that is set."""
    corpus = load_split(cfg, cfg.train_split)
    if cfg.max_train_examples:
        keep = cfg.max_train_examples
        corpus = Corpus(corpus.name, corpus.src[:keep], corpus.tgt[:keep])
    return corpus


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
    import sentencepiece as spm

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
    from .io import atomic_write

    atomic_write(cache, lambda f: f.write(buffer.getvalue()), binary=True)
    return cache


def install_tokenizer(source: Path, run_dir: Path) -> Tokenizer:
    """Copy the tokenizer into the run directory so the run is self-contained."""
    from .io import atomic_write

    target = run_dir / TOKENIZER_FILE
    data = Path(source).read_bytes()
    if not target.exists() or target.read_bytes() != data:
        atomic_write(target, lambda f: f.write(data), binary=True)  # a kill mid-copy must not leave half a model
    return Tokenizer(target)


# ----------------------------------------------------------------------------- encoding and filtering

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


# ----------------------------------------------------------------------------- batches


@dataclass
class Batch:
    """Padded tensors of one batch.

    src: [B, S] source ids + EOS;  tgt_in: [B, T] BOS + target ids;  tgt_out: [B, T] target ids + EOS.
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    indices: list[int]  # positions in the Encoded split
    # (target tokens, padding cells) counted on the host when the batch is made, so that reading them
    # later never waits for a device (None: counted on first use)
    counts: tuple[int, int] | None = None

    def __post_init__(self):
        if self.counts is None and self.src.device.type == "cpu":
            tgt_real = int(np.count_nonzero(self.tgt_out.numpy() != PAD))
            src_pad = int(np.count_nonzero(self.src.numpy() == PAD))
            self.counts = (tgt_real, src_pad + self.tgt_out.numel() - tgt_real)

    def _counts(self) -> tuple[int, int]:
        if self.counts is None:  # a batch built on a device: one read
            tgt_real, src_pad = (int(n) for n in torch.stack([(self.tgt_out != PAD).sum(), (self.src == PAD).sum()]))
            self.counts = (tgt_real, src_pad + self.tgt_out.numel() - tgt_real)
        return self.counts

    @property
    def n_tgt_tokens(self) -> int:
        return self._counts()[0]

    @property
    def padding_cells(self) -> tuple[int, int]:
        """(padding cells, all cells) over source and target tensors."""
        return self._counts()[1], self.src.numel() + self.tgt_out.numel()

    def to(self, device, non_blocking: bool = False) -> Batch:
        return Batch(
            *(t.to(device, non_blocking=non_blocking) for t in (self.src, self.tgt_in, self.tgt_out)),
            self.indices,
            self.counts,
        )

    def pin_memory(self) -> Batch:
        return Batch(
            self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory(), self.indices, self.counts
        )

    def padded_to(self, length: int) -> Batch:
        """The batch with source and target padded on the right to `length` positions (at least their
        own): padding changes no result (PAD keys are masked, PAD targets are outside the loss), and
        batches of one padded length share one compiled graph (see bucket_length)."""
        src, tgt_in, tgt_out = (
            torch.nn.functional.pad(t, (0, max(0, length - t.size(1))), value=PAD)
            for t in (self.src, self.tgt_in, self.tgt_out)
        )
        return Batch(src, tgt_in, tgt_out, self.indices)


def bucket_length(length: int, limit: int) -> int:
    """The padded length of a batch whose longest side has `length` positions, with train.compile: the
    next multiple of 16 up to 64, then the next power of two, never above `limit` (the model's
    max_positions). Few lengths (Multi30k's batches fall in 5), so few graphs to compile, each of which
    takes tens of seconds; short batches, the common ones, gain at most 15 positions of padding."""
    padded = -(-length // 16) * 16 if length <= 64 else 1 << (length - 1).bit_length()
    return max(length, min(padded, limit))


def bucket_lengths(limit: int) -> list[int]:
    """Every length bucket_length can return for lengths up to `limit`."""
    return sorted({bucket_length(n, limit) for n in range(1, limit + 1)})


def batch_indices(lengths, max_tokens: int, seed: int | None = None, epoch: int = 0) -> list[list[int]]:
    """Group examples into batches of at most `max_tokens` (sentences × longest length).

    Examples are sorted by length so that batches hold similar lengths (little padding). With a
    seed, ties are broken and the batch order is shuffled from (seed, epoch): deterministic, so a
    resumed run sees the same batches. Without a seed the order is sorted (for evaluation).
    A batch takes examples in sorted order while (its size) × (the newest, longest length) stays
    within the budget; an example longer than the budget makes a batch of its own.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if seed is not None:
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(len(lengths), generator=g).numpy()
    else:
        order = np.arange(len(lengths))
    order = order[np.argsort(lengths[order], kind="stable")]  # stable: random tie-breaking when shuffled
    sorted_lengths = lengths[order]
    batches, start = [], 0
    while start < len(order):
        # Lengths only grow along `order`, so the cost of taking k examples, k × length of the k-th,
        # grows with k: the batch ends before the first k over budget (and holds at least one).
        window = sorted_lengths[start : start + max(1, max_tokens // max(int(sorted_lengths[start]), 1)) + 1]
        cost = window * np.arange(1, len(window) + 1)
        size = max(1, int(np.searchsorted(cost, max_tokens, side="right")))
        batches.append(order[start : start + size].tolist())
        start += size
    if seed is not None:
        perm = torch.randperm(len(batches), generator=g).tolist()
        batches = [batches[p] for p in perm]
    return batches


def collate(data: Encoded, indices: list[int], bucket_limit: int = 0) -> Batch:
    """The batch of `indices`; with `bucket_limit` (train.compile: the model's max_positions) source and
    target padded to one bucket length (bucket_length of the longer side)."""
    src = data.src.padded(indices, PAD, after=EOS)
    tgt_in = data.tgt.padded(indices, PAD, before=BOS)
    tgt_out = data.tgt.padded(indices, PAD, after=EOS)
    batch = Batch(*map(torch.from_numpy, (src, tgt_in, tgt_out)), list(indices))
    if bucket_limit:
        batch = batch.padded_to(bucket_length(max(src.shape[1], tgt_in.shape[1]), bucket_limit))
    return batch


def batch_sizes(data: Encoded, batches: list[list[int]], bucket_limit: int = 0) -> tuple[int, int, int]:
    """(target tokens, padding cells, all cells) of these batches together, as their collated Batches
    count them (`collate` with the same `bucket_limit`), from the pairs' lengths alone."""
    tokens = pad = cells = 0
    for indices in batches:
        src, tgt = data.src.lengths[indices] + 1, data.tgt.lengths[indices] + 1  # + EOS (BOS)
        width = int(src.max()) + int(tgt.max())
        if bucket_limit:
            width = 2 * bucket_length(max(int(src.max()), int(tgt.max())), bucket_limit)
        tokens += int(tgt.sum())
        cells += len(indices) * width
        pad += len(indices) * width - int(src.sum()) - int(tgt.sum())
    return tokens, pad, cells


def pair_lengths(data: Encoded) -> np.ndarray:
    """[n] int64: each pair's length as a batch's budget counts it (longer side + 1)."""
    return data.lengths()


class Prefetcher:
    """`make(item)` for each of `items`, in order, computed ahead on a background thread (at most
    `depth` results waiting), so that building batches overlaps the training step. A context
    manager: leaving it stops the thread. An exception in `make` is raised by `next()`.
    """

    def __init__(self, make, items, depth: int = 2):
        self._queue: queue.Queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._fill, args=(make, list(items)), daemon=True, name="mhatrain-prefetch"
        )
        self._thread.start()

    def _fill(self, make, items) -> None:
        try:
            for item in items:
                if not self._put((True, make(item))):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            self._put((False, exc))

    def _put(self, entry) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self):
        return self

    def __next__(self):
        ok, value = self._queue.get()
        if not ok:
            raise value
        return value

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
