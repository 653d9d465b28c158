"""`manage.py runs_reap [--loop]`: end runs whose worker is lost and changes nobody can decide
any more, once (or every interval, as the web process's reaper thread does)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from webapp.reliability.reaper import ReaperThread, reapers


class Command(BaseCommand):
    help = "End runs whose worker is lost, and orphaned pending changes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help="keep reaping every interval")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["loop"]:
            for what, reap in reapers():
                ended = reap()
                self.stdout.write(f"ended {len(ended)} {what}: {ended}")
            return
        thread = ReaperThread()
        thread.start()
        try:
            thread.join()
        except KeyboardInterrupt:
            thread.stop()
