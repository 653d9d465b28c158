"""How the session manager is set up: one frozen value. Where the sandboxes run is the backend
it is given (Backend.open_session), not this."""

from __future__ import annotations

from dataclasses import dataclass

from executor.limits import Limits


@dataclass(frozen=True)
class SessionConfig:
    root_dir: str
    limits: Limits  # per cell: wall_time_s caps a cell; memory/pids/files cap the session
    idle_timeout_s: float = 600.0
    max_lifetime_s: float = 3600.0
    max_sessions: int = 32
    workdir_quota_mib: int = 256  # the workspace's bytes, all files together
    workdir_max_inodes: int = 100_000  # and its files and folders
