#!/usr/bin/env bash
# buildah (image builds without a container daemon), debootstrap (a base image from Debian packages when no
# registry can be reached), skopeo (pushing the OCI archive) and uidmap, from Debian's packages. Quick when present.
set -euo pipefail
need=()
for tool in buildah:buildah debootstrap:debootstrap skopeo:skopeo newuidmap:uidmap; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
if [[ ${#need[@]} -eq 0 ]]; then
  echo "buildah, debootstrap and skopeo already installed ($(buildah --version))"
  exit 0
fi
SUDO=()
[[ $(id -u) -eq 0 ]] || SUDO=(sudo)
echo "installing ${need[*]} from Debian's packages"
"${SUDO[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${need[@]}"
buildah --version
