#!/bin/sh
# Entrypoint of the app-bwrap image (docker-compose.yml's app services). Started as root with
# only CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID and CAP_SETPCAP, it removes the masks and read-only
# binds Docker lays over /proc, then becomes uid 10001 with no capability left (not even in the
# bounding set) before the app starts. What `--security-opt systempaths=unconfined` does, for
# Compose v1, which cannot pass that option. bwrap needs it: the kernel lets a user namespace
# mount a fresh /proc only where a /proc is already fully visible, and bwrap writes
# /proc/sys/user/max_user_namespaces in each sandbox. docs/deployment.md, "Privileges".
set -eu
if [ "$(id -u)" = 0 ]; then
  # Innermost first. Without CAP_SYS_ADMIN this fails and the sandbox backend's self-check
  # says why; the app still starts (the Docker backend does not need it).
  for path in $(cut -d' ' -f5 /proc/self/mountinfo | grep '^/proc/' | sort -r); do
    umount "$path" || echo "app-entrypoint: $path stays masked: bubblewrap cannot run here" >&2
  done
  # Its own group and those compose's `group_add` gave (the Docker socket's, with the Docker
  # backend override), never root's.
  groups=$( (id -g undoable; id -G | tr ' ' '\n') | grep -vx 0 | sort -un | paste -sd, -)
  exec setpriv --reuid=undoable --regid=undoable --groups="$groups" \
    --inh-caps=-all --ambient-caps=-all --bounding-set=-all -- "$@"
fi
exec "$@"
