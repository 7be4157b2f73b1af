#!/usr/bin/env bash
# Builds the controller image from Containerfile with buildah (no container daemon) and writes it as an OCI archive
# under dist/. The tag is the package version (pyproject.toml), the tag the stacks deploy.
#
# The base is BASE_IMAGE (default: the Containerfile's slim Python image). When no registry can be reached, a base is
# built from Debian's packages with debootstrap instead, and kept as an OCI archive under ~/.cache/karpy/ so later
# builds reuse it. Dependencies are installed at the versions pinned in requirements-image.txt; --update-lock (or a
# missing lock) resolves them afresh in the base and rewrites that file.
#
# Usage: scripts/build-image.sh [--update-lock]
# Env:   BASE_IMAGE, IMAGE_REPOSITORY (default: the stacks' default repository), IMAGE_SOURCE (the
#        org.opencontainers.image.source label; default: the git remote "origin"), DEBIAN_MIRROR (for debootstrap;
#        default: the host's apt mirror), KARPY_CACHE (default: ~/.cache/karpy).
# Prints at the end: the image name, its archive, its size, and how to push it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
update_lock=0
for arg in "$@"; do
  case $arg in
    --update-lock) update_lock=1 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-image.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
step() { printf '\n== %s\n' "$*"; }
started=$SECONDS

bash scripts/install-buildah.sh
B=(buildah --storage-driver vfs)
export BUILDAH_ISOLATION=chroot
PY=python3
[[ -x .venv/bin/python ]] && PY=.venv/bin/python

VERSION=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
REPOSITORY=${IMAGE_REPOSITORY:-$("$PY" -c 'from stacks.environments import EnvironmentConfig as E; print(E.image_repository)')}
IMAGE="$REPOSITORY:$VERSION"
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[[ $REVISION != unknown && -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]] && REVISION="$REVISION-dirty"
SOURCE=${IMAGE_SOURCE:-$(git config --get remote.origin.url 2>/dev/null || echo unknown)}
CACHE=${KARPY_CACHE:-$HOME/.cache/karpy}
DEFAULT_BASE=$(sed -n 's/^ARG BASE=//p' Containerfile)
BASE=${BASE_IMAGE:-$DEFAULT_BASE}
LOCAL_BASE=localhost/karpy-base:bookworm
BASE_ARCHIVE=$CACHE/image-base/karpy-base-bookworm.oci.tar
ARCHIVE=dist/karpy-controller-$VERSION.oci.tar

# pip in the build containers trusts the host's CA bundle (a TLS-inspecting proxy the host trusts then works too); it
# is mounted over the container's bundle for the build steps only, so the image keeps its own.
HOST_CA=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
CA_MOUNT=()
CA_ARG=()
if [[ -f $HOST_CA ]]; then
  CA_MOUNT=(--volume "$(readlink -f "$HOST_CA"):/etc/ssl/certs/ca-certificates.crt:ro")
  CA_ARG=(--build-arg PIP_CERT=/etc/ssl/certs/ca-certificates.crt)
fi

have_image() { "${B[@]}" inspect --type image "$1" >/dev/null 2>&1; }

# The Debian mirror the host's apt uses (deb822 or one-line sources), so debootstrap fetches from the same place.
host_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ {print u; exit}' "$f"
  done | head -n1
  if [[ -f /etc/apt/sources.list ]]; then
    awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list
  fi
}

# A minimal Debian bookworm with Python 3, current with bookworm-updates and bookworm-security.
build_debian_base() {
  local mirror ctr mnt
  mirror=${DEBIAN_MIRROR:-$(host_mirror | head -n1)}
  ctr=$("${B[@]}" from scratch)
  mnt=$("${B[@]}" mount "$ctr")
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,netbase bookworm "$mnt" \
    ${mirror:+"$mirror"} > "$CACHE/image-base/debootstrap.log" 2>&1 \
    || { tail -n 20 "$CACHE/image-base/debootstrap.log" >&2; "${B[@]}" rm "$ctr" >/dev/null; return 1; }
  mirror=$(awk '$1 == "deb" {print $2; exit}' "$mnt/etc/apt/sources.list")
  cat > "$mnt/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
EOF
  "${B[@]}" run --network host "$ctr" -- sh -c \
    'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get upgrade -y -q && apt-get clean' \
    >> "$CACHE/image-base/debootstrap.log" 2>&1 \
    || { tail -n 20 "$CACHE/image-base/debootstrap.log" >&2; "${B[@]}" rm "$ctr" >/dev/null; return 1; }
  rm -rf "$mnt"/var/lib/apt/lists/* "$mnt"/var/cache/apt/*.bin "$mnt"/var/log/*.log "$mnt"/var/log/apt/*
  "${B[@]}" umount "$ctr" >/dev/null
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --cmd python3 --label org.opencontainers.image.description="Debian bookworm minbase with Python 3" "$ctr"
  "${B[@]}" commit --rm -q "$ctr" "$LOCAL_BASE" >/dev/null
  rm -f "$BASE_ARCHIVE"
  "${B[@]}" push -q "$LOCAL_BASE" "oci-archive:$BASE_ARCHIVE:$LOCAL_BASE"
}

step "base image"
mkdir -p "$CACHE/image-base" dist
if have_image "$BASE" || timeout 120 "${B[@]}" pull -q "$BASE" > "$CACHE/image-base/pull.log" 2>&1; then
  echo "base: $BASE"
elif [[ -n ${BASE_IMAGE:-} ]]; then
  echo "cannot pull BASE_IMAGE=$BASE: $(tail -n1 "$CACHE/image-base/pull.log")" >&2
  exit 1
else
  echo "no registry reachable for $BASE ($(tail -n1 "$CACHE/image-base/pull.log" | cut -c1-160))"
  if have_image "$LOCAL_BASE"; then
    echo "base: $LOCAL_BASE, built earlier from Debian's packages"
  elif [[ -f $BASE_ARCHIVE ]]; then
    echo "base: $LOCAL_BASE from the cached $BASE_ARCHIVE"
    "${B[@]}" pull -q "oci-archive:$BASE_ARCHIVE" >/dev/null
  else
    echo "building a base from Debian's packages instead (debootstrap bookworm minbase + python3, about 2 minutes);"
    echo "it is cached as $BASE_ARCHIVE"
    t=$SECONDS
    build_debian_base
    echo "base: $LOCAL_BASE built in $((SECONDS - t)) s"
  fi
  BASE=$LOCAL_BASE
fi
BASE_ID=$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "$BASE")

step "wheel"
t=$SECONDS
rm -f dist/karpy-*.whl
"$PY" -m pip wheel -q --no-deps -w dist . 2>&1 | grep -v "^$" || true
WHEEL=dist/karpy-$VERSION-py3-none-any.whl
[[ -f $WHEEL ]] || { echo "pip wheel did not produce $WHEEL" >&2; exit 1; }
rm -rf build
echo "$WHEEL in $((SECONDS - t)) s"

if (( update_lock )) || [[ ! -f requirements-image.txt ]]; then
  step "lock: resolving karpy's dependencies in $BASE"
  ctr=$("${B[@]}" from -q --pull=never "$BASE")
  trap '"${B[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
  "${B[@]}" copy -q "$ctr" "$WHEEL" /tmp/ >/dev/null
  pyver=$("${B[@]}" run "$ctr" -- python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  {
    echo "# The versions the controller image installs (pip install --no-deps -r), resolved for Python $pyver."
    echo "# Regenerate with: scripts/build-image.sh --update-lock"
    "${B[@]}" run --network host "${CA_MOUNT[@]}" "$ctr" -- sh -c "python3 -m venv /tmp/venv && \
      /tmp/venv/bin/pip install -q --disable-pip-version-check ${CA_ARG:+--cert /etc/ssl/certs/ca-certificates.crt} \
      /tmp/$(basename "$WHEEL") && /tmp/venv/bin/pip freeze --exclude karpy"
  } > requirements-image.txt.new
  mv requirements-image.txt.new requirements-image.txt
  "${B[@]}" rm "$ctr" >/dev/null
  trap - EXIT
  echo "requirements-image.txt: $(grep -vc '^#' requirements-image.txt) pinned packages"
fi

step "image $IMAGE"
# What the image is made of; an image already tagged with the same inputs (and its archive) is reused as is.
inputs=$("$PY" - "$WHEEL" "$BASE_ID" "$VERSION" "$REVISION" "$SOURCE" <<'PY'
import hashlib, sys, zipfile
h = hashlib.sha256("\0".join(sys.argv[2:]).encode())
for path in ("Containerfile", "requirements-image.txt"):
    h.update(open(path, "rb").read())
with zipfile.ZipFile(sys.argv[1]) as wheel:  # the files, not the zip's timestamps
    for name in sorted(wheel.namelist()):
        h.update(name.encode() + b"\0" + wheel.read(name))
print(h.hexdigest())
PY
)
old_id=$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "$IMAGE" 2>/dev/null || true)
old_inputs=$("${B[@]}" inspect --type image --format '{{index .ImageAnnotations "io.karpy.image.inputs"}}' "$IMAGE" \
  2>/dev/null || true)
if [[ -n $old_id && $old_inputs == "$inputs" && -f $ARCHIVE ]]; then
  echo "up to date: $IMAGE ($old_id) was built from the same inputs; $ARCHIVE kept"
else
  t=$SECONDS
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  mkdir "$ctx/dist"
  cp "$WHEEL" "$ctx/dist/"
  cp requirements-image.txt "$ctx/"
  "${B[@]}" build --isolation chroot --network host -q -f Containerfile -t "$IMAGE" "${CA_MOUNT[@]}" "${CA_ARG[@]}" \
    --annotation "io.karpy.image.inputs=$inputs" --build-arg BASE="$BASE" --build-arg VERSION="$VERSION" \
    --build-arg REVISION="$REVISION" --build-arg SOURCE="$SOURCE" "$ctx" > dist/image-build.log 2>&1 \
    || { tail -n 30 dist/image-build.log >&2; echo "the image build failed; see dist/image-build.log" >&2; exit 1; }
  rm -rf "$ctx"
  trap - EXIT
  new_id=$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "$IMAGE")
  if [[ -n $old_id && $old_id != "$new_id" ]]; then
    "${B[@]}" rmi "$old_id" >/dev/null 2>&1 || true  # the previous build of this tag, now untagged
  fi
  echo "built $new_id in $((SECONDS - t)) s"

  step "archive"
  t=$SECONDS
  rm -f "$ARCHIVE"
  "${B[@]}" push -q "$IMAGE" "oci-archive:$ARCHIVE:$IMAGE"
  echo "written in $((SECONDS - t)) s"
fi
size=$("${B[@]}" images --format '{{.Size}}' "$IMAGE" | head -n1)
echo "$ARCHIVE: $(du -h "$ARCHIVE" | cut -f1) compressed, $size unpacked"

cat <<EOF

$IMAGE (revision $REVISION) ready in $((SECONDS - started)) s.
Push it with either:
  skopeo copy oci-archive:$ARCHIVE docker://$IMAGE
  buildah --storage-driver vfs push $IMAGE docker://$IMAGE
image: $IMAGE
archive: $ARCHIVE
EOF
