#!/bin/bash
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # the repository root: these scripts live in runs/
# Stop the lanes: no new items, and every training/eval process saves its checkpoint (SIGTERM).
touch $ROOT/runs/STOP
# not /usr/bin/time, so that it logs the stopped command
pkill -TERM -f '^[^ ]*/python[0-9.]* -m mhatrain'; sleep 60; pgrep -af 'mhatrain|lane.sh' || echo stopped
