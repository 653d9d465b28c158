"""`manage.py workers_ping [--self] [--name N] [--count]`: the live Celery workers, as a container
health check (exit 1 when fewer answer than were asked for, or none)."""

from __future__ import annotations

import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.reliability.workers import workers_ping


class Command(BaseCommand):
    help = "Ping Celery workers; print the names that answered (exit 1 if too few)."
    # A health check runs every few seconds: skip the system checks' start-up cost.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--self", action="store_true", dest="only_self", help="only worker@<this hostname>"
        )
        parser.add_argument("--name", action="append", help="only this worker (repeatable)")
        parser.add_argument("--count", action="store_true", help="print how many answered")
        parser.add_argument("--timeout", type=float, default=2.0)

    def handle(self, *args: Any, **options: Any) -> None:
        names = list(options["name"] or [])
        if options["only_self"]:
            names.append(f"worker@{socket.gethostname()}")
        alive = workers_ping(timeout_s=options["timeout"], names=names or None)
        self.stdout.write(str(len(alive)) if options["count"] else "\n".join(alive))
        wanted = len(names) if names else 1
        if len(alive) < wanted:
            raise CommandError(f"{len(alive)} of {wanted} worker(s) answered", returncode=1)
