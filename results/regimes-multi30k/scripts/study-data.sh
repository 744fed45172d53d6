#!/bin/bash
# Cell (d) of the regime study: a quarter of the training data, data.max_train_examples=7250 (the first
# 7,250 of Multi30k's 29,000 training pairs), the base cell otherwise (pre-LN, d_model 256, d_ff 1024,
# lr_factor 0.4, warm-up 500; checkpoint by validation loss), h ∈ {1, 8} × seeds 1–3. One factor,
# data.max_train_examples ∈ {0, 7250} (0: every pair), in a study of its own (runs/regimes-data): its key
# is outside the main study's linked factor, and a study keeps the keys it was made with. The 0 cell is the
# base cell, adopted as in study-dhead.sh.
# Tokenizer: with max_train_examples set, training would fit a SentencePiece model on the 14,500 kept
# sentences, and the cell's nats per token would be on other tokens than every other cell's. Instead each
# point of the 7250 cell trains with the full training set's tokenizer (sha256 TOKENIZER_SHA256, the one
# every point of the regime study used), placed in its run directory before training: `train` reuses a run
# directory's spm.model (training/prepare.py; the same at CODE). So only the model sees a quarter of the
# data. The report refuses per-token comparisons across cells whose tokenizers differ (regimes.py).
# Code: the worktree of CODE, as study.sh. Usage: study-data.sh prepare | study-data.sh JOBS
#   prepare: lay out the study, adopt the base cell's six points, place the tokenizer (idempotent; what
#            study-gpu.sh --prepare calls); JOBS: prepare, then train the unfinished points, JOBS at a time.
set -e
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CODE=${CODE:-c51e59d}
OUT="$ROOT/runs/regimes-data"
CELL="$OUT/data.max_train_examples=7250"
BASE="$ROOT/runs/regimes-multi30k/model.norm=pre,train.lr_factor=0.4,train.warmup_steps=500,model.d_model=256,model.d_ff=1024"
TOKENIZER_SHA256=acae5dfef01519116c114239fce4c36b8e20e6515f0882004f4704b9215a303b
CODE=$CODE bash "$(dirname "$0")/restore.sh"
cd "$ROOT/runs/code-$CODE"
ablate() {
  "$ROOT/.venv/bin/python" -m mhatrain ablate results/ablate-multi30k/base-config.yaml \
    --heads 1,8 --seeds 1,2,3 --vary data.max_train_examples=0,7250 \
    --set data.local_dir=../shared/data/multi30k --set train.early_stop_metric=loss --set train.threads="${THREADS:-1}" \
    --out "$OUT" --allow-code-change "$@"
}
ablate --dry-run > /dev/null
for P in "$BASE"/h0[18]-seed[123]; do  # adopt the base cell's finished points (not retrained)
  [ -f "$OUT/data.max_train_examples=0/$(basename "$P")/train_summary.json" ] && continue
  rm -rf "$OUT/data.max_train_examples=0/$(basename "$P")"
  cp -r "$P" "$OUT/data.max_train_examples=0/"
done
spm=$("$ROOT/.venv/bin/python" -c "
from mhatrain.core.config import load_config
from mhatrain.data.tokenizer import train_or_load_tokenizer
config = load_config('results/ablate-multi30k/base-config.yaml', ['data.local_dir=../shared/data/multi30k'])
print(train_or_load_tokenizer(config.data, log=lambda message: None))")
[ "$(sha256sum "$spm" | cut -d' ' -f1)" = "$TOKENIZER_SHA256" ] \
  || { echo "study-data: $spm is not the full training set's tokenizer ($TOKENIZER_SHA256)" >&2; exit 1; }
for P in "$CELL"/h0[18]-seed[123]; do
  if [ -f "$P/spm.model" ] && [ "$(sha256sum "$P/spm.model" | cut -d' ' -f1)" != "$TOKENIZER_SHA256" ]; then
    echo "study-data: $P trained with another tokenizer: delete the point and rerun" >&2
    exit 1
  fi
  [ -f "$P/train_summary.json" ] || cp "$spm" "$P/spm.model"
done
[ "$1" = prepare ] && exit 0
ablate --jobs "$1"
