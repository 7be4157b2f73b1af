#!/usr/bin/env bash
# The whole test suite from a fresh machine: installs karpy, its test world (Kubernetes control plane built from
# Debian's source package and cached under ~/.cache, LocalStack in its own Python >= 3.12 venv, checkov in its own
# venv), buildah for the controller image, then runs ruff, mypy and pytest (unit, synth and integration tests against
# the real servers, and the image built and run with buildah).
# Usage: scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
step() { printf '\n== %s\n' "$*"; }

step "karpy into .venv"
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[infra,dev]'

step "test world"
bash scripts/build-kube-control-plane.sh
bash scripts/install-localstack.sh
bash scripts/install-checkov.sh
bash scripts/install-buildah.sh

step "ruff"
.venv/bin/ruff check .
step "mypy"
.venv/bin/mypy .

step "pytest"
set +e
.venv/bin/pytest "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "pytest ran no tests: that is a failure here" >&2
  exit 1
fi
exit $rc
