#!/usr/bin/env bash
# Builds the Kubernetes control plane the integration tests run against, without Docker and with no network but
# Debian's archive: etcd (Debian's etcd-server package) and kube-apiserver, kube-scheduler, kube-controller-manager
# v1.20.2 compiled from Debian bookworm's `kubernetes` source package (which vendors its Go dependencies) with
# Debian's Go 1.19. Nothing is installed system-wide: packages are unpacked under the work folder.
# Usage: scripts/build-kube-control-plane.sh [OUT_DIR]   (default ~/.cache/kube-control-plane)
#   -> OUT_DIR/bin/{etcd,kube-apiserver,kube-scheduler,kube-controller-manager}
# About 6 minutes on 2 cores the first time; returns at once when the binaries are there.
set -euo pipefail
OUT=${1:-$HOME/.cache/kube-control-plane}
BIN=$OUT/bin
if [[ -x $BIN/kube-apiserver && -x $BIN/kube-scheduler && -x $BIN/kube-controller-manager && -x $BIN/etcd ]]; then
  echo "control plane already built in $BIN"; exit 0
fi
need=()
for tool in make openssl curl dpkg-deb; do command -v "$tool" >/dev/null || need+=("$tool"); done
if (( ${#need[@]} )); then
  apt-get update -qq
  apt-get install -y -qq make openssl curl dpkg >/dev/null
fi
W=$OUT/work
rm -rf "$W"
mkdir -p "$BIN" "$W"/{debs,root,src,home,gocache,apt/lists/partial,apt/cache/archives/partial,wrap}
# a fresh machine may have empty package lists
apt-cache show golang-1.19-go >/dev/null 2>&1 || apt-get update -qq
cd "$W/debs"
apt-get download golang-1.19-go golang-1.19-src etcd-server rsync libpopt0 golang-github-modern-go-reflect2-dev
for d in *.deb; do dpkg-deb -x "$d" "$W/root"; done
# our own deb-src index, so the machine's apt configuration is left untouched
echo "deb-src http://deb.debian.org/debian bookworm main" > "$W/apt/sources.list"
APTOPT=(-o "Dir::Etc::SourceList=$W/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$W/apt/lists" -o "Dir::Cache=$W/apt/cache")
apt-get "${APTOPT[@]}" update >/dev/null
cd "$W/src"
apt-get "${APTOPT[@]}" source --download-only 'kubernetes=1.20.5+really1.20.2-1.1+deb12u1'
tar xzf kubernetes_1.20.5+really1.20.2.orig.tar.gz
cd "$W/src/kubernetes-1.20.2"
# The vendored modern-go/reflect2 1.0.1 crashes a Go >= 1.18 apiserver on the first custom resource;
# Debian's reflect2 1.0.2 does not.
rm -rf vendor/github.com/modern-go/reflect2
cp -r "$W/root/usr/share/gocode/src/github.com/modern-go/reflect2" vendor/github.com/modern-go/reflect2
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/root/usr/lib/x86_64-linux-gnu exec %s/root/usr/bin/rsync "$@"\n' "$W" "$W" \
  > "$W/wrap/rsync"
chmod +x "$W/wrap/rsync"
export GOROOT=$W/root/usr/lib/go-1.19 GOCACHE=$W/gocache GOPROXY=off HOME=$W/home
export PATH=$GOROOT/bin:$W/wrap:$PATH
export KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56
# `make` rather than `go build`: it runs the code generators (openapi-gen among them)
make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager" KUBE_BUILD_PLATFORMS=linux/amd64
cp _output/bin/kube-apiserver _output/bin/kube-scheduler _output/bin/kube-controller-manager \
   "$W/root/usr/bin/etcd" "$BIN/"
"$BIN/kube-apiserver" --version
rm -rf "$W"
echo "built into $BIN"
