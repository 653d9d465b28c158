#!/bin/sh
# Entrypoint of the app-bwrap image (docker-compose.yml's app services). Started as root with
# only CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID, CAP_SETPCAP and CAP_CHOWN, it removes the masks and
# read-only binds Docker lays over /proc, lets the app divide the container's cgroups, then
# becomes uid 10001 with no capability left (not even in the bounding set) before the app starts. What `--security-opt systempaths=unconfined` does, for
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
  # Per-sandbox cgroups (cgroup v1, which the bwrap backend uses): the container's own memory,
  # pids and cpu groups become the app's to divide. Writable mounts, and the group directories
  # (not their limit files) owned by uid 10001: it may create groups under them, never raise
  # the container's own limits. A cgroup namespace rooted there lets the backend find them.
  cgroupns=
  for controller in memory pids cpu; do
    dir=/sys/fs/cgroup/$controller
    cut -d' ' -f5 /proc/self/mountinfo | grep -qx "$dir" || continue  # v2: none of these
    if mount -o remount,bind,rw "$dir" && chown undoable "$dir"; then
      cgroupns=--cgroup
    else
      echo "app-entrypoint: $dir stays read-only: sandboxes get no cgroups of their own" >&2
    fi
  done
  # Its own group and those compose's `group_add` gave (the Docker socket's, with the Docker
  # backend override), never root's.
  groups=$( (id -g undoable; id -G | tr ' ' '\n') | grep -vx 0 | sort -un | paste -sd, -)
  exec unshare $cgroupns -- setpriv --reuid=undoable --regid=undoable --groups="$groups" \
    --inh-caps=-all --ambient-caps=-all --bounding-set=-all -- "$@"
fi
exec "$@"
