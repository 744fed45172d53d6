#!/bin/bash
# Lanes for the points added after the three-seed grid (seeds 4-6 of h=1 and h=8, and the retrains of
# the three points whose BLEU-selected checkpoint was not their loss-selected one). Each lane takes the
# next unclaimed item of runs/seeds-items.txt ("H SEED PRECISION") and trains it with the grid's
# code (the 731a49a worktree) and base config, selecting best.pt by validation loss; evaluation is
# done afterwards by main's code. Usage: seeds.sh LANE; stop with runs/stop.sh (touches runs/STOP).
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)  # the repository root (this file is in results/ablate-multi30k/scripts)
R=$ROOT/runs
W=$R/code-731a49a
PY=$ROOT/.venv/bin/python
LANE=$1
export OMP_NUM_THREADS=1
cd "$W" || exit 1
while [ ! -e "$R/STOP" ]; do
  item=""
  while read -r h s prec; do
    [ -z "$h" ] && continue
    P=$R/added-multi30k/$(printf 'h%02d' "$h")-seed$s
    [ -s "$P/train_summary.json" ] && continue
    mkdir "$R/claims/$h-$s" 2>/dev/null || continue
    item="$h $s $prec"; break
  done < "$R/seeds-items.txt"
  [ -z "$item" ] && break
  set -- $item
  P=$R/added-multi30k/$(printf 'h%02d' "$1")-seed$2
  mkdir -p "$R/added-multi30k/logs"
  LOG=$R/added-multi30k/logs/$(basename "$P").log
  cmd=("$PY" -m mhatrain train "$ROOT/results/ablate-multi30k/base-config.yaml" --out "$P"
       --set model.n_heads="$1" --set train.seed="$2" --set train.precision="$3" --set train.threads=1
       --set data.local_dir="$ROOT/../shared/data/multi30k" --set train.early_stop_metric=loss)
  [ -e "$P/config.yaml" ] && cmd+=(--resume)  # a stopped run continues from its last checkpoint
  echo "\$ ${cmd[*]}" >> "$LOG"
  /usr/bin/time -a -o "$R/seeds-time.log" -f "%e s wall %U user %S sys lane$LANE $(basename "$P")" "${cmd[@]}" >> "$LOG" 2>&1 || break
done
echo "lane $LANE ends $(date -u +%FT%TZ)" >> "$R/seeds-time.log"
