#!/usr/bin/env bash
# Runs LocalStack as a plain host process (no Docker) and waits until it answers.
# Usage: scripts/start-localstack.sh RUN_DIR [PORT] [VENV_DIR]
#   -> RUN_DIR/pid, RUN_DIR/localstack.log; endpoint http://127.0.0.1:PORT (default 4566)
set -euo pipefail
RUN=${1:?run dir}; PORT=${2:-4566}; VENV=${3:-$HOME/.cache/karpy/localstack-venv}
[[ -x $VENV/bin/python ]] || { echo "$VENV missing: run scripts/install-localstack.sh" >&2; exit 1; }
mkdir -p "$RUN"
cd "$RUN"
GATEWAY_LISTEN=127.0.0.1:$PORT DNS_ADDRESS=0 LOCALSTACK_VOLUME_DIR=$RUN/volume SKIP_SSL_CERT_DOWNLOAD=1 \
  setsid "$VENV/bin/python" -m localstack.runtime.main > "$RUN/localstack.log" 2>&1 &
echo $! > "$RUN/pid"
for _ in $(seq 1 900); do
  if curl -sf -m1 "http://127.0.0.1:$PORT/_localstack/health" >/dev/null 2>&1; then
    echo "localstack ready on $PORT"; exit 0
  fi
  kill -0 "$(cat "$RUN/pid")" 2>/dev/null || break
  sleep 0.1
done
echo "localstack did not become ready; see $RUN/localstack.log" >&2
tail -n 30 "$RUN/localstack.log" >&2 || true
exit 1
