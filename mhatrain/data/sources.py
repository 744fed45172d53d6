"""Parallel text sources: where a split's sentence pairs come from, and a fingerprint of them.

Sources, chosen by the config:
  * a Hugging Face hub dataset (`data.dataset`), with per-language fields or `translation` dicts;
  * a local directory (`data.local_dir`) of `{split}.{lang}` text files, plain or gzipped,
    or `{split}.jsonl[.gz]` files of objects with one field per language (or a `translation` dict).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path

from ..core.config import Config, DataConfig
from ..core.errors import DataError
from ..core.provenance import files_record

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
        # here, not at the top: the hub client is slow to import, only hub data needs it, and `mhatrain
        # score` imports this module for local files
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
    # pyarrow comes with datasets (no dependency of ours) and only hub data needs it: see _open_hub
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
    import pyarrow as pa  # with datasets, for hub data only: see _load_hub

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


def load_train_corpus(cfg: DataConfig) -> Corpus:
    """The training split, cut to its first data.max_train_examples pairs when that is set."""
    corpus = load_split(cfg, cfg.train_split)
    if cfg.max_train_examples:
        keep = cfg.max_train_examples
        corpus = Corpus(corpus.name, corpus.src[:keep], corpus.tgt[:keep])
    return corpus


# ----------------------------------------------------------------------------- encoding and filtering


# ----------------------------------------------------------------------------- batches


def split_record(cfg, split: str) -> dict:
    """Where a split of the config's source comes from, without reading its sentences (the training data
    may come from the encoded cache): the sha256 of its local files, or the hub dataset's fingerprint."""

    if cfg.local_dir is not None:
        return files_record(*_local_files(Path(cfg.local_dir).expanduser(), split, cfg.src_lang, cfg.tgt_lang))
    return {"source": f"hub:{cfg.dataset}/{split}", "data_fingerprint": source_fingerprint(cfg, split)}
