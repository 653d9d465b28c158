"""An action as asked for: POST /api/v1/actions, validated, before anything is saved.

Its own module because both the services and the per-token limits read it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ActionRequest:
    """POST /api/v1/actions, validated (webapp.actions.api.ActionIn)."""

    kind: str
    forward_code: str
    reverse_code: str = ""
    hosts: list[str] = field(default_factory=list)
    intent: str = ""
    credentials: dict[str, str] = field(default_factory=dict)
    workspace: int | None = None
    sqlite: str | None = None  # db target: a SQLite file in the workspace ...
    # ... or the credential holding a database URL (postgresql://, mysql://, mariadb://: the
    # scheme picks the engine); the API's "db": {"url": ...}, named before MariaDB came.
    postgres: str | None = None
    wall_time_s: float | None = None  # the forward run's, below the server's cap
    # True: rehearse first, run for real only when the reverse program restores the state;
    # "only": rehearse and stop (webapp.actions.rehearsals).
    rehearse: bool | str = False
    # rest: a program that exits 0 once the effect is gone, run after the reverse program.
    probe: str = ""

    def digest(self) -> str:
        """What the Idempotency-Key stands for: everything but the credential values."""
        described = {
            **self.__dict__,
            "credentials": sorted(self.credentials),
        }
        return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()
