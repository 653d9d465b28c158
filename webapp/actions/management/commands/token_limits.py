"""`python manage.py token_limits <prefix> [--kinds python,fs] [--hosts '*.slack.com'] ...`:
set (or, with no option, show) the damage limits of an API token, found by its prefix."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.actions.limits import (
    Limits,
    cap_from_number,
    names_from_text,
    token_limits,
    token_limits_set,
)
from webapp.agents.models import ApiToken


def _names(value: str | None) -> list[str] | None:
    return None if value is None else names_from_text(value)


class Command(BaseCommand):
    help = "Show or set an API token's damage limits (what its agent's actions may do)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix", help="the token's prefix, as the account page shows it")
        parser.add_argument("--kinds", help="allowed kinds, comma-separated ('' for any)")
        parser.add_argument("--hosts", help="allowed host patterns, comma-separated")
        parser.add_argument("--db-targets", help="sqlite:PATH or url:CREDENTIAL patterns")
        parser.add_argument("--per-hour", type=int, help="actions an hour (-1: no cap)")
        parser.add_argument("--pending", type=int, help="actions pending at once (-1: no cap)")
        parser.add_argument(
            "--review",
            choices=("on", "off"),
            help="on: Keep through the API is refused; the owner keeps actions in the web app",
        )
        parser.add_argument(
            "--rehearsal",
            choices=("on", "off"),
            help="on: fs and db actions must pass a rehearsal (rehearse: true) before they run",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        found = list(ApiToken.objects.filter(prefix=options["prefix"], revoked_at__isnull=True))
        if len(found) != 1:
            raise CommandError(f"{len(found)} active tokens have the prefix {options['prefix']!r}")
        token = found[0]
        now = token_limits(token)
        kinds, hosts, targets = (_names(options[name]) for name in ("kinds", "hosts", "db_targets"))
        caps = {name: options[name] for name in ("per_hour", "pending")}
        review, rehearsal = options["review"], options["rehearsal"]
        if any(v is not None for v in (kinds, hosts, targets, review, rehearsal, *caps.values())):
            wanted = Limits(
                allowed_kinds=now.allowed_kinds if kinds is None else kinds,
                allowed_hosts=now.allowed_hosts if hosts is None else hosts,
                allowed_db_targets=now.allowed_db_targets if targets is None else targets,
                actions_per_hour=_cap(caps["per_hour"], now.actions_per_hour),
                pending_at_once=_cap(caps["pending"], now.pending_at_once),
                review_required=now.review_required if review is None else review == "on",
                rehearsal_required=(
                    now.rehearsal_required if rehearsal is None else rehearsal == "on"
                ),
            )
            try:
                now = token_limits_set(token=token, limits=wanted)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(now.as_json(), indent=2))


def _cap(given: int | None, current: int | None) -> int | None:
    return current if given is None else cap_from_number(given)
