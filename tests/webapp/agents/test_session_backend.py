"""Sessions honour EXECUTOR_BACKEND (issue 14, item 14): with docker, a session created over the
API runs in a container labelled with its id, gone once the session is deleted."""

from __future__ import annotations

from collections.abc import Iterator

import docker
import pytest

from executor.backends.docker.session_container import SESSION_LABEL
from executor.errors import BackendUnavailable
from webapp.agents.session_services import reset_session_manager
from webapp.executor_glue import executor_get, reset_executor

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def engine(docker_engine):
    return docker_engine  # this module's short name for it


@pytest.fixture
def docker_backend(settings) -> Iterator[None]:
    settings.EXECUTOR_BACKEND = "docker"
    settings.EXECUTOR_WARM_POOL_SIZE = 0
    reset_executor()
    yield
    reset_session_manager()
    reset_executor()


@pytest.mark.docker
def test_with_the_docker_backend_a_session_runs_in_its_own_container(owner, engine, docker_backend):
    session_id = owner.post("/api/v1/sessions", {}).json()["id"]
    label = {"label": f"{SESSION_LABEL}={session_id}"}
    [container] = engine.containers(filters=label)

    reply = owner.post(
        f"/api/v1/sessions/{session_id}/exec",
        {"code": "import os; os.path.exists('/.dockerenv'), os.getuid()"},
    )

    assert reply.json()["stdout"] == "(True, 1000)\n"
    assert owner.delete(f"/api/v1/sessions/{session_id}").status_code == 204
    with pytest.raises(docker.errors.NotFound):
        engine.wait(container["Id"], condition="removed", timeout=10)
        engine.inspect_container(container["Id"])


def test_a_server_that_cannot_start_session_sandboxes_answers_503(owner, monkeypatch):
    def refuse(self, **options):
        raise BackendUnavailable("no sandbox here")

    monkeypatch.setattr(type(executor_get().backend), "open_session", refuse)
    reset_session_manager()

    response = owner.post("/api/v1/sessions", {})

    assert response.status_code == 503
    assert response.json() == {"error": "the sandbox is unavailable on this server"}


@pytest.mark.docker
@pytest.mark.parametrize("zygote", [True, False], ids=["forked", "a-container-per-run"])
def test_with_the_docker_backend_stateless_runs_follow_executor_zygote(
    owner, engine, docker_backend, settings, zygote
):
    """Forked from the template container, a run has the sandbox uid; in a container of its
    own, the image's user (1000)."""
    settings.EXECUTOR_ZYGOTE = zygote
    reset_executor()

    response = owner.post("/api/v1/exec", {"code": "import os; print(os.getuid())"})

    uid = settings.EXECUTOR_SANDBOX_UID if zygote else 1000
    assert response.content.decode() == f"{uid}\n"
