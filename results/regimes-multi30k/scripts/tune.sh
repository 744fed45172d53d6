#!/bin/bash
# Tuning runs of the post-LN cell (issue "when does multi-head attention help", cell a): h=8, seed 1,
# Multi30k's base config with model.norm=post and one (train.lr_factor, train.warmup_steps) each, the
# full 2,600-update budget, best.pt by validation loss. A setting is chosen on validation loss only.
# Each lane takes the next unclaimed line "NAME LR_FACTOR WARMUP" of runs/tune-items.txt; code: the
# 12cb0c2 worktree (runs/code-12cb0c2). Usage: tune.sh LANE; stop: touch runs/STOP, then SIGTERM the
# training processes (they save a checkpoint); rerunning resumes.
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
R=$ROOT/runs
W=$R/code-12cb0c2
PY=$ROOT/.venv/bin/python
LANE=$1
export OMP_NUM_THREADS=1
cd "$W" || exit 1
mkdir -p "$R/tune-postln/logs" "$R/tune-claims"
while [ ! -e "$R/STOP" ]; do
  item=""
  while read -r name lf wu; do
    [ -z "$name" ] && continue
    [ -s "$R/tune-postln/$name/train_summary.json" ] && continue
    mkdir "$R/tune-claims/$name" 2>/dev/null || continue
    item="$name $lf $wu"; break
  done < "$R/tune-items.txt"
  [ -z "$item" ] && break
  set -- $item
  P=$R/tune-postln/$1
  LOG=$R/tune-postln/logs/$1.log
  cmd=("$PY" -m mhatrain train "$ROOT/results/ablate-multi30k/base-config.yaml" --out "$P"
       --set model.norm=post --set model.n_heads=8 --set train.seed=1 --set train.lr_factor="$2"
       --set train.warmup_steps="$3" --set train.precision=bf16 --set train.threads=1
       --set data.local_dir="$ROOT/../shared/data/multi30k" --set train.early_stop_metric=loss)
  [ -e "$P/config.yaml" ] && cmd+=(--resume)
  echo "\$ ${cmd[*]}" >> "$LOG"
  /usr/bin/time -a -o "$R/tune-time.log" -f "%e s wall %U user %S sys lane$LANE $1" "${cmd[@]}" >> "$LOG" 2>&1 || break
done
echo "lane $LANE ends $(date -u +%FT%TZ)" >> "$R/tune-time.log"
