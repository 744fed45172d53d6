#!/usr/bin/env bash
# One prepared check of mhatrain on a GPU, in at most ~5 minutes (GPU_CHECK_BUDGET seconds, default 290):
#   1. the machine: GPU, torch, CUDA, native bf16
#   2. a Multi30k point: configs/multi30k.yaml trained (2,600 updates), then its test set in beam 4
#   3. torchrun with NCCL (one process per GPU; 40 updates)
#   4. mhatrain bench attention train decode --device cuda, eager
#   5. paper-base dimensions (configs/paper-base.yaml's model on Multi30k's text), 300 updates, eager
#   6. the same, train.compile=true
#   7. mhatrain bench attention train decode --device cuda --compile
# Each part has its own time limit, cut to what is left of the budget; a part that runs out of time is
# stopped and said so, and the parts after it still run while time is left.
#
# Usage, from the repository root:
#   scripts/gpu-check.sh --prepare [SOURCE]   (here, without a GPU: copies the Multi30k text, default
#                                             ../shared/data/multi30k, to data-gpu/multi30k, an ignored folder,
#                                             and caches its tokenizer and encodings in data-gpu/cache)
#   scripts/gpu-check.sh LOG_DIR              (on the GPU machine: everything is written under LOG_DIR)
# Environment: MHATRAIN_GPU_DATA (the Multi30k text folder, default data-gpu/multi30k), MHATRAIN_GPU_CACHE
# (tokenizer and encodings, default data-gpu/cache, beside it), PYTHON (python3),
# GPU_CHECK_BUDGET (seconds, 290). The checkout runs as `PYTHONPATH=$PWD python3 -m mhatrain`; no install.
set -u

if [[ "${1:-}" == "--prepare" ]]; then
    source_dir="${2:-../shared/data/multi30k}"
    [[ -d "$source_dir" ]] || { echo "gpu-check: no Multi30k text at $source_dir" >&2; exit 2; }
    mkdir -p data-gpu/multi30k && cp "$source_dir"/*.gz data-gpu/multi30k/
    # The tokenizers and the encoded training data, cached (keyed by the files' bytes, not their path), so
    # that the GPU's minutes train rather than fit SentencePiece: the Multi30k point's and paper-base's below
    "${PYTHON:-python3}" - <<'PY' || exit 2
import tempfile
from pathlib import Path
from mhatrain.core.config import load_config
from mhatrain.training.loop import prepare_data
here = ["data.local_dir=data-gpu/multi30k", "data.cache_dir=data-gpu/cache"]
paper = ["data.vocab_size=8000", "data.tokenizer_type=unigram", "data.max_length=30"]
for config, overrides in (("configs/multi30k.yaml", here), ("configs/paper-base.yaml", here + paper)):
    prepare_data(load_config(config, overrides), Path(tempfile.mkdtemp()), log=lambda m: print("gpu-check:", m))
PY
    echo "gpu-check: data-gpu holds the text and the caches: carry data-gpu to the GPU machine"
    exit 0
fi

logs="${1:?usage: scripts/gpu-check.sh LOG_DIR  (or --prepare [SOURCE])}"
data="${MHATRAIN_GPU_DATA:-data-gpu/multi30k}"
python="${PYTHON:-python3}"
budget="${GPU_CHECK_BUDGET:-290}"
if [[ ! -f "$data/train.en.gz" ]]; then
    echo "gpu-check: no Multi30k text in $data (train.en.gz missing): run scripts/gpu-check.sh --prepare here and carry data-gpu, or set MHATRAIN_GPU_DATA" >&2
    exit 2
fi
data="$(cd "$data" && pwd)"
mkdir -p "$logs"
logs="$(cd "$logs" && pwd)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
started=$SECONDS
summary="$logs/summary.txt"
: >"$summary"

# part NAME LIMIT_SECONDS COMMAND...: runs COMMAND with its output in LOG_DIR/NAME.log, within LIMIT and the budget
part() {
    local name="$1" limit="$2"
    shift 2
    local left=$((budget - (SECONDS - started)))
    if ((left < 10)); then
        echo "$name: not run (out of time: ${left}s of the ${budget}s budget left)" | tee -a "$summary"
        return
    fi
    limit=$((limit * limit_scale))
    ((limit > left)) && limit=$left
    local t0=$SECONDS
    timeout --kill-after=5 "$limit" "$@" >"$logs/$name.log" 2>&1
    local rc=$?
    local verdict="ok"
    ((rc == 124 || rc == 137)) && verdict="stopped at its limit of ${limit}s"
    ((rc != 0 && rc != 124 && rc != 137)) && verdict="failed (exit $rc; see $name.log)"
    echo "$name: $verdict, $((SECONDS - t0))s" | tee -a "$summary"
}

mh=("$python" -m mhatrain)  # timeout runs commands, not shell functions
device="${GPU_CHECK_DEVICE:-cuda}"
# GPU_CHECK_DEVICE=cpu: a smoke test of this script's commands, not of their figures: a few small updates
# each, in fp32, which any CPU runs at speed; the first 50 test sentences; the benches --quick; gloo for
# torchrun; each part's time limit 8× (compiling takes minutes on a CPU: over 8 for the benches, cold)
smoke=()
paper_smoke=()
test_set=(--split test)
backend=nccl
bench_size=(--repeats 3 --max-sentences 200)
limit_scale=1
if [[ "$device" == cpu ]]; then
    smoke=(--set train.max_steps=3 --set train.valid_max_sentences=20 --set train.precision=fp32)
    paper_smoke=(--set train.max_tokens=1000 --set train.tokens_per_update=1000)
    for side in en de; do gzip -dc "$data/test_2016_flickr.$side.gz" | head -n 50 >"$logs/smoke-test.$side"; done
    test_set=(--src "$logs/smoke-test.en" --ref "$logs/smoke-test.de")
    backend=gloo
    bench_size=(--quick)
    limit_scale=8
fi
cache="${MHATRAIN_GPU_CACHE:-$(dirname "$data")/cache}"  # what --prepare cached; written to, if need be
common=(--set "data.local_dir=$data" --set "data.cache_dir=$cache" --set "train.device=$device")

part machine 30 "$python" -c '
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())
for i in range(torch.cuda.device_count()):
    print(i, torch.cuda.get_device_name(i), "native bf16:", torch.cuda.is_bf16_supported(including_emulation=False))
'
nvidia-smi >>"$logs/machine.log" 2>&1

# 2. The Multi30k point of the head-count study: updates/s, validation share (train_summary.json), test BLEU
part multi30k-train 150 "${mh[@]}" train configs/multi30k.yaml --out "$logs/multi30k" "${common[@]}" "${smoke[@]}"
part multi30k-test-beam4 40 "${mh[@]}" eval "$logs/multi30k" "${test_set[@]}" --beam 4
"$python" - "$logs/multi30k" <<'EOF' | tee -a "$summary"
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
try:
    s = json.loads((run / "train_summary.json").read_text())
    print(f"multi30k: {s['updates']} updates, train {s['train_seconds']}s + validation {s['valid_seconds']}s "
          f"(valid_share {s['valid_share']}), {s['tokens_per_s']} target tokens/s")
except (OSError, KeyError, ValueError) as exc:
    print(f"multi30k: no summary ({exc})")
EOF

# 3. torchrun with NCCL: one process per GPU (a single GPU: world size 1, still through NCCL)
gpus="$("$python" -c 'import torch; print(max(1, torch.cuda.device_count()))' 2>/dev/null || echo 1)"
part torchrun-nccl 60 "$python" -m torch.distributed.run --standalone --nproc_per_node="$gpus" -m mhatrain \
    train configs/multi30k.yaml --out "$logs/torchrun" "${common[@]}" --set "train.dist_backend=$backend" \
    --set train.max_steps=40 --set train.log_every=10 --set train.valid_bleu=false "${smoke[@]}"

# 4. The benches, eager (decode: random weights, forced lengths, the first 200 test sentences: its default,
# a trained run against CTranslate2, needs the ctranslate2 extra)
bench=(--device "$device" --data "$data" --no-memory --random-weights "${bench_size[@]}")
part bench-eager 60 "${mh[@]}" bench attention train decode "${bench[@]}" \
    --json "$logs/bench-eager.json" --markdown "$logs/bench-eager.md"

# 5, 6. paper-base dimensions on Multi30k's text (lengths ≤ 30 pieces: two length buckets to compile),
# 300 updates of 25,000 tokens, eager then compiled; tokens/s in the runs' metrics.jsonl
paper=(configs/paper-base.yaml "${common[@]}" --set data.vocab_size=8000 --set data.tokenizer_type=unigram
    --set data.max_length=30 --set train.max_steps=300 --set train.log_every=50 --set train.valid_bleu=false
    --set train.checkpoint_every=0 --set train.checkpoint_every_minutes=0 --set train.keep_checkpoints=0 "${smoke[@]}"
    "${paper_smoke[@]}")
part paper-base-eager 60 "${mh[@]}" train "${paper[@]}" --out "$logs/paper-base-eager"
part paper-base-compiled 120 "${mh[@]}" train "${paper[@]}" --out "$logs/paper-base-compiled" --set train.compile=true
for run in paper-base-eager paper-base-compiled; do
    "$python" - "$logs/$run" <<'EOF' | tee -a "$summary"
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
try:
    s = json.loads((run / "train_summary.json").read_text())
    print(f"{run.name}: {s['updates']} updates in {s['train_seconds']}s, {s['tokens_per_s']} target tokens/s")
except (OSError, KeyError, ValueError) as exc:
    print(f"{run.name}: no summary ({exc})")
EOF
done

# 7. The benches compiled (last: compilation takes most of its time)
part bench-compile 120 "${mh[@]}" bench attention train decode "${bench[@]}" --compile \
    --json "$logs/bench-compile.json" --markdown "$logs/bench-compile.md"

echo "gpu-check: $((SECONDS - started))s of the ${budget}s budget; logs in $logs" | tee -a "$summary"
