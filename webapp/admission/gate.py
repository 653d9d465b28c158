"""The gate a run request passes: its token's rate, one of its token's slots, one of the host's
admissions for its user; then the run, and the slots given back.

POST /api/v1/exec, a session cell and the MCP tools call within_quota; the actions API and the
requests that start no run spend only the rate (spend_rate). The keys are the caller's: whose
rate and slots a request spends (its token) and whom the host's fair share counts (its user).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import TypeVar

from django.conf import settings

from webapp.admission.backends import get_admission, get_limiter
from webapp.admission.capacity import token_rate
from webapp.admission.fairshare import host_capacity, refused_recently
from webapp.admission.ratelimit import QuotaExceeded

T = TypeVar("T")

# A run request holds one of these threads from asking for its slots to the end of its run:
# waiting for a slot or an admission blocks it, and the run itself waits on the sandbox there.
# The queue caps bound the waiters per token and per user, the host's admission the runs; these
# threads are the bound across all users (past it, a request queues here before it even asks).
_runs = ThreadPoolExecutor(max_workers=256, thread_name_prefix="agents-run")


def spend_rate(key: object) -> None:
    """Spend one request of `key`'s rate (QuotaExceeded: 429 + Retry-After when empty).

    Blocking: the shared limiter talks to Redis, so call it on a worker thread (in_pool),
    never on the event loop every request of this process waits on.
    """
    per_minute, burst = token_rate()
    get_limiter().take(key, per_minute=per_minute, burst=burst)


def quota_enter(key: object, user: object) -> ExitStack:
    """spend_rate, then take one of `key`'s concurrency slots and one of the host's admissions
    for `user` (webapp.admission.fairshare); closing the returned stack gives them back
    (blocking).

    With every slot taken the request waits for one (AGENTS_SLOT_WAIT_S, at most
    AGENTS_MAX_WAITING_PER_TOKEN waiters) before the 429: a burst is served in turn. Past its
    user's fair share of the host it waits likewise (AGENTS_MAX_WAITING_PER_USER waiters).
    """
    spend_rate(key)
    with ExitStack() as stack:
        stack.enter_context(
            get_limiter().slot(
                key,
                limit=int(settings.AGENTS_MAX_CONCURRENT_PER_TOKEN),
                wait_s=settings.AGENTS_SLOT_WAIT_S,
                queue=int(settings.AGENTS_MAX_WAITING_PER_TOKEN),
            )
        )
        stack.enter_context(
            get_admission().admit(
                user,
                capacity=host_capacity(),
                wait_s=settings.AGENTS_SLOT_WAIT_S,
                queue=int(settings.AGENTS_MAX_WAITING_PER_USER),
            )
        )
        return stack.pop_all()


class Abandoned(Exception):
    """The request went away while its run waited for its slots: the run was not started."""


def _enter_then_run(key: object, user: object, work: Callable[[], T], gone: threading.Event) -> T:
    with quota_enter(key, user):
        if gone.is_set():
            raise Abandoned
        return work()


async def within_quota(key: object, user: object, work: Callable[[], T]) -> T:
    """Run `work` once quota_enter has let it in, then release; both on one thread of _runs.

    One thread for the wait and the run, without a hop back to the event loop between them
    (docs/benchmarks.md, "Fewer hops"). A token or user refused is refused again, its answer
    held past the Retry-After (fairshare.RefusedRecently).
    """
    if (again := refused_recently.again(key, user)) is not None:
        hold_s, refused = again
        await asyncio.sleep(hold_s)  # on the event loop: no thread held while the answer waits
        raise refused
    gone = threading.Event()
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(_runs, _enter_then_run, key, user, work, gone)
    except QuotaExceeded as refused:
        refused_recently.note(refused, token=key, user=user)
        raise
    except asyncio.CancelledError:
        # A thread cannot be stopped: one still waiting gives its slots back once it has them.
        gone.set()
        raise
