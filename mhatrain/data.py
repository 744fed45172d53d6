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
import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .config import DataConfig
from .errors import DataError

PAD, UNK, BOS, EOS = 0, 1, 2, 3

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

    def head(self, n: int) -> "Corpus":
        """The first n pairs, from the same source."""
        return replace(self, src=self.src[:n], tgt=self.tgt[:n])


# ----------------------------------------------------------------------------- sources


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
    for name in (split, *SPLIT_ALIASES.get(split, ())):
        src_file, tgt_file = _find(root, f"{name}.{src_lang}"), _find(root, f"{name}.{tgt_lang}")
        if src_file and tgt_file:
            src, tgt = read_lines(src_file), read_lines(tgt_file)
            if len(src) != len(tgt):
                raise DataError(
                    f"line counts differ: {src_file} has {len(src)} lines, {tgt_file} has {len(tgt)}"
                )
            return Corpus(f"{src_file}+{tgt_file.name}", src, tgt, files=(src_file, tgt_file))
        if src_file or tgt_file:
            present = src_file or tgt_file
            missing = f"{name}.{tgt_lang if src_file else src_lang}[.gz]"
            raise DataError(f"{root}: found {present.name} but not its pair {missing}")
        jsonl = _find(root, f"{name}.jsonl")
        if jsonl:
            return _load_jsonl(jsonl, src_lang, tgt_lang)
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
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for number, line in enumerate(lines, 1):
        try:
            out.append(line.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}:{number}: not valid UTF-8 (byte {exc.start})") from None
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


def _load_hub(cfg: DataConfig, split: str) -> Corpus:
    try:
        import datasets

        ds = datasets.load_dataset(cfg.dataset, cfg.dataset_config, split=split)
    except Exception as exc:  # the hub raises many types; all mean "cannot load this"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(
            f"cannot load hub dataset '{cfg.dataset}' split '{split}': {first} "
            f"(to train offline, set data.local_dir to a directory of text files)"
        ) from None
    columns = set(ds.column_names)
    name = f"hub:{cfg.dataset}/{split}"
    fingerprint = getattr(ds, "_fingerprint", None)
    if {cfg.src_lang, cfg.tgt_lang} <= columns:
        return Corpus(name, list(ds[cfg.src_lang]), list(ds[cfg.tgt_lang]), hub_fingerprint=fingerprint)
    if "translation" in columns:
        pairs = [_pair_from_row(r, cfg.src_lang, cfg.tgt_lang, f"{name} row {i}") for i, r in enumerate(ds["translation"])]
        return Corpus(name, [p[0] for p in pairs], [p[1] for p in pairs], hub_fingerprint=fingerprint)
    raise DataError(
        f"{name}: no fields '{cfg.src_lang}'/'{cfg.tgt_lang}' or 'translation' (columns: {', '.join(sorted(columns))})"
    )


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
        return self.sp.encode(texts)

    def decode(self, ids: list[list[int]]) -> list[str]:
        return self.sp.decode(ids)

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.sp.id_to_piece(i) for i in ids]

    def fingerprint(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]


def train_or_load_tokenizer(cfg: DataConfig, train: Corpus, log=print) -> Path:
    """Return a cached SentencePiece model for this training data and these settings."""
    key = hashlib.sha256()
    for text in (*train.src, "\x00", *train.tgt):
        key.update(text.encode("utf-8"))
        key.update(b"\n")
    settings = (cfg.vocab_size, cfg.tokenizer_type, cfg.character_coverage, cfg.tokenizer_sample)
    key.update(repr(settings).encode())
    digest = key.hexdigest()[:20]
    cache = Path(cfg.cache_dir).expanduser() / "spm" / digest / "spm.model"
    if cache.is_file():
        log(f"tokenizer: reusing cached {cache}")
        return cache
    import sentencepiece as spm

    sentences = [s for s in (*train.src, *train.tgt) if s.strip()]
    buffer = io.BytesIO()
    log(f"tokenizer: training {cfg.tokenizer_type} SentencePiece, vocab {cfg.vocab_size}, on {len(sentences)} sentences")
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
            pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
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

    target = run_dir / "spm.model"
    data = Path(source).read_bytes()
    if not target.exists() or target.read_bytes() != data:
        atomic_write(target, lambda f: f.write(data), binary=True)  # a kill mid-copy must not leave half a model
    return Tokenizer(target)


# ----------------------------------------------------------------------------- encoding and filtering


@dataclass
class Encoded:
    """Token ids of one split; `index` maps each kept pair back to its line in the corpus."""

    src: list[list[int]]
    tgt: list[list[int]]
    index: list[int]
    dropped_empty: int = 0
    dropped_long: int = 0

    def __len__(self) -> int:
        return len(self.src)


def encode_corpus(tokenizer: Tokenizer, corpus: Corpus, max_length: int | None) -> Encoded:
    """Tokenize a split. With `max_length`, empty and over-length pairs are dropped and counted."""
    src, tgt = tokenizer.encode(corpus.src), tokenizer.encode(corpus.tgt)
    if max_length is None:
        return Encoded(src, tgt, list(range(len(src))))
    out = Encoded([], [], [])
    for i, (s, t) in enumerate(zip(src, tgt)):
        if not s or not t:
            out.dropped_empty += 1
        elif len(s) > max_length or len(t) > max_length:
            out.dropped_long += 1
        else:
            out.src.append(s)
            out.tgt.append(t)
            out.index.append(i)
    return out


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

    @property
    def n_tgt_tokens(self) -> int:
        return int((self.tgt_out != PAD).sum())

    @property
    def padding_cells(self) -> tuple[int, int]:
        """(padding cells, all cells) over source and target tensors."""
        pad = int((self.src == PAD).sum()) + int((self.tgt_out == PAD).sum())
        return pad, self.src.numel() + self.tgt_out.numel()

    def to(self, device) -> "Batch":
        return Batch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device), self.indices)


def batch_indices(lengths: list[int], max_tokens: int, seed: int | None = None, epoch: int = 0) -> list[list[int]]:
    """Group examples into batches of at most `max_tokens` (sentences × longest length).

    Examples are sorted by length so that batches hold similar lengths (little padding). With a
    seed, ties are broken and the batch order is shuffled from (seed, epoch): deterministic, so a
    resumed run sees the same batches. Without a seed the order is sorted (for evaluation).
    """
    if seed is not None:
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(len(lengths), generator=g).tolist()
    else:
        order = list(range(len(lengths)))
    order.sort(key=lambda i: lengths[i])  # stable: random tie-breaking when shuffled
    batches, current, longest = [], [], 0
    for i in order:
        longest_if_added = max(longest, lengths[i])
        if current and longest_if_added * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest_if_added = [], lengths[i]
        current.append(i)
        longest = longest_if_added
    if current:
        batches.append(current)
    if seed is not None:
        perm = torch.randperm(len(batches), generator=g).tolist()
        batches = [batches[p] for p in perm]
    return batches


def collate(data: Encoded, indices: list[int]) -> Batch:
    def pad(seqs: list[list[int]]) -> torch.Tensor:
        out = torch.full((len(seqs), max(len(s) for s in seqs)), PAD, dtype=torch.long)
        for row, seq in enumerate(seqs):
            out[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        return out

    src = pad([data.src[i] + [EOS] for i in indices])
    tgt_in = pad([[BOS] + data.tgt[i] for i in indices])
    tgt_out = pad([data.tgt[i] + [EOS] for i in indices])
    return Batch(src, tgt_in, tgt_out, indices)


def pair_lengths(data: Encoded) -> list[int]:
    return [max(len(s), len(t)) + 1 for s, t in zip(data.src, data.tgt)]
