"""Personas and clients for the web app's tests, plus the fake LLM and a real sandbox.

Personas: `owner` (has the data under test) and `stranger` (another signed-in user, who must get
404 for everything of the owner's).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client, override_settings

from tests.factories import UserFactory
from tests.fakes.llm_server import FakeLLMServer
from tests.servers import PostgresDatabase, PostgresServer
from tests.webapp.on_postgres import migrate


@pytest.fixture
def owner(db):
    return UserFactory(username="owner")


@pytest.fixture
def stranger(db):
    return UserFactory(username="stranger")


@pytest.fixture
def owner_client(owner) -> Client:
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def stranger_client(stranger) -> Client:
    client = Client()
    client.force_login(stranger)
    return client


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    """A real local OpenAI-compatible server; settings point the app at it."""
    with (
        FakeLLMServer() as server,
        override_settings(
            LLM_BASE_URL=server.base_url,
            LLM_API_KEY="test-llm-key",
            LLM_MODEL="fake-model",
            LLM_TIMEOUT_S=2.0,
        ),
    ):
        yield server


@pytest.fixture
def no_llm() -> Iterator[None]:
    with override_settings(LLM_BASE_URL="", LLM_API_KEY=""):
        yield


@pytest.fixture(scope="session")
def postgres_app_template(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PostgresDatabase]:
    """A database of the session's PostgreSQL that `manage.py migrate` made, once: tests copy it
    (`postgres_server.database(copy_of=...)`) rather than migrating one each. Never connected to
    after: PostgreSQL copies only a database no one is connected to."""
    with postgres_server.database() as database:
        migrate(database, tmp_path_factory.mktemp("migrate-var"))
        yield database
