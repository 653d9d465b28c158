"""The production topology fixture: PostgreSQL, Redis, two web processes and two Celery
workers as real local processes (tests/fault/topology.py), shared by the fault tests and the
integration tests pointed at it (tests/fault/test_topology_integration.py).

Timings are shortened so faults resolve within seconds: a run is "worker lost" once its
heartbeat (every second here: UNDOABLE_RUN_HEARTBEAT_INTERVAL_S) is 8 s old; the reaper looks every
second.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.fault.client import WebClient
from tests.fault.topology import Topology

FAULT_ENV = {
    "EXECUTOR_WALL_TIME_S": "20",
    "EXECUTOR_CPU_TIME_S": "20",
    "EXECUTOR_WARM_POOL_SIZE": "1",
    "UNDOABLE_RUN_LOST_AFTER_S": "8",
    "UNDOABLE_REAPER_INTERVAL_S": "1",
    "UNDOABLE_RUN_HEARTBEAT_INTERVAL_S": "1",
    "UNDOABLE_LOG_LEVEL": "INFO",
}


@dataclass
class Account:
    username: str
    password: str
    token: str


@pytest.fixture(scope="session")
def topology() -> Iterator[Topology]:
    topo = Topology(webs=2, workers=2, extra_env=FAULT_ENV).start()
    try:
        yield topo
    finally:
        # Shown by pytest when a test failed: what the processes said.
        for name in ("web0", "web1", *topo.worker_names):
            errors = [line for line in topo.log(name).splitlines() if '"ERROR"' in line]
            sys.stderr.write(f"--- {name}: {len(errors)} error line(s)\n" + "\n".join(errors[-3:]))
        topo.stop()


@pytest.fixture(scope="session")
def account(topology: Topology) -> Account:
    username, password = "owner", secrets.token_urlsafe(12)
    topology.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; "
        f"get_user_model().objects.create_user({username!r}, password={password!r})",
    )
    token = topology.manage("create_api_token", username).strip()
    return Account(username=username, password=password, token=token)


@pytest.fixture(scope="session")
def stranger_token(topology: Topology) -> str:
    """An API token of another user."""
    topology.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; "
        "get_user_model().objects.create_user('session-stranger')",
    )
    return topology.manage("create_api_token", "session-stranger").strip()


@pytest.fixture
def browser(topology: Topology, account: Account) -> WebClient:
    """A signed-in browser on web process 0."""
    return WebClient(topology.web_url(0)).login(account.username, account.password)
