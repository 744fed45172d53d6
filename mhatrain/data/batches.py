"""Length-bucketed token batches: which pairs go together (about max_tokens per batch), their padded
tensors, and a background prefetcher that collates the next batches while the current one trains.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import numpy as np
import torch

from .tokens import BOS, EOS, PAD, Encoded


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
