"""Stateless exec calls and session cells come hundreds a second: the ledger gets one entry per
token and minute, not one per call.

Each process counts in memory (`audit_count`, no I/O on the request's path). A flusher thread
adds its counts to the minute's AuditTally row every UNDOABLE_AUDIT_FLUSH_S (an UPDATE ... SET
calls = calls + n, so processes add up), and seals the tallies of minutes that ended more than
UNDOABLE_AUDIT_SEAL_AFTER_S ago: under the chain's lock each becomes one entry and its row goes.
A count that arrives after its minute was sealed makes a second entry for that minute rather
than being lost. What a killed process counted since its last flush is lost; a stopping one
flushes at exit.
"""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import threading
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.db import IntegrityError, close_old_connections, transaction
from django.db.models import F
from django.utils import timezone

from webapp.audit.models import AuditTally
from webapp.audit.services import audit_append

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TallyKey:
    minute: dt.datetime
    event: str
    user_id: int | None
    username: str
    token_id: int | None
    token_prefix: str


_counts: dict[TallyKey, Counter[str]] = {}
_lock = threading.Lock()
_flusher: FlusherThread | None = None


def audit_count(*, token: Any, event: str, result: Any) -> None:
    """Count one exec call (`exec_summary`) or session cell (`cell_summary`) of `token`, with
    whether its program failed (`result`: the executor's RunResult)."""
    failed, timed_out = result.exit_code != 0, bool(result.timed_out)
    owner = token.owner
    key = TallyKey(
        minute=timezone.now().replace(second=0, microsecond=0),
        event=event,
        user_id=owner.pk,
        username=owner.username,
        token_id=token.pk,
        token_prefix=token.prefix,
    )
    with _lock:
        counter = _counts.setdefault(key, Counter())
        counter["calls"] += 1
        counter["failed"] += int(failed)
        counter["timed_out"] += int(timed_out)
    _flusher_start()


def tally_flush() -> int:
    """Add this process's counts to the database's tallies; how many tallies it touched. Counts
    that could not be written are kept for the next round."""
    with _lock:
        taken = dict(_counts)
        _counts.clear()
    written = 0
    try:
        for key, counter in list(taken.items()):
            _tally_add(key, counter)
            del taken[key]
            written += 1
    finally:
        if taken:
            with _lock:
                for key, counter in taken.items():
                    _counts.setdefault(key, Counter()).update(counter)
    return written


def _tally_add(key: TallyKey, counter: Counter[str]) -> None:
    where = {"minute": key.minute, "event": key.event, "token_id": key.token_id}
    increments = {name: F(name) + counter[name] for name in ("calls", "failed", "timed_out")}
    for _ in range(2):
        if AuditTally.objects.filter(**where).update(**increments):
            return
        try:
            with transaction.atomic():
                AuditTally.objects.create(
                    **where,
                    user_id=key.user_id,
                    username=key.username,
                    token_prefix=key.token_prefix,
                    calls=counter["calls"],
                    failed=counter["failed"],
                    timed_out=counter["timed_out"],
                )
            return
        except IntegrityError:
            continue  # another process created it between our update and create: add to it
    raise IntegrityError(f"audit tally {where} could be neither updated nor created")


def tallies_seal(*, now: dt.datetime | None = None) -> list[int]:
    """Turn the tallies of minutes that ended UNDOABLE_AUDIT_SEAL_AFTER_S ago into one entry
    each; the seqs appended."""
    now = now or timezone.now()
    ended_before = now - dt.timedelta(seconds=60 + settings.UNDOABLE_AUDIT_SEAL_AFTER_S)
    sealed = []
    for tally_id in AuditTally.objects.filter(minute__lt=ended_before).values_list("pk", flat=True):
        with transaction.atomic():
            # Locked, appended and deleted in one transaction: another process sealing at the
            # same time finds the row gone and appends nothing.
            tally = AuditTally.objects.select_for_update().filter(pk=tally_id).first()
            if tally is None:
                continue
            entry = audit_append(
                event=tally.event,
                user=SimpleNamespace(pk=tally.user_id, username=tally.username),
                token=SimpleNamespace(pk=tally.token_id, prefix=tally.token_prefix),
                target=f"minute {tally.minute.isoformat()}",
                outcome=f"{tally.calls} calls, {tally.failed} failed, {tally.timed_out} timed out",
                digests={
                    "minute": tally.minute.isoformat(),
                    "calls": tally.calls,
                    "failed": tally.failed,
                    "timed_out": tally.timed_out,
                },
            )
            tally.delete()
        sealed.append(entry.seq)
    return sealed


class FlusherThread(threading.Thread):
    def __init__(self, interval_s: float) -> None:
        super().__init__(name="audit-flusher", daemon=True)
        self.interval_s = interval_s
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            close_old_connections()
            try:
                tally_flush()
                tallies_seal()
            except Exception as exc:  # the database restarting: the counts wait for next round
                logger.warning("audit tally flush failed", extra={"error": repr(exc)})
        close_old_connections()


def _flusher_start() -> None:
    global _flusher
    if _flusher is not None or settings.UNDOABLE_AUDIT_FLUSH_S <= 0:
        return
    with _lock:
        if _flusher is None:
            _flusher = FlusherThread(settings.UNDOABLE_AUDIT_FLUSH_S)
            _flusher.start()
            atexit.register(_flush_at_exit)


def _flush_at_exit() -> None:
    try:
        tally_flush()
    except Exception as exc:  # the database may be gone already: say so, do not hang the exit
        logger.warning("audit tally flush at exit failed", extra={"error": repr(exc)})
