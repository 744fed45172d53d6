"""Where our search spends a batch's time: torch.profiler over one batch of a run's test split.

    python scripts/profile_search.py RUN_DIR BEAM [BATCH] [THREADS] [SENTENCES] [PRECISION]

BATCH: the index of the batch among those `translate_ids` makes (length-sorted, decode.batch_tokens), or
"largest" (default); THREADS: torch threads (default 2); SENTENCES: the first N test sentences (default all);
PRECISION: fp32 (default) or int8 (the model quantized as `bench decode` does, inference.quantized).
Prints the batch's shape, one untimed run's seconds and tokens per sentence, then the operators by self
CPU time (docs/performance.md, "The realistic protocol on the EPYC").
"""

from __future__ import annotations

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from mhatrain.data.batches import batch_indices
from mhatrain.data.sources import load_split
from mhatrain.data.tokens import right_padded
from mhatrain.inference.quantized import quantized_model
from mhatrain.inference.search import batch_source_tokens, beam_search, source_ids
from mhatrain.inference.trained import load_run


def main(
    run_dir: str, beam: int, which: str = "largest", threads: int = 2, sentences: int = 0, precision: str = "fp32"
) -> None:
    torch.set_num_threads(threads)
    run = load_run(run_dir, overrides=[f"train.threads={threads}"])
    model, cfg = run.model, run.config.decode
    if precision == "int8":
        model = quantized_model(model)
    corpus = load_split(run.config.data, run.config.data.test_split)
    texts = corpus.src[:sentences] if sentences else corpus.src
    src_ids = [source_ids(s, model.cfg.max_positions) for s in run.tokenizer.encode(texts)]
    batches = batch_indices([len(s) for s in src_ids], batch_source_tokens(cfg, beam))
    pick = max(range(len(batches)), key=lambda i: len(batches[i])) if which == "largest" else int(which)
    src = torch.from_numpy(right_padded([src_ids[i] for i in batches[pick]]))
    print(f"batches: {[len(b) for b in batches]}; batch {pick}: {tuple(src.shape)}")
    started = time.perf_counter()
    hyps = beam_search(model, src, cfg, beam)
    lengths = [len(h) + 1 for h in hyps]
    print(
        f"one run {time.perf_counter() - started:.2f} s; tokens/sent {sum(lengths) / len(lengths):.1f}, max {max(lengths)}"
    )
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        beam_search(model, src, cfg, beam)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=40))


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    main(args[0], int(args[1]), *(args[2:3]), *(int(a) for a in args[3:5]), *(args[5:6]))
