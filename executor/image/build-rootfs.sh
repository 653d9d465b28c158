#!/usr/bin/env bash
# Build the sandbox root filesystem with debootstrap (no registry pull; Debian's mirror only).
# The bwrap backend mounts this folder read-only as /; `docker import` turns it into the
# Docker backend's image, so both backends run exactly the same programs.
#
#   build-rootfs.sh DEST        (needs root, the debootstrap package and pip: PIP="python3 -m pip")
set -euo pipefail

dest=${1:?usage: build-rootfs.sh DEST}
mkdir -p "$(dirname "$dest")"
dest=$(realpath -m "$dest")  # debootstrap changes directory: a relative DEST would move
suite=${SANDBOX_SUITE:-bookworm}
mirror=${SANDBOX_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}
# What user code may import, beyond the standard library. Keep in step with README.md.
packages=python3,python3-requests,python3-psycopg2,python3-pip,python3-numpy,ca-certificates,sqlite3,procps
# matplotlib comes as PyPI wheels: Debian's python3-matplotlib drags scipy, sympy and g++ in
# through fonttools (a 1.2 GB root instead of ~0.3 GB). These pins fit Debian's numpy 1.24.
plot_wheels="matplotlib==3.9.4 contourpy==1.2.1"

if [ "$(id -u)" != 0 ]; then
  echo "build-rootfs.sh needs root (debootstrap). Run: sudo make sandbox-image" >&2
  exit 1
fi
command -v debootstrap >/dev/null || {
  echo "debootstrap is missing. Run: sudo apt-get install -y debootstrap" >&2
  exit 1
}

tmp="$dest.tmp"
rm -rf "$tmp" "$dest.old"
debootstrap --variant=minbase --include="$packages" "$suite" "$tmp" "$mirror"

# Fetched by the host's pip (the sandbox has no network), installed by the sandbox's own.
mkdir -p "$tmp/tmp/wheels"
${PIP:-python3 -m pip} download --quiet --only-binary=:all: --implementation cp --python-version 3.11 \
  --abi cp311 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
  --dest "$tmp/tmp/wheels" $plot_wheels numpy==1.24.2
chroot "$tmp" python3 -m pip install --quiet --no-index --find-links /tmp/wheels \
  --break-system-packages --no-warn-script-location $plot_wheels
rm -rf "$tmp/tmp/wheels"

# The unprivileged user programs run as, inside both backends.
chroot "$tmp" groupadd --gid 1000 sandbox
chroot "$tmp" useradd --uid 1000 --gid 1000 --home-dir /workspace --no-create-home --shell /bin/bash sandbox
mkdir -p "$tmp/workspace" && chown 1000:1000 "$tmp/workspace"

# Nothing a sandbox needs: package caches, docs, apt state, setuid bits.
rm -rf "$tmp"/var/cache/apt/* "$tmp"/var/lib/apt/lists/* "$tmp"/usr/share/doc/* \
  "$tmp"/usr/share/man/* "$tmp"/usr/share/locale/* "$tmp"/var/log/*
find "$tmp" -xdev -perm /6000 -type f -exec chmod ug-s {} +
# Start-up work every sandbox's python3 pays for nothing (~0.7 ms of CPU per sandbox): Debian's
# sitecustomize looks for apport, which is not installed, and setuptools' .pth imports its
# distutils shim. `import distutils` still works; it is the standard library's.
rm -f "$tmp"/etc/python3*/sitecustomize.py "$tmp"/usr/lib/python3*/sitecustomize.py \
  "$tmp"/usr/lib/python3/dist-packages/distutils-precedence.pth
: > "$tmp/etc/shadow"
echo "sandbox" > "$tmp/etc/hostname"
printf '127.0.0.1 localhost sandbox\n::1 localhost\n' > "$tmp/etc/hosts"
date -u +%FT%TZ > "$tmp/etc/undoable-rootfs-built"

# Swapped in with two renames, so sandboxes starting meanwhile miss it for an instant at most;
# the old tree stays until the next build, since running sandboxes still have it mounted.
if [ -e "$dest" ]; then mv "$dest" "$dest.old"; fi
mv "$tmp" "$dest"
echo "sandbox root filesystem ready in $dest"
