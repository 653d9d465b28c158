#!/usr/bin/env bash
# Build docker-compose.yml's images without any registry (compose_smoke.sh, `make
# loadtest-compose` and tests/bench/bench_compose.py use this):
#
#   bash tests/fault/compose_images.sh [PROJECT]      (needs dockerd, the sandbox rootfs and image)
#
# BASE_IMAGE: the sandbox root filesystem (Debian bookworm + python3 + pip) imported with
# `docker import` as undoable-base:local, again only when the rootfs changed. var/docker-ca.crt:
# the host's CA bundle, so pip inside the build trusts the same TLS proxy the host does (harmless
# where there is none).
set -euo pipefail
cd "$(dirname "$0")/../.."

rootfs=${ROOTFS:-var/sandbox-rootfs}
base=${BASE_IMAGE:-undoable-base:local}
project=${1:-undoable-build-$$}

[ -f "$rootfs/etc/undoable-rootfs-built" ] || { echo "no sandbox rootfs: make sandbox-rootfs" >&2; exit 1; }
docker image inspect "${EXECUTOR_DOCKER_IMAGE:-undoable-sandbox:latest}" >/dev/null 2>&1 \
  || { echo "no sandbox image: make sandbox-image" >&2; exit 1; }

stamp=$(cat "$rootfs/etc/undoable-rootfs-built")
if [ "$(docker image inspect -f '{{index .Config.Labels "undoable.rootfs"}}' "$base" 2>/dev/null)" != "$stamp" ]; then
  echo "importing $rootfs as $base" >&2
  tar -C "$rootfs" -c . | docker import --change "LABEL undoable.rootfs=$stamp" - "$base" >/dev/null
fi
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  cp /etc/ssl/certs/ca-certificates.crt var/docker-ca.crt
fi

echo "building images on $base" >&2
export BASE_IMAGE=$base
if docker compose version >/dev/null 2>&1; then
  docker compose -p "$project" build -q
else
  docker-compose -p "$project" build -q
fi
