#!/bin/bash
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # the repository root: these scripts live in runs/
# One worker lane: takes the next unfinished, unclaimed item of runs/items.txt and runs it with the
# pinned code (cwd = the 731a49a worktree, so `-m mhatrain` imports that tree). Stops on runs/STOP.
W=$ROOT/runs/code-731a49a
R=$ROOT/runs
PY=$ROOT/.venv/bin/python
LANE=$1
# GRID_EXTRA: more --set flags for grid and convergence runs, e.g. "--set train.precision=fp32" on a CPU without native bf16
export OMP_NUM_THREADS=1
cd $W || exit 1
name() { printf 'h%02d' "$1"; }
done_item() {  # kind H [S]
  if [ "$1" = grid ]; then [ -s runs/ablate5-multi30k/$(name $2)-seed$3/eval/test.beam4.json ];
  else [ -e runs/converge5-multi30k/$(name $2)/converged ]; fi
}
run() {  # log, command...
  local log=$1; shift
  echo "\$ $*" >> "$log"
  /usr/bin/time -a -o $R/grid5-time.log -f "%e s wall %U user %S sys lane$LANE $*" "$@" >> "$log" 2>&1
}
while [ ! -e $R/STOP ]; do
  item=""
  while read -r kind h s; do
    [ -z "$kind" ] && continue
    done_item $kind $h $s && continue
    if [ $kind = conv ] && ! done_item grid $h 1; then continue; fi
    mkdir $R/claims/$kind-$h-$s 2>/dev/null || continue
    item="$kind $h $s"; break
  done < $R/items.txt
  [ -z "$item" ] && break
  set -- $item
  if [ $1 = grid ]; then
    P=runs/ablate5-multi30k/$(name $2)-seed$3; LOG=runs/ablate5-multi30k/logs/$(name $2)-seed$3.log
    mkdir -p runs/ablate5-multi30k/logs
    if [ ! -s $P/train_summary.json ]; then
      run $LOG $PY -m mhatrain train runs/ablate5-multi30k/base-config.yaml --out $P --resume --set model.n_heads=$2 --set train.seed=$3 --set train.threads=1 $GRID_EXTRA || break
    fi
    [ -s $P/eval/valid.beam4.json ] || run $LOG $PY -m mhatrain eval $P --split valid || break
    [ -s $P/eval/test.beam4.json ] || run $LOG $PY -m mhatrain eval $P --split test || break
  else
    C=runs/converge5-multi30k/$(name $2); LOG=runs/converge5-multi30k/$(name $2).log
    if [ ! -d $C ] && [ -e runs/ablate5-multi30k/$(name $2)-seed1/last.pt ]; then  # resume the seed-1 grid point's last checkpoint
      cp -r runs/ablate5-multi30k/$(name $2)-seed1 $C.tmp && rm -rf $C.tmp/eval && mv $C.tmp $C
    elif [ ! -d $C ]; then  # its seed-1 checkpoints are gone: train from scratch (the same first 2,600 updates)
      mkdir -p $C && cp runs/ablate5-multi30k/$(name $2)-seed1/config.yaml $C/
    fi
    # trained when the summary is this run's own (a copied grid point's says runs/ablate5-multi30k)
    if ! grep -q '"run_dir": "runs/converge5-multi30k' $C/train_summary.json 2>/dev/null; then
      run $LOG $PY -m mhatrain train runs/ablate5-multi30k/base-config.yaml --resume --out $C --set model.n_heads=$2 --set train.seed=1 --set train.threads=1 --set data.local_dir=../shared/data/multi30k --set train.max_steps=10400 --set train.patience=6 $GRID_EXTRA || break
    fi
    [ -s $C/eval/valid.beam4.json ] || run $LOG $PY -m mhatrain eval $C --split valid || break
    [ -s $C/eval/test.beam4.json ] || run $LOG $PY -m mhatrain eval $C --split test || break
    touch $C/converged
  fi
done
echo "lane $LANE ends $(date -u +%FT%TZ)" >> $R/grid5-time.log
