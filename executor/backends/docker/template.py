"""The zygote's template in a Docker container: how the Docker backend starts stateless runs.

The bwrap backend's zygote (linux/zygote.py, docs/zygote.md) with another host for
its template: a locked-down container (docker_args.template_container_kwargs) instead of a
bwrap sandbox. Everything else is the same code: the template (policy/zygote_child.py) clones
each run into fresh namespaces, the host puts it in cgroups of its own after checking, across
the container's boundary, which process asks, and drives it with the bwrap backend's RunLoop.
One container then serves every stateless run, where a container per run costs the engine
~150-200 ms of CPU (docs/benchmarks.md).

That check needs the template's processes in our pid namespace, so an engine on this machine,
and the run's cgroups need root. Without them, or when the template fails, the Docker backend
runs each program in a container of its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import tempfile
from collections.abc import Callable
from typing import Any

import docker

from executor.linux import cgroups, fdwait
from executor.linux.cgroups import SandboxCgroup
from executor.linux.zygote import (
    TEMPLATE_LIMITS,
    Template,
    ZygoteUnavailable,
    payload_body,
)
from executor.policy.docker_args import TEMPLATE_SOCKET_FOLDER, template_container_kwargs
from executor.policy.seccomp import docker_profile, seccomp_bpf

# python3 -I -c: connect to the host's socket, take the payload, confine itself, serve.
_BOOTSTRAP = """import marshal, socket, sys
_control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
_control.connect(sys.argv[1])
_payload = marshal.loads(_control.recv(int(sys.argv[2])))
_zygote = type(sys)("undoable_zygote")
exec(compile(_payload["zygote"], "zygote_child.py", "exec"), _zygote.__dict__)
_zygote.start(_payload, _control.detach())
"""
# How long a new template may take to connect (a container start, then an interpreter's).
CONNECT_TIMEOUT_S = 20.0
# How long an ending template gets to exit before its container is removed by force.
END_TIMEOUT_S = 2.0
FOLDER_PREFIX = "undoable-zygote-"
ROLE_LABEL = "undoable.role"

ClientFactory = Callable[[], docker.DockerClient]


def start_in_container(
    *, client: ClientFactory, image: str, uid: int, labels: dict[str, str]
) -> Template:
    """Start a template in a new container of `image`, as host uid `uid`.

    Its control socket is the first connection to a socket in a host folder only `uid` (and
    root) can enter, believed only when the kernel says the peer is the container's first
    process; the folder is root's again before the template gets its payload.
    """
    folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    container_id: str | None = None
    pidfd: int | None = None
    try:
        path = os.path.join(folder, "control.sock")
        listener.bind(path)
        listener.listen(1)
        for entry in (folder, path):
            os.chown(entry, uid, uid)
        os.chmod(folder, 0o700)
        payload = payload_body(
            template_bpf=seccomp_bpf(zygote=True),
            # /dev/mqueue: the container's message queues, which every run could write to.
            template_covers=("/sys", "/dev/mqueue", TEMPLATE_SOCKET_FOLDER),
        )
        inside = f"{TEMPLATE_SOCKET_FOLDER}/control.sock"
        kwargs = template_container_kwargs(
            image=image,
            command=["python3", "-I", "-c", _BOOTSTRAP, inside, str(len(payload))],
            labels={**labels, ROLE_LABEL: "zygote"},
            uid=uid,
            socket_folder=folder,
            limits=TEMPLATE_LIMITS,
            seccomp_profile=docker_profile(zygote=True),
        )
        api = client().api
        container_id = api.create_container(**kwargs)["Id"]
        api.start(container_id)
        pid = int(api.inspect_container(container_id)["State"]["Pid"])
        pidfd = _local_process(pid, container_id)
        control = _accept(listener, pidfd)
        # Nothing of `uid` may use the folder from now on (the template covers it too).
        os.unlink(path)
        os.chown(folder, 0, 0)
        _check_peer(control, pid, uid)
        control.sendall(payload)
    except (docker.errors.DockerException, OSError, ZygoteUnavailable, KeyError, ValueError) as exc:
        if pidfd is not None:
            os.close(pidfd)
        _remove(client, container_id)
        shutil.rmtree(folder, ignore_errors=True)
        raise ZygoteUnavailable(f"could not start the zygote in a container: {exc}") from exc
    finally:
        listener.close()
    return Template(ContainerHost(client, container_id, pid, pidfd, folder), control)


def remove_stale_folders(base: str | None = None) -> list[str]:
    """Remove the socket folders of templates whose backend's process is gone (it died without
    ending them; their containers go by their owner label, DockerBackend.reap_stale)."""
    base = base or tempfile.gettempdir()
    removed = []
    for name in os.listdir(base):
        owner = name.removeprefix(FOLDER_PREFIX).split("-", 1)[0]
        if name.startswith(FOLDER_PREFIX) and owner.isdigit() and not _alive(owner):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
            removed.append(name)
    return removed


def _alive(pid: str) -> bool:
    return pid == str(os.getpid()) or os.path.exists(f"/proc/{pid}")


class ContainerHost:
    """The container a template runs in (zygote.TemplateHost)."""

    def __init__(
        self, client: ClientFactory, container_id: str, pid: int, pidfd: int, folder: str
    ) -> None:
        self._client = client
        self.container_id = container_id
        self._pidfd = pidfd
        self._folder = folder
        self._group = SandboxCgroup({"pids": _pids_group(pid)})

    def alive(self) -> bool:
        return not fdwait.wait_readable(self._pidfd, 0.0)  # a pidfd reads once it has ended

    def pids(self) -> set[int]:
        return self._group.pids()

    def end(self) -> None:
        fdwait.wait_readable(self._pidfd, END_TIMEOUT_S)
        _remove(self._client, self.container_id)  # by force: kills what is left
        os.close(self._pidfd)
        shutil.rmtree(self._folder, ignore_errors=True)

    def failure_detail(self) -> str:
        try:
            state: dict[str, Any] = (
                self._client().api.inspect_container(self.container_id).get("State", {})
            )
        except docker.errors.DockerException as exc:
            return f"its container is gone: {exc}"
        if state.get("Running"):
            return ""
        return (
            f"its container exited with {state.get('ExitCode')}"
            f"{' (out of memory)' if state.get('OOMKilled') else ''} {state.get('Error') or ''}"
        ).strip()


def _local_process(pid: int, container_id: str) -> int:
    """A pidfd for the container's first process, when it is in our pid namespace (an engine
    on this machine); else the template cannot be checked, and is not used."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        raise ZygoteUnavailable(f"the engine's processes are not ours to see: {exc}") from exc
    if container_id not in _pids_group(pid):
        os.close(pidfd)
        raise ZygoteUnavailable("the engine's processes are not ours to see")
    return pidfd


def _pids_group(pid: int) -> str:
    """The folder of `pid`'s cgroup in the pids hierarchy, as this process sees it."""
    path = cgroups.group_path("pids", pid)
    return os.path.join(cgroups.ROOT, "pids", path.lstrip("/")) if path is not None else ""


def _accept(listener: socket.socket, pidfd: int) -> socket.socket:
    """The template's connection; fails at once when the template ends first."""
    ready = fdwait.wait_any((listener.fileno(), pidfd), CONNECT_TIMEOUT_S)
    if listener.fileno() not in ready:
        raise ZygoteUnavailable("the template did not connect" + (" (it ended)" if ready else ""))
    control, _ = listener.accept()
    return control


def _check_peer(control: socket.socket, pid: int, uid: int) -> None:
    size = struct.calcsize("3i")
    peer_pid, peer_uid, _ = struct.unpack(
        "3i", control.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size)
    )
    if (peer_pid, peer_uid) != (pid, uid):
        control.close()
        raise ZygoteUnavailable(f"unexpected peer pid {peer_pid} uid {peer_uid} on the socket")


def _remove(client: ClientFactory, container_id: str | None) -> None:
    if container_id is None:
        return
    with contextlib.suppress(docker.errors.NotFound):
        client().api.remove_container(container_id, force=True)
