#!/usr/bin/env bash
# The GPU check: one command that runs agentgym's GPU path on a bare CUDA machine and saves
# each step's output and figures. Steps, in order (a failing step does not stop the rest):
#   gpu-tests     the tests marked gpu (pytest -m gpu)
#   quickstart    configs/quickstart.yaml with the learner and the engine on the device, a few
#                 steps, then agentgym eval of the result
#   learner       learner tokens/s and peak memory, 272M-parameter Qwen2, bf16, one process
#   learner-fsdp2 the same as one FSDP2 rank under torchrun (NCCL on CUDA)
#   learner-prefix the learner on groups whose episodes share 60% of their tokens (a GRPO
#                 group's opening), the shared-prefix pass on and off
#   engine        the transformers engine's generated tokens/s at batch 1, 16 and 64, beside
#                 the baseline sampler (host-side torch.multinomial per row)
#   engine-slab   the engine with engine.fast_decode off (transformers' DynamicCache), beside
#                 the engine step's default (the preallocated one-dtype slab)
#   weights       weight sync (stream) of that model to an engine on the same device
#   vllm-tests    where python3 imports vLLM (pip install ".[vllm]"): the tests marked vllm (the
#                 engine against transformers and the learner on SmolLM2 when
#                 AGENTGYM_VLLM_TEST_MODEL or runs/models/smollm2-135m-instruct holds it; two
#                 GRPO steps of agentgym train with the vLLM actor)
#   vllm-engine   vLLM against the transformers engine on that model: tokens/s, seconds per
#                 weight update (bench/bench_engines.py); without the model, a skipped line
#   Without vLLM both are one skipped line ("vllm"): its wheel cannot be carried to the lent
#   machines today.
# Results: OUT/summary.md (device, each step's status, seconds and figures), OUT/results.jsonl
# (the figures as JSON lines) and OUT/<step>.log. Under 10 minutes on an H100.
#
# Usage: bash bench/gpu_check.sh [--device cuda|cpu] [--bundle DIR] [--out DIR] [--only S,S]
#   --device cpu   a dry run on CPU with every size shrunk (the slow tests run it)
#   --bundle DIR   install DIR/wheels/*.whl (bench/gpu_bundle.sh makes them) into a temporary
#                  site dir first: the machine needs only Python, torch and transformers
#   --out DIR      where the results go (default: $OUT if set, else gpu-check-results)
#   --only S,S     run only these steps
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE=cuda
BUNDLE=
RESULTS=${OUT:-gpu-check-results}
ONLY=
while [ $# -gt 0 ]; do
    case $1 in
        --device) DEVICE=$2; shift 2 ;;
        --bundle) BUNDLE=$2; shift 2 ;;
        --out) RESULTS=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        *) echo "gpu_check: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
case $DEVICE in cuda | cpu) ;; *) echo "gpu_check: --device is cuda or cpu" >&2; exit 2 ;; esac
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
SUMMARY=$RESULTS/summary.md
JSON=$RESULTS/results.jsonl
: >"$JSON"
WORK=$(mktemp -d -t agentgym-gpu-check.XXXXXX)
export PYTHONUNBUFFERED=1

if [ -n "$BUNDLE" ]; then
    echo "== installing $(ls "$BUNDLE"/wheels/*.whl | wc -l) wheels from $BUNDLE into $WORK/site"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$WORK/site" "$BUNDLE"/wheels/*.whl || { echo "gpu_check: install failed" >&2; exit 1; }
    export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
    export PATH=$WORK/site/bin:$PATH
fi

# Sizes: the GPU figures, or a shrunk dry run on CPU.
if [ "$DEVICE" = cuda ]; then
    MODEL=(--layers 16 --hidden 1024 --vocab 32768)
    SHAPE=16x1024x32768
    LEARNER=(--tokens 1024 --groups 8 --group-size 8 --micro-batch 8 --steps 3)
    ENGINE=(--batches 1 16 64 --prompt-tokens 256 --new-tokens 128)
    QS_STEPS=12
    QS_EVAL=(--limit 50)
    T_TESTS=120 T_QS=120 T_BENCH=70 T_ENGINE=120 T_VLLM=600
else
    MODEL=(--layers 2 --hidden 64 --vocab 512 --threads 1)
    SHAPE=2x64x512
    LEARNER=(--tokens 128 --groups 2 --group-size 4 --micro-batch 4 --steps 1)
    ENGINE=(--batches 1 4 --prompt-tokens 32 --new-tokens 8)
    QS_STEPS=2
    QS_EVAL=(--limit 4 --set eval.samples=2)
    T_TESTS=300 T_QS=300 T_BENCH=300 T_ENGINE=300 T_VLLM=900
fi

{
    echo "# agentgym GPU check"
    echo
    if [ -n "$BUNDLE" ] && [ -f "$BUNDLE/COMMIT" ]; then
        commit="$(cat "$BUNDLE/COMMIT") (the bundle's)"
    else
        commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    fi
    echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ); device: $DEVICE; commit: $commit"
    python3 - <<'EOF'
import platform, torch
print(f"- python {platform.python_version()}, torch {torch.__version__}, cuda {torch.version.cuda}")
try:
    import transformers
    print(f"- transformers {transformers.__version__}")
except ImportError:
    print("- transformers: not installed")
import agentgym, agentgym._envserver
print(f"- agentgym {agentgym.__version__} from {agentgym.__file__.rsplit('/', 2)[0]}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"- GPU: {p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs")
else:
    print("- GPU: none visible to torch")
EOF
    if command -v nvidia-smi >/dev/null; then
        echo "- nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
    fi
    echo
    echo "| step | status | seconds |"
    echo "|---|---|---:|"
} >"$SUMMARY"
cat "$SUMMARY"

FAILED=0
step() {  # step NAME TIMEOUT_S CMD...: run one step, log it, record its status
    local name=$1 limit=$2
    shift 2
    if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then
        return
    fi
    echo "== $name (at most ${limit}s): $*"
    local start=$SECONDS status
    timeout --kill-after=10 "$limit" "$@" >"$RESULTS/$name.log" 2>&1
    status=$?
    local took=$((SECONDS - start))
    case $status in
        0) verdict=ok ;;
        124 | 137) verdict="timed out" ;;
        *) verdict="failed ($status)" ;;
    esac
    [ $status -eq 0 ] || FAILED=$((FAILED + 1))
    echo "| $name | $verdict | $took |" >>"$SUMMARY"
    tail -n 4 "$RESULTS/$name.log" | sed 's/^/    /'
    echo "   -> $verdict in ${took}s"
}

skip() {  # skip NAME WHY: record a step that cannot run here, and why
    if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$1,"* ]]; then
        return
    fi
    echo "== $1: skipped: $2"
    echo "| $1 | skipped: $2 | 0 |" >>"$SUMMARY"
}

# The quickstart's two commands, run by `bash -c` so that `timeout` bounds both.
QUICKSTART='run=$1; device=$2; steps=$3; shift 3
agentgym train configs/quickstart.yaml --set run_dir="$run" --set learner.device="$device" \
    --set engine.device="$device" --set learner.max_steps="$steps" \
    --set learner.checkpoint_every="$steps" &&
agentgym eval configs/quickstart.yaml --set run_dir="$run" --set engine.device="$device" \
    --checkpoint "$run/checkpoints" "$@"'

mapfile -t GPU_TESTS < <(grep -rl --include='*.py' 'pytest.mark.gpu' tests | sort)
step gpu-tests "$T_TESTS" python3 -m pytest -c pyproject.toml --rootdir . -m gpu -q \
    -p no:cacheprovider "${GPU_TESTS[@]}"
step quickstart "$T_QS" bash -c "$QUICKSTART" quickstart "$WORK/quickstart" "$DEVICE" \
    "$QS_STEPS" "${QS_EVAL[@]}"
step learner "$T_BENCH" python3 bench/gpu_bench.py learner --device "$DEVICE" \
    "${MODEL[@]}" "${LEARNER[@]}" --json "$JSON"
step learner-fsdp2 "$T_BENCH" python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
    bench/gpu_bench.py learner --device "$DEVICE" "${MODEL[@]}" "${LEARNER[@]}" --json "$JSON"
step learner-prefix "$T_BENCH" bash -c 'python3 bench/gpu_bench.py learner --shared-share 0.6 "$@" &&
    python3 bench/gpu_bench.py learner --shared-share 0.6 --no-shared-prefix "$@"' learner-prefix \
    --device "$DEVICE" "${MODEL[@]}" "${LEARNER[@]}" --json "$JSON"
# The engine's sampler, then the baseline sampler (host-side torch.multinomial per row).
step engine "$T_ENGINE" bash -c 'python3 bench/gpu_bench.py engine "$@" &&
    python3 bench/gpu_bench.py engine --sampler multinomial "$@"' engine --device "$DEVICE" \
    "${MODEL[@]}" "${ENGINE[@]}" --json "$JSON"
step engine-slab "$T_ENGINE" python3 bench/gpu_bench.py engine --no-fast-decode --device "$DEVICE" \
    "${MODEL[@]}" "${ENGINE[@]}" --json "$JSON"
step weights "$T_BENCH" python3 bench/bench_weights.py --model "$SHAPE" --device "$DEVICE" \
    --methods stream --port 5790 --json "$JSON"
if python3 -c "import vllm" >/dev/null 2>&1; then
    step vllm-tests "$T_VLLM" python3 -m pytest -c pyproject.toml --rootdir . -m vllm -q \
        -p no:cacheprovider -W ignore::ResourceWarning \
        -W ignore::pytest.PytestUnraisableExceptionWarning \
        tests/engines/test_vllm_real.py tests/cli/test_vllm_train.py
    VLLM_MODEL=${AGENTGYM_VLLM_TEST_MODEL:-runs/models/smollm2-135m-instruct}
    if [ -f "$VLLM_MODEL/config.json" ]; then
        step vllm-engine "$T_VLLM" python3 bench/bench_engines.py --model "$VLLM_MODEL" \
            --device "$DEVICE" --batch 16 --new-tokens 128 --json "$JSON"
    else
        skip vllm-engine "no model at $VLLM_MODEL (agentgym model fetch smollm2-135m-instruct)"
    fi
else
    skip vllm "python3 does not import vLLM (pip install \".[vllm]\" on a CUDA machine)"
fi

{
    echo
    echo "## Figures"
    echo
    echo "| what | model | precision | shape | time | throughput | peak GiB |"
    echo "|---|---|---|---|---:|---:|---:|"
    grep -h '^| learner\|^| HF engine' "$RESULTS"/learner.log "$RESULTS"/learner-fsdp2.log \
        "$RESULTS"/learner-prefix.log "$RESULTS"/engine.log "$RESULTS"/engine-slab.log 2>/dev/null
    echo
    echo "| weights | method | seconds | GB/s | learner extra RSS MB | actor extra RSS MB |"
    echo "|---|---|---:|---:|---:|---:|"
    grep -h '| stream |' "$RESULTS"/weights.log 2>/dev/null
    echo
    if [ -f "$RESULTS/quickstart.log" ]; then
        echo "Quickstart: the last step line and the eval of its checkpoint"
        echo
        grep -h '^step [0-9]' "$RESULTS/quickstart.log" | tail -n 1 | sed 's/^/    /'
        awk '/tasks +episodes/ {on = 1} on && /^avg@/ {exit} on' "$RESULTS/quickstart.log" \
            | sed 's/^/    /'
        echo
    fi
    grep -h 'passed\|failed\|skipped\|error' "$RESULTS"/gpu-tests.log 2>/dev/null | tail -n 1 \
        | sed 's/^/gpu tests: /'
} >>"$SUMMARY"
rm -rf "$WORK"
echo
cat "$SUMMARY"
echo "gpu_check: $FAILED step(s) failed; results in $RESULTS"
[ "$FAILED" -eq 0 ]
