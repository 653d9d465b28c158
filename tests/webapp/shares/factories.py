"""Share factory; users, queries and runs come from tests/factories.py."""

from __future__ import annotations

import factory

from tests.factories import QueryFactory
from webapp.shares.models import Share


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
