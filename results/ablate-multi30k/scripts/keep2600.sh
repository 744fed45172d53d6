#!/bin/bash
# Keep each convergence run's update-2,600 snapshot (the grid's budget) before the rotation deletes it,
# so that run can also be evaluated at the grid's budget. Exits once both are kept.
cd "$(dirname "$0")/converge5-multi30k" || exit 1
while :; do
  left=0
  for h in h16 h32; do
    [ -e $h-step2600.pt ] && continue
    left=1
    [ -e $h/snapshots/step00002600.pt ] && sleep 5 && cp $h/snapshots/step00002600.pt $h-step2600.pt.tmp && mv $h-step2600.pt.tmp $h-step2600.pt
  done
  [ $left = 0 ] && exit 0
  sleep 20
done
