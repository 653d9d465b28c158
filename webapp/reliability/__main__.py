"""Operator commands, usable as container health checks:

python -m webapp.reliability ping              # names of live Celery workers; exit 1 if none
python -m webapp.reliability ping --self       # this container's worker (worker@$HOSTNAME)
python -m webapp.reliability ping --count      # print only how many answered
python -m webapp.reliability reap [--loop]     # end lost runs now (or every interval)
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

import django


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webapp.reliability")
    sub = parser.add_subparsers(dest="command", required=True)
    ping = sub.add_parser("ping", help="ping Celery workers")
    ping.add_argument("--self", action="store_true", help="only worker@<this hostname>")
    ping.add_argument("--name", action="append", help="only this worker (repeatable)")
    ping.add_argument("--count", action="store_true", help="print the number that answered")
    ping.add_argument("--timeout", type=float, default=2.0)
    reap = sub.add_parser("reap", help="end runs whose worker is lost")
    reap.add_argument("--loop", action="store_true", help="keep reaping every interval")
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    django.setup()
    if args.command == "ping":
        return _ping(args)
    return _reap(loop=args.loop)


def _ping(args: argparse.Namespace) -> int:
    from webapp.reliability.workers import workers_ping

    names = list(args.name or [])
    if args.self:
        names.append(f"worker@{socket.gethostname()}")
    alive = workers_ping(timeout_s=args.timeout, names=names or None)
    sys.stdout.write(f"{len(alive)}\n" if args.count else "".join(f"{n}\n" for n in alive))
    wanted = len(names) if names else 1
    return 0 if len(alive) >= wanted else 1


def _reap(*, loop: bool) -> int:
    from webapp.reliability.reaper import ReaperThread, runs_reap
    from webapp.workspaces.reaper import changes_reap

    if not loop:
        ended = runs_reap()
        sys.stdout.write(f"ended {len(ended)} run(s): {ended}\n")
        changes = changes_reap()
        sys.stdout.write(f"ended {len(changes)} orphaned change(s): {changes}\n")
        return 0
    thread = ReaperThread()
    thread.start()
    try:
        thread.join()
    except KeyboardInterrupt:
        thread.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
