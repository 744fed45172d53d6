#!/bin/bash
# Learned head gates on Multi30k (issue "heads that choose themselves"): a trained h=8 (the head-count study's
# base config, seed 1, its checkpoint selected by validation loss), then `mhatrain prune` per L0 penalty until
# the gates settle, importance pruning at the same open-head counts and the grid beside them, then the light
# files copied here. Every step resumes: rerun the script after an interruption (runs/ keeps the state).
# PRECISION: fp32 where bf16 is emulated (grep -o 'avx512_bf16\|amx' /proc/cpuinfo prints nothing), else bf16.
# Usage: bash results/prune-multi30k/scripts/run.sh   (from anywhere; about 1.5 h of training and 4 fine-tunes
# of 600 updates each, about 20 minutes apiece on a quiet 2-core CPU).
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT" || exit 1
PY="$ROOT/.venv/bin/python"
RUN=runs/h8-seed1
PRUNE=runs/h8-seed1-prune
OUT=results/prune-multi30k
"$PY" -m mhatrain train results/ablate-multi30k/base-config.yaml --out "$RUN" --resume \
  --set train.precision="${PRECISION:-fp32}" --set train.early_stop_metric=loss --set train.valid_bleu=false \
  --set train.seed=1 || exit 1
[ -f "$RUN/eval/test.beam4.json" ] || "$PY" -m mhatrain eval "$RUN" --split test || exit 1
# Every λ fine-tunes exactly 600 updates (--min-updates = --max-updates), so λ = 0 is the unpruned baseline
# trained as long as the others; each run reports whether its gates had settled there. The λs run in the
# order given: the range first, so that an interrupted session already spans it.
"$PY" -m mhatrain prune "$RUN" --l0 0,0.03,0.3,0.1 --min-updates 600 --max-updates 600 --out "$PRUNE" \
  --grid results/ablate-multi30k || exit 1
mkdir -p "$OUT" || exit 1
cp "$PRUNE"/prune.yaml "$PRUNE"/report.md "$PRUNE"/report.json "$PRUNE"/importance.json "$PRUNE"/*.png "$OUT"/ || exit 1
for run in "$PRUNE"/l0=*; do
  mkdir -p "$OUT/$(basename "$run")" && cp "$run"/outcome.json "$run"/layout.yaml "$run"/metrics.jsonl "$OUT/$(basename "$run")"/
done
"$PY" -m mhatrain export "$RUN" "$OUT/h8-seed1" --overwrite
