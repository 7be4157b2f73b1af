#!/usr/bin/env bash
# Starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager on loopback in the background and writes a
# kubeconfig. There is no kubelet: tests register Nodes themselves (tests/integration/kubelet.py) and the real
# scheduler binds pods to them.
# Usage: scripts/start-kube-control-plane.sh RUN_DIR [BIN_DIR]
#   AUTHORIZATION_MODE=RBAC for an apiserver that enforces RBAC (default AlwaysAllow; the admin token is in
#   system:masters either way, so the scheduler and controller-manager work under both).
#   -> RUN_DIR/kubeconfig, RUN_DIR/pids (stop: kill $(cat RUN_DIR/pids)), RUN_DIR/*.log. Ready in about 4 s.
set -euo pipefail
RUN=${1:?run dir}; BIN=${2:-$HOME/.cache/kube-control-plane/bin}
for b in etcd kube-apiserver kube-scheduler kube-controller-manager; do
  [[ -x $BIN/$b ]] || { echo "$BIN/$b missing: run scripts/build-kube-control-plane.sh" >&2; exit 1; }
done
mkdir -p "$RUN"; : > "$RUN/pids"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
EP=$(free_port); PP=$(free_port); AP=$(free_port)
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
openssl genrsa -out "$RUN/sa.key" 2048 2>/dev/null
echo "$TOKEN,admin,admin,\"system:masters\"" > "$RUN/tokens.csv"
cat > "$RUN/kubeconfig" <<K
apiVersion: v1
kind: Config
clusters: [{name: karpy-test, cluster: {server: "https://127.0.0.1:$AP", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: "$TOKEN"}}]
contexts: [{name: karpy-test, context: {cluster: karpy-test, user: admin}}]
current-context: karpy-test
K
setsid "$BIN/etcd" --data-dir "$RUN/etcd" --name karpy-test \
  --listen-client-urls "http://127.0.0.1:$EP" --advertise-client-urls "http://127.0.0.1:$EP" \
  --listen-peer-urls "http://127.0.0.1:$PP" --initial-advertise-peer-urls "http://127.0.0.1:$PP" \
  --initial-cluster "karpy-test=http://127.0.0.1:$PP" > "$RUN/etcd.log" 2>&1 &
echo $! >> "$RUN/pids"
setsid "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$EP" --cert-dir="$RUN/certs" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$AP" --insecure-port=0 \
  --token-auth-file="$RUN/tokens.csv" --authorization-mode="${AUTHORIZATION_MODE:-AlwaysAllow}" \
  --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$RUN/sa.key" \
  --service-account-signing-key-file="$RUN/sa.key" --service-cluster-ip-range=10.0.0.0/24 \
  --disable-admission-plugins=ServiceAccount --allow-privileged=true > "$RUN/apiserver.log" 2>&1 &
echo $! >> "$RUN/pids"
ready=0
for _ in $(seq 1 300); do
  if curl -ksf -m1 -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$AP/readyz" >/dev/null 2>&1; then
    ready=1; break
  fi
  sleep 0.1
done
if (( ! ready )); then echo "kube-apiserver did not become ready; see $RUN/apiserver.log" >&2; exit 1; fi
# trust the apiserver's self-signed CA (its serving certificate file carries it) rather than skip verification
CA="$(cd "$RUN/certs" && pwd)/apiserver.crt"
sed -i "s|insecure-skip-tls-verify: true|certificate-authority: \"$CA\"|" "$RUN/kubeconfig"
common=(--kubeconfig="$RUN/kubeconfig" --authentication-kubeconfig="$RUN/kubeconfig"
        --authorization-kubeconfig="$RUN/kubeconfig" --leader-elect=false --port=0 --secure-port=0)
setsid "$BIN/kube-scheduler" "${common[@]}" > "$RUN/scheduler.log" 2>&1 &
echo $! >> "$RUN/pids"
setsid "$BIN/kube-controller-manager" "${common[@]}" --controllers='*,-serviceaccount-token' \
  --use-service-account-credentials=false > "$RUN/controller-manager.log" 2>&1 &
echo $! >> "$RUN/pids"
echo "kubeconfig: $RUN/kubeconfig"
