"""A run's control folder, and unix sockets in it that only that run's sandbox can use.

The db kind's broker (db_broker.py) and the rest kind's egress proxy (egress_proxy.py) serve a
unix socket in a per-run folder that the sandbox sees at /run/undoable. A socket's path is no
secret (/proc/net/unix lists it), so two layers keep everyone else out:

1. The folder is 0700 and owned by the sandbox's host uid, the socket 0600 and owned by it too:
   no other local user (`nobody`, a web app's own uid) can reach the path at all.
2. Each accepted connection is believed only when the kernel's SO_PEERCRED says the peer has
   the sandbox's uid AND that peer sees this very folder at /run/undoable: a process of this
   run's sandbox. Every sandbox has the same host uid, so uid alone cannot tell runs apart;
   the mount can: another run sees its own folder there, a host process of that uid sees none.

The sandbox's host uid is `sandbox_host_uid(backend)` (executor/kinds/sandbox.py): under the
bwrap backend run as root, SANDBOX_UID (65600) for every run; run unprivileged, the server's own
uid. The Docker backend mounts no folder (its runs cannot use these kinds).
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import tempfile
from pathlib import Path

from executor.policy.mounts import CONTROL_DIR

__all__ = ["control_folder", "listen", "peer_refusal", "sandbox_uid"]

FOLDER_MODE = 0o700
SOCKET_MODE = 0o600
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def sandbox_uid(uid: int | None) -> int:
    """The host uid a run's sandbox has: `uid`, or this process's own when None."""
    return os.geteuid() if uid is None else uid


def control_folder(base: Path, *, prefix: str, uid: int | None) -> Path:
    """A fresh folder under `base` for one run: only the sandbox's uid (and root) can enter.

    The host writes the run's files into it as itself; they stay the host's, readable through
    the folder (mounted read-only in the sandbox).
    """
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        _own(folder, FOLDER_MODE, uid)
    except OSError:
        folder.rmdir()
        raise
    return folder


def listen(path: Path, *, uid: int | None, backlog: int) -> socket.socket:
    """A non-blocking listening unix socket at `path`, usable by the sandbox's uid only."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        _own(path, SOCKET_MODE, uid)
        server.listen(backlog)
        server.setblocking(False)
    except OSError:
        server.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        raise
    return server


def _own(path: Path, mode: int, uid: int | None) -> None:
    owner = sandbox_uid(uid)
    if owner != os.geteuid():
        os.chown(path, owner, owner, follow_symlinks=False)
    os.chmod(path, mode)  # just made by us, in a folder no one else can write


def peer_refusal(conn: socket.socket, *, uid: int | None, folder: Path) -> str | None:
    """Why the peer of `conn` is not this run's sandbox, or None when it is.

    `folder` is the run's control folder; the peer must have the sandbox's uid and see that
    folder (same device and inode, found without following links) at /run/undoable.
    """
    pid, peer_uid, _ = _CRED.unpack(
        conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    )
    if peer_uid != sandbox_uid(uid):
        return f"peer uid {peer_uid} is not the sandbox's"
    if pid <= 0:
        return "the peer's process is not visible from here"
    try:
        theirs = _control_dir_of(pid)
        ours = os.stat(folder, follow_symlinks=False)
    except OSError as exc:
        return f"cannot see the peer's {CONTROL_DIR}: {exc.strerror}"
    if (theirs.st_dev, theirs.st_ino) != (ours.st_dev, ours.st_ino):
        return f"the peer (pid {pid}) is another sandbox, or none"
    return None


def _control_dir_of(pid: int) -> os.stat_result:
    """stat() of what process `pid` sees at CONTROL_DIR, walked from its root with no link
    followed (an absolute link there would resolve against our root, not the peer's)."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    fd = os.open(f"/proc/{pid}/root", flags)
    try:
        for part in CONTROL_DIR.strip("/").split("/"):
            inner = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        return os.fstat(fd)
    finally:
        os.close(fd)
