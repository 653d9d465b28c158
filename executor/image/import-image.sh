#!/usr/bin/env bash
# Turn the sandbox root filesystem into a Docker image with `docker import` (no registry).
#   import-image.sh ROOTFS IMAGE
# The image carries no command of its own: DockerBackend starts its supervisor explicitly.
set -euo pipefail
rootfs=${1:?usage: import-image.sh ROOTFS IMAGE}
image=${2:?usage: import-image.sh ROOTFS IMAGE}
docker info >/dev/null 2>&1 || { echo "no Docker engine is running (start dockerd)" >&2; exit 1; }
[ -f "$rootfs/etc/undoable-rootfs-built" ] || {
  echo "no finished root filesystem in $rootfs: run make sandbox-rootfs" >&2
  exit 1
}
stamp=$(cat "$rootfs/etc/undoable-rootfs-built")
if [ "$(docker image inspect -f '{{index .Config.Labels "undoable.rootfs"}}' "$image" 2>/dev/null)" = "$stamp" ]; then
  echo "$image is up to date ($stamp)"
  exit 0
fi
tar -C "$rootfs" -c . | docker import \
  --change 'USER 1000:1000' \
  --change 'WORKDIR /workspace' \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 HOME=/workspace' \
  --change "LABEL undoable.rootfs=$stamp" \
  - "$image" >/dev/null
# Smoke test under the sandbox's own restrictions: no network, read-only root, no capabilities.
out=$(docker run --rm --network none --read-only --cap-drop ALL --security-opt no-new-privileges \
  --log-driver none -a stdout "$image" python3 -I -S -c 'import os; print(os.getuid())')
[ "$out" = 1000 ] || { echo "$image does not run python3 as uid 1000 (got: $out)" >&2; exit 1; }
echo "built $image ($stamp)"
