#!/bin/bash
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # the repository root: these scripts live in runs/
# Start (or resume) both lanes; stale claims of a stopped session are cleared first.
cd $ROOT/runs && rm -f STOP && rm -rf claims && mkdir claims
echo "start $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo)" >> grid5-time.log
nohup bash lane.sh A >/dev/null 2>&1 &
sleep 120
nohup bash lane.sh B >/dev/null 2>&1 &
