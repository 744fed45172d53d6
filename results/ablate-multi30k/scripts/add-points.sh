#!/bin/bash
# Export the added points that are trained and evaluated (runs/added-multi30k, see seeds.sh) into
# results/ablate-multi30k without checkpoints. A retrained point replaces the grid's point of the same
# name, which moves to bleu-selected/ (its evaluated checkpoint was chosen by greedy validation BLEU).
# Then rebuild the report with main's code.
set -e
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
D=results/ablate-multi30k
for P in runs/added-multi30k/h*-seed*; do
  name=$(basename "$P")
  [ -s "$P/eval/test.beam4.json" ] && [ -s "$P/eval/valid.beam4.json" ] || continue
  if [ -d "$D/$name" ] && ! grep -q '"early_stop_metric": "loss"\|early_stop_metric: loss' "$D/$name/config.yaml"; then
    mkdir -p "$D/bleu-selected" && rm -rf "$D/bleu-selected/$name" && mv "$D/$name" "$D/bleu-selected/$name"
  fi
  rm -rf "$D/$name"
  nice -n 10 .venv/bin/mhatrain export "$P" "$D/$name" > /dev/null
  mkdir -p "$D/logs/added"
  sed "s|$ROOT/||g; s|$HOME/|~/|g" "runs/added-multi30k/logs/$name.log" > "$D/logs/added/$name.log"
done
[ -f runs/seeds-time.log ] && sed "s|$ROOT/||g; s|$HOME/|~/|g" runs/seeds-time.log > "$D/logs/added/cpu-time.log"
nice -n 10 .venv/bin/mhatrain report "$D"
