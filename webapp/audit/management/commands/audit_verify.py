"""`manage.py audit_verify`: check the ledger's chain; name the first entry that breaks it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from webapp.audit.verify import audit_verify


class Command(BaseCommand):
    help = "Check the audit ledger: order, links and HMACs. Exits 1 naming the first bad entry."

    def handle(self, *args: Any, **options: Any) -> None:
        count, found = audit_verify()
        if found is not None:
            raise CommandError(f"audit ledger broken at {found}")
        self.stdout.write(f"audit ledger intact: {count} entries")
