#!/bin/bash
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # the repository root: these scripts live in runs/
# backup, export the converged runs, then rebuild both reports with main's code.
set -e
cd $ROOT
bash runs/backup.sh
for h in 01 04 08 16 32; do
  C=runs/converge5-multi30k/h$h
  [ -e $C/converged ] || continue
  rm -rf results/ablate-multi30k/convergence/h$h-seed1
  nice -n 10 .venv/bin/mhatrain export $C results/ablate-multi30k/convergence/h$h-seed1 > /dev/null
done
nice -n 10 .venv/bin/mhatrain report results/ablate-multi30k
nice -n 10 .venv/bin/mhatrain report results/ablate-multi30k/convergence
