#!/usr/bin/env bash
# verl's integration tests (tests/integrations/test_verl_integration.py) in a virtual environment
# of their own: verl 0.9 pins transformers below the version agentgym's environment runs, so its
# [verl] extra cannot live beside [train]. The environment sees this one's packages (agentgym, torch)
# and holds its own verl and transformers; it is made once and reused.
# Usage: bash tests/run_verl.sh [extra pytest args]    (AGENTGYM_VERL_VENV: where it lives)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${AGENTGYM_VERL_VENV:-$PWD/.venv-verl}"
if [ ! -x "$venv/bin/python" ]; then
    echo "== python3 -m venv --system-site-packages $venv"
    python3 -m venv --system-site-packages "$venv"
fi
echo "== pip install .[verl] deps into $venv (torch held)"
pins="$(mktemp)"
python3 -m pip freeze | grep -iE '^(torch|numpy)==' >"$pins" || true
# transformers[kernels]: the system site's kernels (which agentgym's newer transformers needs) is
# too new for the transformers verl pins, and that one imports it whenever it is importable; the
# extra puts the kernels its own transformers accepts in this environment, ahead of the system's.
{ python3 tests/extra_requirements.py verl; echo "transformers[kernels]"; } \
    | xargs -r "$venv/bin/python" -m pip install --progress-bar off -c "$pins" 2>&1 \
    | sed -u -e '/^Requirement already satisfied/d' -e '/^  Requirement already/d'
rm -f "$pins"
echo "== pytest tests/integrations/test_verl_integration.py (in $venv)"
"$venv/bin/python" -m pytest -c pyproject.toml --rootdir . -p no:cacheprovider \
    tests/integrations/test_verl_integration.py "$@"
