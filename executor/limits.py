"""Resource limits: a validated schema, units in the names, deny-by-default values.

The server configures caps (`Limits` built from EXECUTOR_* settings); a request may only lower
them, via `caps.narrowed(**requested)`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from executor.errors import InvalidLimits

NETWORK_MODES = ("none", "allowlist")
# Seconds keep their fractions; every other limit is a whole count of its unit.
_SECONDS_FIELDS = frozenset({"wall_time_s", "cpu_time_s"})


@dataclass(frozen=True)
class Limits:
    wall_time_s: float = 10.0
    cpu_time_s: float = 10.0
    memory_mib: int = 256
    max_pids: int = 64
    max_output_bytes: int = 1_000_000
    max_file_size_mib: int = 16
    workdir_quota_mib: int = 64
    tmp_quota_mib: int = 64
    max_open_files: int = 256
    # "none": no network at all. "allowlist": only the hosts of the spec, through an egress
    # proxy outside the sandbox.
    network: str = "none"

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "network":
                if value not in NETWORK_MODES:
                    raise InvalidLimits(f"network must be one of {NETWORK_MODES}, not {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidLimits(f"{field.name} must be a number, not {value!r}")
            if value <= 0:
                raise InvalidLimits(f"{field.name} must be positive, got {value}")

    def narrowed(self, **requested: Any) -> Limits:
        """Return limits lowered to what a request asks for; asking for more than a cap fails."""
        unknown = set(requested) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise InvalidLimits(f"unknown limit(s): {', '.join(sorted(unknown))}")
        changes: dict[str, Any] = {}
        for name, value in requested.items():
            if value is None:
                continue
            if name == "network":
                if value != self.network and self.network == "none":
                    raise InvalidLimits("network is not allowed by the server")
                changes[name] = value
                continue
            cap = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise InvalidLimits(f"{name} must be a positive number, got {value!r}")
            if value > cap:
                raise InvalidLimits(f"{name}={value} is above the server cap of {cap}")
            changes[name] = float(value) if name in _SECONDS_FIELDS else int(value)
        return dataclasses.replace(self, **changes)

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 1024 * 1024
