"""The lifecycle's move as it would be without the condition in its UPDATE, for sabotage tests:
check the status, wait until the other writer has checked too, then write."""

from __future__ import annotations

import threading
from typing import Any

from django.apps import apps

from webapp import lifecycle


def read_then_write(
    both_read: threading.Barrier, *, only: tuple[str, tuple[str, ...]] | None = None
) -> Any:
    """A stand-in for webapp.lifecycle.move. With `only` (a model label and the states moved
    to), other moves stay the real, conditional ones."""
    real = lifecycle.move

    def move(machine, row, to, *, from_=None, where=None, **fields):
        if only is not None and (machine.model != only[0] or to not in only[1]):
            return real(machine, row, to, from_=from_, where=where, **fields)
        pk = getattr(row, "pk", row)
        model = apps.get_model(machine.model)
        seen = model.objects.values_list("status", flat=True).get(pk=pk)
        both_read.wait(timeout=10)  # both writers read before either writes
        if seen not in (from_ or machine.allowed_from(to)):
            return False
        model.objects.filter(pk=pk).update(status=to, **fields)
        if row is not pk:
            row.status = to
        return True

    return move
