#!/bin/bash
# Keep each convergence run's snapshots at the validations up to the grid's budget (every 200 updates to
# 2,600) before the rotation deletes them, so the run can also be evaluated as the grid would have: its
# best checkpoint by validation BLEU within 2,600 updates. Exits once all are kept (or were
# rotated away before this watcher saw them).
cd "$(dirname "$0")/converge5-multi30k" || exit 1
while :; do
  left=0
  for h in h16 h32; do
    mkdir -p $h-kept
    for step in $(seq 200 200 2600); do
      f=$(printf 'step%08d.pt' $step)
      [ -e $h-kept/$f ] && continue
      oldest=$(ls $h/snapshots 2>/dev/null | head -1)
      [ -n "$oldest" ] && [[ $f < $oldest ]] && continue  # rotated away before it could be kept
      left=1
      [ -e $h/snapshots/$f ] && sleep 5 && cp $h/snapshots/$f $h-kept/$f.tmp && mv $h-kept/$f.tmp $h-kept/$f
    done
  done
  [ $left = 0 ] && exit 0
  sleep 20
done
