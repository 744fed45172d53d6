#!/bin/bash
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # the repository root: these scripts live in runs/
# Copy the study's finished points (and every point's log, study.yaml, base-config.yaml, provenance.json)
# into results/ablate-multi30k with portable paths; one-seed/ and convergence/ are left alone.
set -e
cd $ROOT
T=$(mktemp -d)
nice -n 10 .venv/bin/mhatrain export runs/ablate5-multi30k $T/s > /dev/null
D=results/ablate-multi30k
for p in $T/s/h*-seed*; do
  [ -s $p/eval/test.beam4.json ] || continue
  rm -rf $D/$(basename $p) && cp -r $p $D/
done
mkdir -p $D/logs && cp $T/s/logs/*.log $D/logs/
cp $T/s/study.yaml $T/s/base-config.yaml $T/s/provenance.json $D/
rm -rf $T
# the lanes' /usr/bin/time lines (wall, user, sys per command), portable, so the grid's CPU time survives
.venv/bin/python -c "import sys; from pathlib import Path; from mhatrain.core.files import portable_text; \
print(portable_text(Path(sys.argv[1]).read_text(), Path.cwd()), end='')" runs/grid5-time.log > $D/logs/cpu-time.log
