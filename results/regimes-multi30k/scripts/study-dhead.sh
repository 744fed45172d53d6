#!/bin/bash
# Cell (c) of the regime study: the head size held at d_k = 64 for h=1 and h=8 at d_model 256 (model.d_head),
# against the base cell (d_head null: d_model / h, so 256 and 32). One factor, model.d_head ∈ {null, 64}, in a
# study of its own (runs/regimes-dhead): its keys differ from the main study's linked factor. The null cell
# is the base cell, adopted as in the main study: `study-dhead.sh adopt` copies its six points from
# runs/regimes-multi30k before the first run. Code: the worktree of CODE, as study.sh.
# Usage: study-dhead.sh adopt | study-dhead.sh JOBS
set -e
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CODE=${CODE:-c51e59d}
OUT="$ROOT/runs/regimes-dhead"
BASE="$ROOT/runs/regimes-multi30k/model.norm=pre,train.lr_factor=0.4,train.warmup_steps=500,model.d_model=256,model.d_ff=1024"
CODE=$CODE bash "$(dirname "$0")/restore.sh"
cd "$ROOT/runs/code-$CODE"
ablate() {
  "$ROOT/.venv/bin/python" -m mhatrain ablate results/ablate-multi30k/base-config.yaml \
    --heads 1,8 --seeds 1,2,3 --vary model.d_head=null,64 \
    --set data.local_dir=../shared/data/multi30k --set train.early_stop_metric=loss --set train.threads="${THREADS:-1}" \
    --out "$OUT" --allow-code-change "$@"
}
if [ "$1" = adopt ]; then
  ablate --dry-run > /dev/null
  for P in "$BASE"/h0[18]-seed[123]; do
    rm -rf "$OUT/model.d_head=null/$(basename "$P")"
    cp -r "$P" "$OUT/model.d_head=null/"
  done
  exit 0
fi
ablate --jobs "$1"
