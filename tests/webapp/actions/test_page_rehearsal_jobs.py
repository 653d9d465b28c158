"""The query page's rehearsal is a background job on the page's runner: under Celery the request
queues a task and answers "rehearsing" at once (no worker here, so the job can only be queued:
the answer cannot be the verdict); the task's message carries ids only, the credentials wait
encrypted under the one-shot handoff key; a job with no verdict past UNDOABLE_REHEARSAL_WAIT_S
is reported failed; bad input is refused before anything is queued. The job running to its
verdict on the embedded runner is in test_action_rehearsal.py, in a real worker and a browser
in test_action_canary_redis.py and tests/browser/test_rehearsal_panel.py."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import redis
from django.test import override_settings
from django.urls import reverse

from tests.factories import QueryFactory
from tests.webapp.credentials.test_canary import _redis_contents, _reset_celery_connections
from webapp.actions.models import Action
from webapp.credentials import handoff
from webapp.redis_client import cache_settings

CANARY = "canary-" + secrets.token_hex(16)
ADD = "import os\nopen('/workspace/token.txt', 'w').write(os.environ['CANARY_TOKEN'])\n"
REMOVE = "import os\nos.remove('/workspace/token.txt')\n"


@pytest.fixture
def queue_without_worker(redis_url: str, transactional_db: None) -> Iterator[str]:
    """Production mode's runner, cache and broker on a Redis of its own, with no worker: a job
    submitted stays queued. Yields the Redis URL."""
    from webapp.celery import app

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    saved = app.conf.broker_url
    app.conf.broker_url = redis_url
    _reset_celery_connections(app)
    with override_settings(
        UNDOABLE_RUNNER="celery",
        REDIS_URL=redis_url,
        CACHES=cache_settings(redis_url),
        CELERY_BROKER_URL=redis_url,
    ):
        yield redis_url
    app.conf.broker_url = saved
    _reset_celery_connections(app)
    client.flushdb()
    client.close()


@pytest.fixture
def page_query(owner):
    query = QueryFactory(
        owner=owner.user,
        kind="fs",
        forward_code=ADD,
        reverse_code=REMOVE,
        credential_names=["CANARY_TOKEN"],
    )
    owner.client.force_login(owner.user)
    return query


def rehearse(owner, query, body):
    url = reverse("actions:rehearse", args=[query.pk])
    return owner.client.post(url, body, content_type="application/json")


def state_of(owner, query):
    return owner.client.get(reverse("actions:rehearsal", args=[query.pk])).json()


def test_the_request_answers_rehearsing_with_the_job_queued(
    owner, page_query, queue_without_worker
):
    answer = rehearse(owner, page_query, {"credentials": {"CANARY_TOKEN": CANARY}})
    assert answer.status_code == 202, answer.content
    assert answer.json()["state"] == "rehearsing"
    assert state_of(owner, page_query)["state"] == "rehearsing"
    assert any(b"actions.rehearse_query" in item for item in _redis_contents(queue_without_worker))
    assert not Action.objects.filter(query=page_query).exclude(rehearsal=None).exists()
    page = owner.client.get(reverse("queries:query-detail", args=[page_query.pk])).content
    assert b'data-testid="rehearsing"' in page
    # Asked again while it runs: the same job, not a second one.
    assert rehearse(owner, page_query, {"credentials": {"CANARY_TOKEN": CANARY}}).status_code == 202
    queued = [i for i in _redis_contents(queue_without_worker) if b"actions.rehearse_query" in i]
    assert len({item for item in queued if item.startswith(b"{")}) == 1


def test_deny_the_rehearsals_credential_is_in_no_celery_message_and_no_redis_value(
    owner, page_query, queue_without_worker
):
    rehearse(owner, page_query, {"credentials": {"CANARY_TOKEN": CANARY}})
    contents = b"\n".join(_redis_contents(queue_without_worker))
    assert b"actions.rehearse_query" in contents
    assert CANARY.encode() not in contents


@pytest.mark.sabotage
def test_sabotage_a_rehearsals_credential_handed_off_in_the_clear_is_caught(
    owner, page_query, queue_without_worker, monkeypatch
):
    class Clear:
        def encrypt(self, data: bytes) -> bytes:
            return data

    monkeypatch.setattr(handoff, "_fernet", Clear)
    rehearse(owner, page_query, {"credentials": {"CANARY_TOKEN": CANARY}})
    assert CANARY.encode() in b"\n".join(_redis_contents(queue_without_worker))


def test_a_job_with_no_verdict_within_the_limit_is_reported_failed_by_name(
    owner, page_query, queue_without_worker
):
    rehearse(owner, page_query, {"credentials": {"CANARY_TOKEN": CANARY}})
    with override_settings(UNDOABLE_REHEARSAL_WAIT_S=0):  # the worker never came
        state = state_of(owner, page_query)
        page = owner.client.get(reverse("queries:query-detail", args=[page_query.pk])).content
    assert state["state"] == "failed"
    assert "UNDOABLE_REHEARSAL_WAIT_S=0" in state["error"]
    assert b"No verdict within UNDOABLE_REHEARSAL_WAIT_S=0 s" in page
    # A new request starts a new job rather than waiting on the lost one.
    with override_settings(UNDOABLE_REHEARSAL_WAIT_S=0):
        rehearse(owner, page_query, {"credentials": {"CANARY_TOKEN": CANARY}})
    assert state_of(owner, page_query)["state"] == "rehearsing"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"credentials": {}}, "Missing credential: CANARY_TOKEN; give it again"),
        ({"credentials": {"CANARY_TOKEN": 7}}, 'the body is {"credentials": {"NAME": "value"}}'),
        ([], 'the body is {"credentials": {"NAME": "value"}}'),
    ],
)
def test_bad_input_is_refused_at_once_and_queues_nothing(
    owner, page_query, queue_without_worker, body, error
):
    answer = rehearse(owner, page_query, body)
    assert answer.status_code == 400
    assert answer.json() == {"error": error}
    assert state_of(owner, page_query) == {"state": "none"}
    assert not any(b"actions.rehearse_query" in i for i in _redis_contents(queue_without_worker))
