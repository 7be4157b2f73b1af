#!/usr/bin/env bash
# Installs LocalStack (open-source localstack-core 2026.3.0) in its own venv, no Docker. It needs Python >= 3.12
# (pyenv's 3.12/3.13 here), and its loose dependency ranges are resolved as of its release date with uv's
# --exclude-newer, since later releases of cbor2, pyOpenSSL and others break it.
# Usage: scripts/install-localstack.sh [VENV_DIR]   (default ~/.cache/karpy/localstack-venv)
set -euo pipefail
VENV=${1:-$HOME/.cache/karpy/localstack-venv}
if [[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c 'import localstack' 2>/dev/null; then
  echo "localstack already installed in $VENV"; exit 0
fi
command -v uv >/dev/null || python3 -m pip install -q uv
UV=$(command -v uv || echo "python3 -m uv")
PY=$(ls -d "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/3.1[2-9]*/bin/python3 2>/dev/null | tail -n 1 || true)
[[ -n $PY ]] || PY=$($UV python find '>=3.12')
rm -rf "$VENV"
$UV venv -q -p "$PY" "$VENV"
VIRTUAL_ENV=$VENV $UV pip install -q --exclude-newer 2026-03-25 'localstack-core[runtime]==2026.3.0'
echo "localstack installed in $VENV"
