"""A token's damage limits (its agent's blast radius), checked before an action is created.

A request outside them is refused with the limit's name and nothing is saved or run:
403 for what the token may never do (a kind, a host, a db target) and for too many actions
pending at once (Keep or Discard one first), 429 with Retry-After for the hourly cap.
"""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.shortcuts import get_object_or_404
from django.utils import timezone

from webapp.actions.models import Action, TokenLimits
from webapp.actions.requests import ActionRequest
from webapp.agents.models import ApiToken
from webapp.workspaces.models import OPEN_STATUSES

logger = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
KINDS = ("python", "fs", "db", "rest")
MAX_PATTERNS = 50


class LimitExceeded(Exception):
    """The request is outside the token's limit `name`; nothing ran."""

    def __init__(self, name: str, message: str, *, status: int = 403,
                 retry_after_s: int | None = None) -> None:  # fmt: skip
        super().__init__(f"limit {name}: {message}")
        self.name = name
        self.status = status
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Limits:
    allowed_kinds: list[str]
    allowed_hosts: list[str]
    allowed_db_targets: list[str]
    actions_per_hour: int | None
    pending_at_once: int | None
    review_required: bool = False
    rehearsal_required: bool = False

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


NO_LIMITS = Limits([], [], [], None, None)


class LimitsInvalid(ValueError):
    """Limits the owner asked for that cannot be set; `field` is the Limits field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def names_from_text(text: str) -> list[str]:
    """A comma-separated list as the owner types it (the account page, the command line)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def cap_from_number(given: int | None) -> int | None:
    """A cap as the owner gives it: none given or a negative number is no cap."""
    return None if given is None or given < 0 else given


def owned_token(owner: User, token_id: int) -> ApiToken:
    """The owner's active token, or 404: nobody sets the limits of another person's token."""
    return get_object_or_404(ApiToken, pk=token_id, owner=owner, revoked_at__isnull=True)


class SetterRefused(Exception):
    """The token asking may not set limits through the API; nothing changed."""


def own_limits_refuse(*, caller: ApiToken, target: ApiToken) -> None:
    """An agent loosening its own token's limits would widen its own blast radius."""
    if caller.pk == target.pk:
        raise SetterRefused(
            "a token cannot set its own limits: use another of its owner's tokens, one with "
            "no limits, or the token's Limits page"
        )


def limited_setter_refuse(*, caller: ApiToken) -> None:
    """A token with limits could otherwise lift them through a sibling token it also holds."""
    if token_limits(caller) != NO_LIMITS:
        raise SetterRefused(
            "this token has limits of its own, so it cannot set a token's limits: use one of "
            "its owner's tokens with no limits, or the token's Limits page"
        )


def token_limits(token: ApiToken) -> Limits:
    row = TokenLimits.objects.filter(token=token).first()
    if row is None:
        return NO_LIMITS
    return Limits(
        list(row.allowed_kinds),
        list(row.allowed_hosts),
        list(row.allowed_db_targets),
        row.actions_per_hour,
        row.pending_at_once,
        row.review_required,
        row.rehearsal_required,
    )


def token_limits_set(*, token: ApiToken, limits: Limits) -> Limits:
    """Replace the token's limits (the owner's choice: the account page, the command line)."""
    unknown = sorted(set(limits.allowed_kinds) - set(KINDS))
    if unknown:
        known = ", ".join(KINDS)
        raise LimitsInvalid(
            "allowed_kinds", f"unknown kinds: {', '.join(unknown)} (kinds are {known})"
        )
    for name in ("allowed_hosts", "allowed_db_targets"):
        if len(getattr(limits, name)) > MAX_PATTERNS:
            raise LimitsInvalid(name, f"{name}: at most {MAX_PATTERNS} patterns")
    for target in limits.allowed_db_targets:
        if not target.startswith(("sqlite:", "url:", "postgres:")):
            message = f"db targets are sqlite:PATH or url:CREDENTIAL, not {target!r}"
            raise LimitsInvalid("allowed_db_targets", message)
    TokenLimits.objects.update_or_create(token=token, defaults=limits.as_json())
    logger.info("token limits set", extra={"token_id": token.pk})
    return limits


def _matches(value: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(value.lower(), p.lower()) for p in patterns)


def _host_allowed(host: str, patterns: list[str]) -> bool:
    """`host` ("name" or "name:port") against the patterns: one with a port allows that port
    only, one without allows the name on any port."""
    name, colon, port = host.rpartition(":")
    if not (colon and port.isdigit()):
        name = host
    return _matches(host, patterns) or _matches(name, [p for p in patterns if ":" not in p])


def limits_check(*, token: ApiToken, request: ActionRequest) -> None:
    """Refuse (LimitExceeded) a request outside the token's limits. Call it inside the
    transaction that creates the action: it takes the token's limits row first, so concurrent
    requests of one token are counted one after the other."""
    limits = token_limits(token)
    if limits == NO_LIMITS:
        return
    if limits.allowed_kinds and request.kind not in limits.allowed_kinds:
        allowed = ", ".join(limits.allowed_kinds)
        raise LimitExceeded("allowed_kinds", f"this token may run {allowed} actions only")
    if limits.allowed_hosts:
        for host in request.hosts:
            if not _host_allowed(host, limits.allowed_hosts):
                raise LimitExceeded("allowed_hosts", f"{host} is not a host this token may call")
    if limits.rehearsal_required and request.kind in ("fs", "db") and not request.rehearse:
        raise LimitExceeded(
            "rehearsal_required",
            "this token's fs and db actions run only after a passing rehearsal: send "
            '"rehearse": true',
        )
    target = _db_target(request)
    targets = [_older_spelling(pattern) for pattern in limits.allowed_db_targets]
    if targets and target and not _matches(target, targets):
        raise LimitExceeded("allowed_db_targets", f"{target} is not a target this token may use")
    # The write that queues this token's concurrent requests behind one another.
    TokenLimits.objects.filter(token=token).update(last_action_at=timezone.now())
    now = timezone.now()
    if limits.actions_per_hour is not None:
        recent = Action.objects.filter(token=token, created_at__gte=now - HOUR)
        if recent.count() >= limits.actions_per_hour:
            oldest = recent.order_by("created_at").values_list("created_at", flat=True).first()
            wait = int(((oldest or now) + HOUR - now).total_seconds()) + 1
            raise LimitExceeded(
                "actions_per_hour",
                f"this token may create {limits.actions_per_hour} actions an hour",
                status=429,
                retry_after_s=max(wait, 1),
            )
    if limits.pending_at_once is not None and _pending(token) >= limits.pending_at_once:
        raise LimitExceeded(
            "pending_at_once",
            f"this token may have {limits.pending_at_once} actions pending at once; "
            "keep or discard one first",
        )


def _db_target(request: ActionRequest) -> str:
    if request.kind != "db":
        return ""
    if request.postgres:
        return f"url:{request.postgres}"
    return f"sqlite:{request.sqlite or 'database.sqlite3'}"


def _older_spelling(pattern: str) -> str:
    """`postgres:CREDENTIAL`, from before the URL's scheme picked the engine, is `url:`."""
    if pattern.startswith("postgres:"):
        return "url:" + pattern.removeprefix("postgres:")
    return pattern


def _pending(token: ApiToken) -> int:
    """The token's actions waiting for a decision (or still running toward one): open fs/db
    changes, and rest actions neither kept nor undone within their timeout."""
    mine = Action.objects.filter(token=token)
    open_changes = (
        mine.filter(
            query__kind__in=("fs", "db"),
            query__runs__direction="forward",
            query__runs__pending_change__status__in=OPEN_STATUSES,
        )
        .distinct()
        .count()
    )
    since = timezone.now() - timedelta(seconds=settings.UNDOABLE_REST_PENDING_TIMEOUT_S)
    rest = (
        mine.filter(
            query__kind="rest",
            kept_at__isnull=True,
            created_at__gte=since,
            query__runs__direction="forward",
            query__runs__status__in=("queued", "running", "succeeded"),
        )
        .exclude(query__runs__direction="reverse")
        .distinct()
        .count()
    )
    # An fs/db run still queued has no change yet: it is on its way to one.
    queued = (
        mine.filter(
            query__kind__in=("fs", "db"),
            query__runs__direction="forward",
            query__runs__status="queued",
        )
        .distinct()
        .count()
    )
    return open_changes + rest + queued


def review_check(*, token: ApiToken | None, review_url: str) -> None:
    """Refuse a Keep through the API of an action whose token requires the owner's review."""
    if token is not None and token_limits(token).review_required:
        raise LimitExceeded(
            "review_required",
            f"this token's actions are kept by their owner in the web app: {review_url}",
        )
