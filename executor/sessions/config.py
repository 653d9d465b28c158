"""How the session manager and its starters are set up: one frozen value for both."""

from __future__ import annotations

from dataclasses import dataclass

from executor.limits import Limits
from executor.linux.uids import SANDBOX_UID


@dataclass(frozen=True)
class SessionConfig:
    rootfs: str
    root_dir: str
    limits: Limits  # per cell: wall_time_s caps a cell; memory/pids/files cap the session
    idle_timeout_s: float = 600.0
    max_lifetime_s: float = 3600.0
    max_sessions: int = 32
    host_uid: int | None = SANDBOX_UID
    use_cgroups: bool = True
    workdir_quota_mib: int = 256  # the workspace's bytes, all files together
    workdir_max_inodes: int = 100_000  # and its files and folders
    backend: str = "bwrap"  # or "docker": where the sandboxes run (host_uid is bwrap's)
    docker_image: str = "undoable-sandbox:latest"
    docker_url: str | None = None
