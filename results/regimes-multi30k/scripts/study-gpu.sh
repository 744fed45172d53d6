#!/bin/bash
# The regime study's unfinished points on a lent GPU (issue "when does multi-head attention help": one
# prepared script that trains as many points as fit in about ten minutes and brings back their run files
# without checkpoints). Three steps:
#   study-gpu.sh --prepare        here: restore.sh and `study-data.sh prepare` (cell (d) laid out, the base cell
#                                 adopted, the full training set's tokenizer placed in its points), then stage in
#                                 data-gpu/regimes (ignored) the pinned code (a one-commit clone of CODE), the
#                                 Multi30k text where the study's data.local_dir (../shared/data/multi30k) finds it,
#                                 and light copies of runs/regimes-multi30k, runs/regimes-data and
#                                 runs/regimes-dhead (`mhatrain export`), cell (d)'s points with their spm.model
#   study-gpu.sh OUT [SECONDS]    on the GPU machine, from the repository root with data-gpu/regimes carried:
#                                 the main study's points (cell (b); post-LN is left out of the map and not
#                                 trained), then cell (d)'s, then cell (c)'s, GPU_JOBS at a time on cuda
#                                 (default 4, not yet measured: one Multi30k point used 0.8% of an H200's
#                                 bf16 peak, so several can share it), all stopped with SIGTERM at SECONDS
#                                 (default 480: with 45 s for the stop and the packing, it fits a 600 s call)
#                                 after the start; then both studies exported into OUT/points.tar.gz, the
#                                 ablate logs and summary.txt beside it
#   study-gpu.sh --merge TARBALL  here: each point that is finished in the tarball (trained, both evaluations)
#                                 and not here replaces its folder in runs/ (with its log); then export.sh
# The points run through the same `ablate` command as study.sh (same grid, factors and overrides; the slot's
# device is not part of a point's config), so each point's provenance names the GPU it ran on. GPU_DEVICE=cpu
# runs the same steps on a CPU, as a smoke test of the script (its points are stopped at the deadline). A point
# stopped at the deadline leaves its checkpoint on that machine, which is not kept: it trains again later.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CODE=${CODE:-c51e59d}
STAGE=data-gpu/regimes
LEVELS=pre:0.4:500:256:1024,pre:0.4:500:512:2048  # post-LN (cell a) is left out of the map: not trained further
STUDIES=(regimes-multi30k regimes-data regimes-dhead)
DATA_CELL=data.max_train_examples=7250  # cell (d): its points train with the full training set's tokenizer
cd "$ROOT"

if [ "${1:-}" = --prepare ]; then
  CODE=$CODE bash results/regimes-multi30k/scripts/restore.sh
  CODE=$CODE bash results/regimes-multi30k/scripts/study-data.sh prepare
  rm -rf "$STAGE" && mkdir -p "$STAGE/shared/data" "$STAGE/studies"
  cp -r ../shared/data/multi30k "$STAGE/shared/data/"
  git init -q "$STAGE/code-$CODE"
  git -C "$STAGE/code-$CODE" fetch -q --depth 1 "$ROOT" "$(git rev-parse "$CODE")"
  git -C "$STAGE/code-$CODE" checkout -q FETCH_HEAD
  for s in "${STUDIES[@]}"; do .venv/bin/mhatrain export "runs/$s" "$STAGE/studies/$s" > /dev/null; done
  for P in runs/regimes-data/$DATA_CELL/h*-seed*; do  # export leaves spm.model behind: cell (d) needs it
    if [ -f "$P/spm.model" ]; then cp "$P/spm.model" "$STAGE/studies/regimes-data/$DATA_CELL/$(basename "$P")/"; fi
  done
  echo "study-gpu: $(du -sh "$STAGE" | cut -f1) staged in $STAGE: carry data-gpu/regimes to the GPU machine"
  exit 0
fi

if [ "${1:-}" = --merge ]; then
  tarball=$(cd "$(dirname "${2:?usage: study-gpu.sh --merge TARBALL}")" && pwd)/$(basename "$2")
  unpacked=$(mktemp -d)
  tar -xzf "$tarball" -C "$unpacked"
  finished() { [ -f "$1/train_summary.json" ] && [ -f "$1/eval/valid.beam4.json" ] && [ -f "$1/eval/test.beam4.json" ]; }
  merged=0
  for s in "${STUDIES[@]}"; do
    for point in "$unpacked/$s"/*/h[0-9]*-seed*; do
      [ -d "$point" ] || continue
      rel=${point#"$unpacked/$s/"}
      if finished "$point" && ! finished "runs/$s/$rel"; then
        rm -rf "runs/$s/$rel" && mkdir -p "runs/$s/$(dirname "$rel")" && cp -r "$point" "runs/$s/$rel"
        log="$unpacked/$s/logs/$rel.log"
        if [ -f "$log" ]; then mkdir -p "runs/$s/logs/$(dirname "$rel")" && cp "$log" "runs/$s/logs/$rel.log"; fi
        echo "study-gpu: merged $s/$rel"
        merged=$((merged + 1))
      fi
    done
  done
  rm -rf "$unpacked"
  echo "study-gpu: $merged points merged; bash results/regimes-multi30k/scripts/export.sh brings them into results/"
  exit 0
fi

out=$(mkdir -p "${1:?usage: study-gpu.sh OUT [SECONDS] | --prepare | --merge TARBALL}" && cd "$1" && pwd)
deadline=$((SECONDS + ${2:-480}))
python=${PYTHON:-python3}
[ -d "$STAGE/code-$CODE" ] || { echo "study-gpu: no $STAGE/code-$CODE: run --prepare and carry data-gpu/regimes" >&2; exit 2; }
cd "$STAGE/code-$CODE"
ablate() {  # ablate STUDY LOG ARGS...: the study's own command, stopped at the deadline
  local study=$1 log=$2 left=$((deadline - SECONDS))
  shift 2
  if ((left < 120)); then echo "study-gpu: $study not run (${left}s left)" | tee -a "$out/summary.txt"; return; fi
  timeout -s TERM -k 45 "$left" "$python" -m mhatrain ablate results/ablate-multi30k/base-config.yaml \
    --heads 1,8 --seeds 1,2,3 "$@" \
    --set data.local_dir=../shared/data/multi30k --set train.early_stop_metric=loss --set train.threads=1 \
    --out "../studies/$study" --jobs "${GPU_JOBS:-4}" --devices "${GPU_DEVICE:-cuda}" --allow-code-change > "$out/$log" 2>&1 \
    || echo "study-gpu: $study: ablate exited $? (124: stopped at the deadline)" | tee -a "$out/summary.txt"
}
export PYTHONPATH=$PWD
ablate regimes-multi30k ablate-main.log \
  --vary "model.norm,train.lr_factor,train.warmup_steps,model.d_model,model.d_ff=$LEVELS"
for P in "../studies/regimes-data/$DATA_CELL"/h*-seed*; do  # never let cell (d) fit a tokenizer on its quarter
  if [ ! -f "$P/train_summary.json" ] && [ ! -f "$P/spm.model" ]; then
    echo "study-gpu: $P has no spm.model: run --prepare again" | tee -a "$out/summary.txt" >&2
    exit 2
  fi
done
ablate regimes-data ablate-data.log --vary data.max_train_examples=0,7250
ablate regimes-dhead ablate-dhead.log --vary model.d_head=null,64
light=$(mktemp -d)
for s in "${STUDIES[@]}"; do "$python" -m mhatrain export "../studies/$s" "$light/$s" > /dev/null; done
tar -czf "$out/points.tar.gz" -C "$light" .
for s in "${STUDIES[@]}"; do
  echo "study-gpu: $s: $(find "$light/$s" -name train_summary.json | wc -l) points trained in all" | tee -a "$out/summary.txt"
done
