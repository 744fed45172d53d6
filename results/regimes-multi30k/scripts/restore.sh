#!/bin/bash
# Make runs/ ready for study.sh, study-dhead.sh and study-data.sh on a machine that lacks it (a new session's machine
# starts with an empty runs/): the worktree of the pinned commit CODE (runs/code-CODE), the link that its
# data path (../shared) needs, and each study folder rebuilt from its committed export when it is
# missing. An exported point keeps no checkpoint: a finished one stays done, an unfinished one trains
# again from its start (train --resume finds no checkpoint and drops its old metrics). Idempotent.
set -e
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CODE=${CODE:-c51e59d}
mkdir -p "$ROOT/runs/regimes-logs"
[ -e "$ROOT/runs/shared" ] || ln -s "$(cd "$ROOT/.." && pwd)/shared" "$ROOT/runs/shared"
[ -d "$ROOT/runs/code-$CODE" ] || git -C "$ROOT" worktree add -f "$ROOT/runs/code-$CODE" "$CODE" > /dev/null
for pair in regimes-multi30k:regimes-multi30k regimes-dhead:regimes-dhead regimes-data:regimes-data; do
  src="$ROOT/results/${pair%%:*}" dst="$ROOT/runs/${pair##*:}"
  [ -f "$dst/study.yaml" ] || [ ! -f "$src/study.yaml" ] || {
    mkdir -p "$dst"
    for f in "$src"/*; do
      case "$(basename "$f")" in scripts | tuning | README.md) continue ;; esac
      cp -r "$f" "$dst/"
    done
    echo "restore: $dst rebuilt from $src"
  }
done
