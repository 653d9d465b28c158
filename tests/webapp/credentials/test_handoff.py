"""Credentials reach a run exactly once, through Django's cache: local memory in the embedded
mode, Redis (one-shot, encrypted, short-lived, unguessable key) in production."""

from __future__ import annotations

import pickle
import re
import threading
from collections.abc import Iterator

import pytest
import redis
from django.core.cache import cache
from django.test import override_settings

from tests.servers import RedisServer
from webapp.credentials import handoff
from webapp.credentials.handoff import credentials_stash, credentials_take
from webapp.redis_client import cache_settings

SECRET = "xoxb-handoff-canary-7f3a"


@pytest.fixture
def redis_db(redis_server: RedisServer) -> Iterator[redis.Redis]:
    url = redis_server.url(13)
    client = redis.Redis.from_url(url)
    client.flushdb()
    with override_settings(CACHES=cache_settings(url), UNDOABLE_CREDENTIAL_TTL_S=30):
        yield client
    client.flushdb()
    client.close()


@pytest.fixture(params=["local memory", "redis"])
def any_cache(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.param == "redis":
        request.getfixturevalue("redis_db")
        yield
        return
    with override_settings(CACHES=cache_settings(""), UNDOABLE_CREDENTIAL_TTL_S=60):
        cache.clear()
        yield


def take_concurrently(run_id: int, readers: int) -> list[dict[str, str]]:
    start = threading.Barrier(readers)
    results: list[dict[str, str]] = []

    def read() -> None:
        start.wait(timeout=10)
        results.append(credentials_take(run_id=run_id))

    threads = [threading.Thread(target=read) for _ in range(readers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    return results


def test_values_are_handed_over_once(any_cache: None) -> None:
    credentials_stash(run_id=1, values={"SLACK_TOKEN": SECRET})
    assert credentials_take(run_id=1) == {"SLACK_TOKEN": SECRET}
    assert credentials_take(run_id=1) == {}


def test_runs_are_kept_apart(any_cache: None) -> None:
    credentials_stash(run_id=2, values={"A": "one"})
    credentials_stash(run_id=3, values={"A": "two"})
    assert credentials_take(run_id=3) == {"A": "two"}
    assert credentials_take(run_id=2) == {"A": "one"}


def test_one_of_many_concurrent_readers_gets_the_values(any_cache: None) -> None:
    credentials_stash(run_id=5, values={"A": SECRET})
    results = take_concurrently(5, readers=8)
    assert sorted(len(r) for r in results) == [0] * 7 + [1]


class InterleavingCache:
    """Django's cache, except that a second reader takes the run's values between the first
    reader's get and its delete."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.second: dict[str, str] | None = None

    def get(self, key: str) -> object:
        value = cache.get(key)
        if self.second is None:
            self.second = {}
            self.second = credentials_take(run_id=self.run_id)
        return value

    def delete(self, key: str) -> bool:
        return bool(cache.delete(key))


def test_one_reader_only_also_when_reads_interleave(
    any_cache: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials_stash(run_id=6, values={"A": SECRET})
    interleaving = InterleavingCache(run_id=6)
    monkeypatch.setattr(handoff, "cache", interleaving)
    first = credentials_take(run_id=6)
    assert sorted([first, interleaving.second or {}], key=len) == [{}, {"A": SECRET}]


def test_redis_stores_one_encrypted_key_with_a_short_ttl(redis_db: redis.Redis) -> None:
    credentials_stash(run_id=42, values={"SLACK_TOKEN": SECRET})
    keys = redis_db.keys("*")
    assert len(keys) == 1
    assert re.fullmatch(rb"undoable:1:cred:[0-9a-f]{64}", keys[0])
    assert 0 < redis_db.ttl(keys[0]) <= 30
    stored = redis_db.get(keys[0])
    assert SECRET.encode() not in stored
    assert b"SLACK_TOKEN" not in stored


def test_redis_hands_values_over_once_and_deletes_the_key(redis_db: redis.Redis) -> None:
    credentials_stash(run_id=43, values={"SLACK_TOKEN": SECRET, "DB_URL": "postgres://u:p@h/d"})
    assert credentials_take(run_id=43) == {"SLACK_TOKEN": SECRET, "DB_URL": "postgres://u:p@h/d"}
    assert redis_db.keys("*") == []
    assert credentials_take(run_id=43) == {}


def test_redis_gives_values_to_one_of_many_concurrent_readers(redis_db: redis.Redis) -> None:
    credentials_stash(run_id=44, values={"A": SECRET})
    results = take_concurrently(44, readers=8)
    assert sorted(len(r) for r in results) == [0] * 7 + [1]


def test_redis_key_names_depend_on_the_server_secret(redis_db: redis.Redis) -> None:
    credentials_stash(run_id=45, values={"A": "x"})
    with override_settings(SECRET_KEY="another-server-secret-" * 3):
        credentials_stash(run_id=45, values={"A": "y"})
    assert len(redis_db.keys("*")) == 2


def test_redis_rejects_a_value_it_cannot_decrypt(redis_db: redis.Redis) -> None:
    credentials_stash(run_id=46, values={"A": "x"})
    (key,) = redis_db.keys("*")
    redis_db.set(key, pickle.dumps(b"not-a-fernet-token"))
    with pytest.raises(handoff.CredentialHandoffError):
        credentials_take(run_id=46)


def test_an_empty_stash_stores_nothing(redis_db: redis.Redis) -> None:
    credentials_stash(run_id=47, values={})
    assert redis_db.keys("*") == []
    assert credentials_take(run_id=47) == {}
