"""What the tests need on this machine, each missing piece named in one line with its fix.

Required (the session stops with that line): bubblewrap, the sandbox root filesystem and the
launcher for any test that runs a sandbox; redis-server for any test that uses Redis.
Optional (skipped, one summary line): a Docker engine, PostgreSQL, MariaDB, Debian's chromium.
UNDOABLE_REQUIRE_DOCKER=1, UNDOABLE_REQUIRE_POSTGRES=1, UNDOABLE_REQUIRE_MARIADB=1,
UNDOABLE_REQUIRE_BROWSER=1 or UNDOABLE_REQUIRE_ALL=1 (CI) make a missing optional piece stop
the session too.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from executor.policy.bwrap_args import LAUNCHER

REPO = Path(__file__).resolve().parents[1]
ROOTFS = REPO / "var" / "sandbox-rootfs"
ROOTFS_STAMP = ROOTFS / "etc" / "undoable-rootfs-built"
SANDBOX_IMAGE = os.environ.get("UNDOABLE_SANDBOX_IMAGE", "undoable-sandbox:latest")
# The browser tests drive Debian's chromium: Playwright's own browser download is not used.
CHROMIUM = Path("/usr/bin/chromium")
Say = Callable[[str], None]
# Exit status of a session stopped for a missing prerequisite (pytest's own "usage error").
MISSING = 4


def required(piece: str) -> bool:
    """Whether CI (or the user) demands `piece` ("DOCKER", "POSTGRES", "MARIADB", "BROWSER"):
    then it is no skip."""
    names = (f"UNDOABLE_REQUIRE_{piece}", "UNDOABLE_REQUIRE_ALL")
    return any(os.environ.get(name) == "1" for name in names)


def sandbox_problems() -> list[str]:
    problems = []
    if shutil.which("bwrap") is None:
        problems.append("bubblewrap is missing: run `sudo apt-get install -y bubblewrap`")
    if not ROOTFS_STAMP.exists():
        problems.append(f"no sandbox root filesystem in {ROOTFS}: run `make sandbox-rootfs`")
    if not os.access(LAUNCHER, os.X_OK):
        problems.append(f"the sandbox launcher {LAUNCHER} is not built: run `make launcher`")
    return problems


def chromium_problem(path: Path = CHROMIUM) -> str | None:
    if os.access(path, os.X_OK):
        return None
    return f"{path} is missing: run `sudo apt-get install -y chromium`"


class OptionalPiece:
    """A prerequisite some tests need, checked once, when the first of them runs. Without it
    those tests are skipped, or the session stops when UNDOABLE_REQUIRE_<piece>=1."""

    def __init__(self, piece: str, label: str, check: Callable[[Say], str | None]) -> None:
        self.piece, self.label, self._check = piece, label, check
        self.problem: str | None = None
        self.checked = False
        self.skipped = 0

    def ensure(self, say: Say) -> str | None:
        if not self.checked:
            self.checked = True
            self.problem = self._check(say)
        return self.problem


class DockerImage:
    """The Docker engine and the sandbox image: with an engine but no current image, builds it
    as `make sandbox-image` does."""

    def __call__(self, say: Say) -> str | None:
        return self._check(say)

    def _check(self, say: Say) -> str | None:
        import docker

        try:
            client = docker.from_env(timeout=10)
            client.ping()
        except docker.errors.DockerException:
            where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
            return f"no Docker engine answers at {where}: start dockerd"
        try:
            if self._current(client):
                return None
            if not ROOTFS_STAMP.exists():
                return f"no sandbox root filesystem in {ROOTFS}: run `make sandbox-rootfs`"
            # Other test sessions on this machine may be building it right now: one at a time.
            lock_path = REPO / "var" / "tmp" / "sandbox-image.lock"
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            with lock_path.open("w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if self._current(client):
                    return None
                say(f"building the Docker sandbox image {SANDBOX_IMAGE} from {ROOTFS} ...")
                started = time.monotonic()
                done = subprocess.run(
                    [
                        "bash",
                        str(REPO / "executor" / "image" / "import-image.sh"),
                        str(ROOTFS),
                        SANDBOX_IMAGE,
                    ],
                    capture_output=True,
                    text=True,
                    stdin=subprocess.DEVNULL,
                )
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                return f"building {SANDBOX_IMAGE} failed: {last}"
            say(f"built {SANDBOX_IMAGE} in {time.monotonic() - started:.0f} s")
            return None
        finally:
            client.close()

    @staticmethod
    def _current(client: object) -> bool:
        """The image exists and was made from this root filesystem (its stamp label)."""
        import docker

        try:
            image = client.images.get(SANDBOX_IMAGE)  # type: ignore[attr-defined]
        except docker.errors.ImageNotFound:
            return False
        stamp = ROOTFS_STAMP.read_text().strip() if ROOTFS_STAMP.exists() else None
        label = (image.labels or {}).get("undoable.rootfs")
        # A custom image (UNDOABLE_SANDBOX_IMAGE) without our label is taken as it is.
        return label is None or stamp is None or label.strip() == stamp
