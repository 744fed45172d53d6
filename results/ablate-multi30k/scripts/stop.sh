#!/bin/bash
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # the repository root: these scripts live in runs/
# Stop the lanes: no new items, and every training/eval process saves its checkpoint (SIGTERM).
touch $ROOT/runs/STOP
pkill -TERM -f 'python -m mhatrain' ; sleep 60; pgrep -af 'mhatrain|lane.sh' || echo stopped
