#!/usr/bin/env bash
# Fresh-clone build time of the test command's two Rust builds, for one or more commits side by
# side: pip's build of the wheel (what `pip install .` compiles), then the `cargo test` line of
# that commit's tests/run.sh (build and run). Each commit is cloned from this checkout into a
# temporary folder with an empty target/, so nothing is reused between commits; the crates
# themselves come from cargo's download cache (~/.cargo/registry).
#
#     bash bench/bench_setup.sh HEAD                 # this checkout's HEAD
#     bash bench/bench_setup.sh bc6338e HEAD         # before/after, taken in turn
#
# Prints one markdown row per commit: seconds of each build and the size of target/ after both.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: bash bench/bench_setup.sh COMMIT [COMMIT...]" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
unset CARGO_TARGET_DIR

echo "| commit | wheel build s | cargo test (build + run) s | cargo test command | target/ after both |"
echo "|---|---:|---:|---|---:|"
for commit in "$@"; do
    sha="$(git -C "$repo" rev-parse --short "$commit")"
    dir="$work/$sha"
    git clone -q "$repo" "$dir"
    git -C "$dir" checkout -q "$sha"
    test_cmd="$(grep -E '^cargo test' "$dir/tests/run.sh" | head -1)"
    echo "[$sha] pip wheel (the release build)..." >&2
    start=$SECONDS
    (cd "$dir" && python3 -m pip wheel --no-deps -q -w "$dir/wheel" . >"$work/$sha.wheel.log" 2>&1) \
        || { echo "[$sha] wheel build failed, see its log:" >&2; tail -20 "$work/$sha.wheel.log" >&2; exit 1; }
    wheel_s=$((SECONDS - start))
    echo "[$sha] $test_cmd..." >&2
    start=$SECONDS
    (cd "$dir" && bash -c "$test_cmd" >"$work/$sha.test.log" 2>&1) \
        || { echo "[$sha] cargo test failed, see its log:" >&2; tail -20 "$work/$sha.test.log" >&2; exit 1; }
    test_s=$((SECONDS - start))
    size="$(du -sh "$dir/target" | cut -f1)"
    echo "| $sha | $wheel_s | $test_s | \`$test_cmd\` | $size |"
    rm -rf "$dir"
done
