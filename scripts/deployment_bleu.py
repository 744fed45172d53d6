"""Test BLEU of a run exported for CTranslate2 (float32 and int8) against ours on the same checkpoint.

    python scripts/deployment_bleu.py RUN_DIR THREADS

The whole test split, the run's decode settings, greedy and the run's beam: ours in fp32 and int8
(inference.quantized), and the exported model in float32 and int8 (inference.deployment), each
with its seconds and how many translations equal ours in fp32; and how long CTranslate2 takes to
load each exported directory (docs/performance.md, "The exported model").
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time

from mhatrain.data.batches import batch_indices
from mhatrain.data.sources import load_split
from mhatrain.inference.deployment import Engine, export_ctranslate2
from mhatrain.inference.quantized import quantized_model
from mhatrain.inference.scoring import bleu_score
from mhatrain.inference.search import batch_source_tokens, translate_ids
from mhatrain.inference.trained import load_run

QUANTIZATIONS = ("float32", "int8")


def main(run_dir: str, threads: int) -> None:
    run = load_run(run_dir, overrides=[f"train.threads={threads}"])
    cfg = run.config.decode
    corpus = load_split(run.config.data, run.config.data.test_split)
    src = run.tokenizer.encode(corpus.src)

    def bleu(ids) -> float:
        return bleu_score(run.tokenizer.decode(ids), corpus.tgt)[0]

    for q in QUANTIZATIONS:
        out = f"/tmp/deployment-bleu-{q}"
        shutil.rmtree(out, ignore_errors=True)
        export_ctranslate2(run.model, run.tokenizer, out, q)
        loads = []
        for _ in range(3):
            started = time.perf_counter()
            Engine.load(out, threads=threads)
            loads.append(time.perf_counter() - started)
        print(f"export {q}: load {statistics.median(loads):.2f} s (median of 3)")
    for beam in (1, cfg.beam):
        started = time.perf_counter()
        ours = translate_ids(run.model, src, cfg, "cpu", beam)
        print(f"beam {beam} ours fp32: BLEU {bleu(ours):.2f} ({time.perf_counter() - started:.0f} s)")
        started = time.perf_counter()
        int8 = translate_ids(quantized_model(run.model), src, cfg, "cpu", beam)
        print(f"beam {beam} ours int8: BLEU {bleu(int8):.2f} ({time.perf_counter() - started:.0f} s)")
        order = batch_indices([len(s) + 1 for s in src], batch_source_tokens(cfg, beam))
        for q in QUANTIZATIONS:
            engine = Engine.load(f"/tmp/deployment-bleu-{q}", threads=threads)
            hyps = [None] * len(src)
            started = time.perf_counter()
            for indices in order:
                for i, hyp in zip(indices, engine.translate_ids([src[i] for i in indices], cfg, beam)):
                    hyps[i] = hyp
            seconds = time.perf_counter() - started
            same = sum(a == b for a, b in zip(hyps, ours))
            print(
                f"beam {beam} CTranslate2 {q} export: BLEU {bleu(hyps):.2f} ({seconds:.0f} s; "
                f"{same}/{len(src)} identical to ours fp32)"
            )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], int(sys.argv[2]))
