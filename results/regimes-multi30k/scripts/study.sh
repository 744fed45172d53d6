#!/bin/bash
# The regime study (issue "when does multi-head attention help"): h ∈ {1, 8} × seeds 1–3 in each cell of
# one linked factor over the keys that differ between cells. LEVELS, one per cell, in the order
# norm:lr_factor:warmup:d_model:d_ff:
#   base  pre:0.4:500:256:1024    the committed Multi30k grid's h=1 and h=8, seeds 1–3 (adopted, not retrained)
#   (b)   pre:0.4:500:512:2048    the paper's width (d_k 64 at h=8)
#   (a)   post:LF:WU:256:1024     post-LN, with the learning rate and warm-up chosen on validation loss: left out
#                                 of the map (regime-map.yaml, README); its runs are kept, do not train its rest
# Cells (c) d_head 64 and (d) a quarter of the data vary other keys: studies of their own (study-dhead.sh,
# study-data.sh).
# Code: the worktree of the commit named by CODE (runs/code-CODE); every point selects its checkpoint by
# validation loss. Usage: study.sh JOBS LEVEL[,LEVEL...]; stop: SIGTERM the ablate process (points save a
# checkpoint); rerunning resumes, and new levels add cells. On a machine without runs/, restore.sh first
# rebuilds it from the committed export.
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CODE=${CODE:-c51e59d}
CODE=$CODE bash "$(dirname "$0")/restore.sh" || exit 1
cd "$ROOT/runs/code-$CODE" || exit 1
exec "$ROOT/.venv/bin/python" -m mhatrain ablate results/ablate-multi30k/base-config.yaml \
  --heads 1,8 --seeds 1,2,3 \
  --vary "model.norm,train.lr_factor,train.warmup_steps,model.d_model,model.d_ff=$2" \
  --set data.local_dir=../shared/data/multi30k --set train.early_stop_metric=loss --set train.threads="${THREADS:-1}" \
  --out "$ROOT/runs/regimes-multi30k" --jobs "$1" --allow-code-change
