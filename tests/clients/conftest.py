"""The client package's tests: the agent API's personas, and the package on sys.path.

The package lives in clients/python/src; tests here import it from there without installing it
(test_client_package installs it into a venv of its own).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.webapp.agents.conftest import (  # noqa: F401 (fixtures)
    _fresh_quota,
    owner,
    sessions,
    stranger,
)
from tests.webapp.runs.conftest import sandbox_backend, threads_runner  # noqa: F401
from tests.webapp.workspaces.conftest import workspaces_root  # noqa: F401

CLIENT_SRC = Path(__file__).resolve().parents[2] / "clients" / "python" / "src"
if str(CLIENT_SRC) not in sys.path:
    sys.path.insert(0, str(CLIENT_SRC))

from tests.clients.scripted_exec import scripted  # noqa: E402, F401 (a scripted exec server)
from tests.webapp.conftest import fake_llm  # noqa: E402, F401 (the scripted LLM)
