"""factory_boy factories shared by every test: users, queries, runs, output chunks."""

from __future__ import annotations

import functools

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from webapp.queries.models import Query, QueryKind
from webapp.runs.models import Run, RunChunk, RunDirection, RunStatus

PASSWORD = "correct horse battery staple 42"


@functools.cache
def _password_hash() -> str:
    # Hashed once: PBKDF2 per user would make every test slow.
    return make_password(PASSWORD)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"person{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.LazyFunction(_password_hash)


class QueryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Query

    owner = factory.SubFactory(UserFactory)
    prompt = factory.Sequence(lambda n: f"print greeting number {n}")
    kind = QueryKind.PYTHON
    forward_code = 'print("hello from forward")\n'
    reverse_code = 'print("hello from reverse")\n'
    generated_forward_code = factory.SelfAttribute("forward_code")
    generated_reverse_code = factory.SelfAttribute("reverse_code")
    explanation = "Prints a greeting; the reverse prints another."


class RunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Run

    query = factory.SubFactory(QueryFactory)
    direction = RunDirection.FORWARD
    code = factory.LazyAttribute(lambda run: run.query.forward_code)
    status = RunStatus.QUEUED


class RunChunkFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RunChunk

    run = factory.SubFactory(RunFactory)
    seq = factory.Sequence(lambda n: n + 1)
    stream = "stdout"
    text = factory.LazyAttribute(lambda chunk: f"line {chunk.seq}\n")
