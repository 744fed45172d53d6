#!/bin/bash
# Copy the regime study (runs/regimes-multi30k) and the post-LN tuning runs (runs/tune-postln) into
# results/regimes-multi30k, cell (c) (runs/regimes-dhead) into results/regimes-dhead and cell (d)
# (runs/regimes-data) into results/regimes-data, without
# checkpoints, with the CPU-time logs, then rebuild the studies' reports with this checkout's code.
# Unfinished points come along as they stand: `ablate` continues an exported study.
set -e
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
D=results/regimes-multi30k
nice -n 10 .venv/bin/mhatrain export runs/regimes-multi30k "$D" --overwrite > /dev/null
if [ -d runs/tune-postln ]; then  # the tuning runs (a machine that restore.sh set up has none: the export keeps them)
  for P in runs/tune-postln/lf*; do
    nice -n 10 .venv/bin/mhatrain export "$P" "$D/tuning/$(basename "$P")" --overwrite > /dev/null
  done
  sed "s|$ROOT/||g; s|$HOME/|~/|g" runs/tune-time.log > "$D/tuning/cpu-time.log"
  for L in runs/tune-postln/logs/*.log; do sed "s|$ROOT/||g; s|$HOME/|~/|g" "$L" > "$D/tuning/$(basename "$L")"; done
fi
mkdir -p "$D/logs/ablate"  # the ablate commands' own output (with --jobs 1 a point's log is there)
for L in runs/regimes-logs/*.log; do
  if [ -e "$L" ]; then sed "s|$ROOT/||g; s|$HOME/|~/|g" "$L" > "$D/logs/ablate/$(basename "$L")"; fi
done
nice -n 10 .venv/bin/mhatrain report "$D"
if [ -d runs/regimes-dhead ]; then  # cell (c), a study of its own (study-dhead.sh)
  nice -n 10 .venv/bin/mhatrain export runs/regimes-dhead results/regimes-dhead --overwrite > /dev/null
  nice -n 10 .venv/bin/mhatrain report results/regimes-dhead
fi
if [ -d runs/regimes-data ]; then  # cell (d), a study of its own (study-data.sh)
  nice -n 10 .venv/bin/mhatrain export runs/regimes-data results/regimes-data --overwrite > /dev/null
  nice -n 10 .venv/bin/mhatrain report results/regimes-data
fi
