"""Bait laid on the host before a hostile program runs, and what the host saw afterwards.

Everything here is a real observable effect on the host: canary files the program must not
read, a canary variable in our own environment, listeners whose accept queue must stay empty,
a sentinel process that must survive, a SIGUSR1 handler that must never fire. Probes report
hashes rather than host data, so a leaking run never copies host secrets into test logs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

REPO = Path(__file__).resolve().parents[2]
ROOTFS = REPO / "var" / "sandbox-rootfs"
# Variables a sandbox legitimately sets to the same values the host may have.
NEUTRAL_ENV_KEYS = {"PATH", "HOME", "LANG", "LANGUAGE", "TERM", "PWD", "OLDPWD", "SHLVL", "_"}
NEUTRAL_ENV_PREFIXES = ("LC_", "PYTHON")
HOST_ONLY_CANDIDATES = (
    "/work",
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/var/lib/docker",
    "/etc/docker",
    "/root/.pyenv",
    "/root/.cache",
)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def host_ipv4_addresses() -> list[str]:
    """The host's own non-loopback IPv4 addresses (e.g. eth0, and docker0: the classic path)."""
    out = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, check=True).stdout
    return [
        info["local"]
        for link in json.loads(out)
        for info in link.get("addr_info", [])
        if not info["local"].startswith("127.")
    ]


@dataclass
class Bait:
    marker: str
    program_uid: int
    env_name: str
    env_value: str
    repo_canary: Path
    tmp_canary: Path
    canary_text: str
    sentinel: subprocess.Popen[bytes]
    tcp_loopback: socket.socket
    tcp_host: list[socket.socket]
    udp_loopback: socket.socket
    shadow_id: tuple[int, int]
    host_env_hashes: dict[str, str]  # sha256("KEY=value") -> KEY
    host_cmdline_hashes: dict[str, str]  # sha256(cmdline) -> what it is
    host_only_paths: list[str]
    escape_dirs: list[Path]
    sigusr1: list[int] = field(default_factory=list)

    @property
    def escape_name(self) -> str:
        return f"undoable-escape-{self.marker}"

    @property
    def fill_dir(self) -> str:
        return f"/tmp/undoable-fill-{self.marker}"

    def program_env(self) -> dict[str, str]:
        """What a probe is told: where to aim. Never the canary values themselves."""
        host_addrs = ",".join(f"{ip}:{port}" for ip, port in self._host_addrs())
        return {
            "BAIT_MARKER": self.marker,
            "BAIT_REPO_DIR": str(REPO),
            "BAIT_REPO_CANARY": str(self.repo_canary),
            "BAIT_TMP_CANARY": str(self.tmp_canary),
            "BAIT_TCP_PORT": str(self.tcp_loopback.getsockname()[1]),
            "BAIT_HOST_ADDRS": host_addrs,
            "BAIT_UDP_PORT": str(self.udp_loopback.getsockname()[1]),
            "BAIT_HOST_PID": str(os.getpid()),
            "BAIT_SENTINEL_PID": str(self.sentinel.pid),
            "BAIT_HOST_ONLY_PATHS": ":".join(self.host_only_paths),
            "BAIT_FILL_DIR": self.fill_dir,
        }

    def _host_addrs(self) -> list[tuple[str, int]]:
        return [listener.getsockname()[:2] for listener in self.tcp_host]

    def tcp_connections(self) -> list[str]:
        """Listeners that received a connection (accepted here, without blocking)."""
        reached = []
        for listener in [self.tcp_loopback, *self.tcp_host]:
            listener.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                conn, _ = listener.accept()
                conn.close()
                host, port = listener.getsockname()[:2]
                reached.append(f"{host}:{port}")
        return reached

    def udp_datagrams(self) -> int:
        count = 0
        self.udp_loopback.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                self.udp_loopback.recv(65536)
                count += 1
        return count

    def sentinel_alive(self) -> bool:
        return self.sentinel.poll() is None

    def escaped_files(self) -> list[Path]:
        found = [d / self.escape_name for d in self.escape_dirs if (d / self.escape_name).exists()]
        return found

    def cleanup_files(self) -> None:
        for path in [self.repo_canary, self.tmp_canary, *self.escaped_files()]:
            path.unlink(missing_ok=True)
        shutil.rmtree(self.fill_dir, ignore_errors=True)


@contextlib.contextmanager
def laid_bait(program_uid: int) -> Iterator[Bait]:
    """Lay every trap at once (a few ms); `program_uid` is the host uid the program runs as."""
    marker = secrets.token_hex(8)
    env_name = f"UNDOABLE_CANARY_{secrets.token_hex(4).upper()}"
    canary_text = f"canary-{secrets.token_hex(16)}"
    repo_canary = REPO / f".undoable-canary-{marker}"
    tmp_canary = Path("/tmp") / f"undoable-canary-{marker}"
    for path in (repo_canary, tmp_canary):
        path.write_text(canary_text)
        path.chmod(0o644)  # world-readable: only the sandbox stands between it and the program
    os.environ[env_name] = secrets.token_hex(16)
    # argv[0] is a token of its own, so the sentinel is never mistaken for a leftover.
    sentinel = subprocess.Popen(
        [f"undoable-sentinel-{secrets.token_hex(8)}", "60"],
        executable="/bin/sleep",
        user=program_uid,
        group=program_uid,
        extra_groups=[],
        stdin=subprocess.DEVNULL,
    )
    sockets = [_listen(socket.SOCK_STREAM, "127.0.0.1")]
    sockets += [_listen(socket.SOCK_STREAM, ip) for ip in host_ipv4_addresses()]
    udp = _listen(socket.SOCK_DGRAM, "127.0.0.1")
    received: list[int] = []

    def on_sigusr1(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGUSR1, on_sigusr1)
    bait = Bait(
        marker=marker,
        program_uid=program_uid,
        env_name=env_name,
        env_value=os.environ[env_name],
        repo_canary=repo_canary,
        tmp_canary=tmp_canary,
        canary_text=canary_text,
        sentinel=sentinel,
        tcp_loopback=sockets[0],
        tcp_host=sockets[1:],
        udp_loopback=udp,
        shadow_id=_file_id("/etc/shadow"),
        host_env_hashes=_host_env_hashes(),
        host_cmdline_hashes={
            sha256(Path("/proc/self/cmdline").read_bytes()): "the test process",
            sha256(Path(f"/proc/{sentinel.pid}/cmdline").read_bytes()): "the sentinel",
        },
        host_only_paths=[p for p in HOST_ONLY_CANDIDATES if os.path.lexists(p)] + [str(REPO)],
        escape_dirs=[
            *(Path(p) for p in ("/", "/usr", "/etc", "/var/tmp", "/dev/shm", "/tmp")),
            *(ROOTFS / p for p in (".", "usr", "etc", "var/tmp", "tmp", "workspace")),
        ],
        sigusr1=received,
    )
    try:
        yield bait
    finally:
        signal.signal(signal.SIGUSR1, previous)
        del os.environ[env_name]
        with contextlib.suppress(ProcessLookupError):
            sentinel.kill()
        sentinel.wait()
        for sock in [*sockets, udp]:
            sock.close()
        bait.cleanup_files()


def _listen(kind: socket.SocketKind, address: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, kind)
    sock.bind((address, 0))
    if kind == socket.SOCK_STREAM:
        sock.listen(16)
    return sock


def _file_id(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _host_env_hashes() -> dict[str, str]:
    hashes = {}
    for key, value in os.environb.items():
        name = key.decode(errors="replace")
        if name in NEUTRAL_ENV_KEYS or name.startswith(NEUTRAL_ENV_PREFIXES):
            continue
        hashes[sha256(key + b"=" + value)] = name
    return hashes
