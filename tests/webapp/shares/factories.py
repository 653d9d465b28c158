"""Factories for issue 4's tests (tests/factories.py had not landed when these were written)."""

from __future__ import annotations

import functools

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from webapp.queries.models import Query, Run, RunChunk, RunDirection, RunStatus
from webapp.shares.models import Share

PASSWORD = "correct horse battery staple 42"


@functools.cache
def _password_hash() -> str:
    return make_password(PASSWORD)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()

    username = factory.Sequence(lambda n: f"person{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    # Hashed once: PBKDF2 per user would make every test slow.
    password = factory.LazyFunction(lambda: _password_hash())


class QueryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Query

    owner = factory.SubFactory(UserFactory)
    prompt = factory.Sequence(lambda n: f"print a greeting number {n}")
    forward_code = factory.LazyAttribute(lambda q: f"print({q.prompt!r})")
    reverse_code = "print('nothing to undo')"


class RunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Run

    query = factory.SubFactory(QueryFactory)
    direction = RunDirection.FORWARD
    code = factory.LazyAttribute(lambda r: r.query.forward_code)
    status = RunStatus.SUCCEEDED
    exit_code = 0


class RunChunkFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RunChunk

    run = factory.SubFactory(RunFactory)
    seq = factory.Sequence(lambda n: n + 1)
    stream = "stdout"
    text = "hello\n"


class ShareFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Share

    query = factory.SubFactory(QueryFactory)
    owner = factory.LazyAttribute(lambda s: s.query.owner)
    prompt = factory.LazyAttribute(lambda s: s.query.prompt)
    kind = factory.LazyAttribute(lambda s: s.query.kind)
    language = factory.LazyAttribute(lambda s: s.query.language)
    forward_code = factory.LazyAttribute(lambda s: s.query.forward_code)
    reverse_code = factory.LazyAttribute(lambda s: s.query.reverse_code)
