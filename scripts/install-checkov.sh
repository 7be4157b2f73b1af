#!/usr/bin/env bash
# Installs checkov in its own venv (its pinned dependencies clash with karpy's), idempotently.
# Usage: scripts/install-checkov.sh [VENV_DIR]   (default ~/.cache/karpy/checkov-venv)
set -euo pipefail
VENV=${1:-$HOME/.cache/karpy/checkov-venv}
if [[ -x $VENV/bin/checkov ]]; then echo "checkov already installed in $VENV"; exit 0; fi
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q 'checkov>=3.2,<4'
"$VENV/bin/checkov" --version
