#!/bin/bash
# The fixed-layout control of the gate study (results/prune-multi30k): the heads per layer that `mhatrain prune`
# kept at one L0 penalty, trained from scratch beside h=8 and h=1 over seeds 1, 2 and 3 with the head-count
# study's base config, every run at its checkpoint of lowest validation loss, then compared on test
# cross-entropy (report.md, "Fixed layouts against h=8 and h=1": Δ, 95% interval, two-sided p, Holm).
# Nine runs of 2,600 updates: about 12 h on a 2-core CPU in fp32, about 20 minutes on one H100.
# Usage: bash results/layout-multi30k/scripts/run.sh [LAYOUT.yaml]   (rerun to continue; runs/ keeps the state)
# LAYOUT: default the layout of λ = 0.03 (results/prune-multi30k/l0=0.03/layout.yaml), the mildest penalty
# that closed heads (35 of 144 kept).
# PRECISION: fp32 (default) where the CPU emulates bf16 (grep -o 'avx512_bf16\|amx' /proc/cpuinfo prints
# nothing); bf16 with native bf16 or a GPU. Every point of the study must keep the one it started with.
set -eu
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
LAYOUT=${1:-results/prune-multi30k/l0=0.03/layout.yaml}
.venv/bin/python -m mhatrain ablate results/ablate-multi30k/base-config.yaml --heads 1,8 --seeds 1,2,3 \
  --layout gates="$LAYOUT" --set train.precision="${PRECISION:-fp32}" --set train.early_stop_metric=loss \
  --set train.valid_bleu=false --out runs/layout-multi30k "${@:2}"
.venv/bin/python -m mhatrain export runs/layout-multi30k results/layout-multi30k --overwrite
