"""`python manage.py create_api_token <username> [--name NAME]`: print a new API token once."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.agents.tokens import token_create


class Command(BaseCommand):
    help = "Create an API token for an existing user and print it (it is shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label to recognise the token by")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: options["username"]})
        except User.DoesNotExist:
            raise CommandError(f"no user named {options['username']!r}; create it first") from None
        new = token_create(owner=user, name=options["name"] or "command line")
        self.stdout.write(new.secret)
        self.stderr.write(
            f"Token {new.token.prefix}… created for {options['username']}. "
            "Store it now: it cannot be shown again."
        )
