"""Token ids of a split, stored compactly, and their on-disk cache.

A split's id sequences live in one flat array with offsets (`TokenTable`): sequence k is
`ids[offsets[k]:offsets[k + 1]]`, uint16 when the vocabulary fits, else uint32. At WMT14 size
(4.5M pairs) that is a few hundred MB instead of the GBs of Python lists of ints, and it can be
written once and memory-mapped by every later start and every process on the machine: the pages
are shared through the OS page cache.

The cache directory of one encoded split holds `{src,tgt}.ids.npy`, `{src,tgt}.offsets.npy`,
`index.npy` and `meta.json`; it is written under a temporary name and renamed into place, so a
reader sees either nothing or all of it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.files import current_umask

# The special ids: the tokenizer is trained to give them these ids (data.train_or_load_tokenizer), the
# model's embedding keeps PAD's row out of the gradient, batches pad with PAD, and decoding starts from
# BOS and stops at EOS.
PAD, UNK, BOS, EOS = 0, 1, 2, 3

CACHE_FORMAT = 1
ARRAYS = ("src.ids", "src.offsets", "tgt.ids", "tgt.offsets", "index")


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned type that holds every id of a vocabulary."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


class TokenTable:
    """Variable-length id sequences in one flat array: sequence k is ids[offsets[k]:offsets[k+1]].

    ids: [total tokens] uint16/uint32;  offsets: [n + 1] int64, offsets[0] = 0.
    """

    def __init__(self, ids: np.ndarray, offsets: np.ndarray):
        self.ids, self.offsets = ids, offsets

    @classmethod
    def from_lists(cls, seqs: Iterable[Iterable[int]], dtype=np.uint32) -> TokenTable:
        seqs = [np.asarray(s, dtype=dtype) for s in seqs]
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
        ids = np.concatenate(seqs) if seqs else np.zeros(0, dtype)
        return cls(ids.astype(dtype, copy=False), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))

    @classmethod
    def concat(cls, tables: list[TokenTable]) -> TokenTable:
        """The sequences of `tables`, in order, in one table (at least one table; all of one dtype).
        Copied into arrays sized up front, so nothing but the result is allocated."""
        ids = np.empty(sum(len(t.ids) for t in tables), dtype=tables[0].ids.dtype)
        offsets = np.empty(sum(len(t) for t in tables) + 1, dtype=np.int64)
        offsets[0] = at = n = 0
        for t in tables:
            ids[at : at + len(t.ids)] = t.ids
            np.add(t.offsets[1:], at, out=offsets[n + 1 : n + 1 + len(t)])
            at, n = at + len(t.ids), n + len(t)
        return cls(ids, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, k: int) -> list[int]:
        return self.ids[self.offsets[k] : self.offsets[k + 1]].tolist()

    def tolist(self) -> list[list[int]]:
        return [self[k] for k in range(len(self))]

    @property
    def lengths(self) -> np.ndarray:
        """[n] int64: the length of each sequence."""
        return np.diff(self.offsets)

    def select(self, rows: np.ndarray, max_length: int | None = None) -> TokenTable:
        """The sequences `rows`, in that order, each cut to `max_length` ids."""
        rows = np.asarray(rows, dtype=np.int64)
        starts = self.offsets[rows]
        lengths = self.offsets[rows + 1] - starts
        if max_length is not None:
            lengths = np.minimum(lengths, max_length)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return TokenTable(self.ids[_ranges(starts, lengths)], offsets)

    def padded(self, rows: list[int], pad: int, before: int | None = None, after: int | None = None) -> np.ndarray:
        """[len(rows), longest + extras] int64: the sequences `rows`, with the id `before` in front
        and `after` at the end of each when given, padded on the right with `pad`."""
        rows = np.asarray(rows, dtype=np.int64)
        starts = self.offsets[rows]
        lengths = self.offsets[rows + 1] - starts
        first = int(before is not None)
        width = int(lengths.max()) + first + int(after is not None)
        out = np.full((len(rows), width), pad, dtype=np.int64)
        columns = np.arange(width - first)
        inside = columns[None, :] < lengths[:, None]  # [B, width - first]: which cells hold ids
        out[:, first:][inside] = self.ids[(starts[:, None] + columns[None, :])[inside]]
        if before is not None:
            out[:, 0] = before
        if after is not None:
            out[np.arange(len(rows)), lengths + first] = after
        return out


def right_padded(seqs: list[list[int]], after: int | None = None) -> np.ndarray:
    """[len(seqs), longest (+ 1 with `after`)] int64: the sequences, each followed by the id `after` when
    given, padded on the right with PAD: the layout of every batch the model reads."""
    return TokenTable.from_lists(seqs, dtype=np.int64).padded(list(range(len(seqs))), PAD, after=after)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of arange(s, s + n) for each (s, n), without a Python loop."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    jumps = np.repeat(starts - (ends - lengths), lengths)  # where each range sits in the source
    return np.arange(total, dtype=np.int64) + jumps


@dataclass
class Encoded:
    """Token ids of one split; `index` maps each kept pair back to its line in the corpus."""

    src: TokenTable
    tgt: TokenTable
    index: np.ndarray  # [n] int64
    dropped_empty: int = 0
    dropped_long: int = 0
    name: str = field(default="", compare=False)  # where the text came from, for messages

    @classmethod
    def from_lists(cls, src: list[list[int]], tgt: list[list[int]], index: list[int]) -> Encoded:
        return cls(TokenTable.from_lists(src), TokenTable.from_lists(tgt), np.asarray(index, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.src)

    def lengths(self) -> np.ndarray:
        """[n] int64: the longer side of each pair + 1 (its EOS or BOS), what a batch's budget counts."""
        return np.maximum(self.src.lengths, self.tgt.lengths) + 1


# ----------------------------------------------------------------------------- the on-disk cache


def save_encoded(directory: Path, data: Encoded) -> None:
    """Write `data` as DIRECTORY (created whole by a rename; an existing one is left as it is)."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp", dir=directory.parent))
    os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes it private; other users of a shared cache_dir read it
    try:
        arrays = (data.src.ids, data.src.offsets, data.tgt.ids, data.tgt.offsets, data.index)
        for name, array in zip(ARRAYS, arrays):
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(array))
        meta = {
            "format": CACHE_FORMAT,
            "pairs": len(data),
            "dropped_empty": data.dropped_empty,
            "dropped_long": data.dropped_long,
            "name": data.name,
        }
        (tmp / "meta.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
        try:
            os.rename(tmp, directory)
        except OSError:  # another process wrote it first: theirs is as good
            if not (directory / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_encoded(directory: Path) -> Encoded | None:
    """The split cached in DIRECTORY, memory-mapped (read-only); None if there is no complete cache."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
        if meta.get("format") != CACHE_FORMAT:
            return None
        arrays = [np.load(directory / f"{name}.npy", mmap_mode="r") for name in ARRAYS]
    except (OSError, ValueError):
        return None
    src_ids, src_offsets, tgt_ids, tgt_offsets, index = arrays
    return Encoded(
        TokenTable(src_ids, src_offsets),
        TokenTable(tgt_ids, tgt_offsets),
        index,
        meta["dropped_empty"],
        meta["dropped_long"],
        meta.get("name", ""),
    )


def cache_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in Path(directory).iterdir() if p.is_file())
