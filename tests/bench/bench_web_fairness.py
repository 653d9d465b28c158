"""Web runs shared between people (issue 41, item 12), on the embedded server as `make run`
starts it: user A queues A_RUNS runs of `time.sleep(A_SLEEP_S)`, then user B one `print(1)`.
Prints how long B's run took from its submission to its end, and where it started among A's
runs: with the runner's lent threads (the default), then without (UNDOABLE_RUNNER_LEND=0, the
runner before: B waits for the first of A's runs to end). Each server is stopped with SIGTERM at
the end, which fails A's unfinished runs ("The server stopped ...").
"""

from __future__ import annotations

import os
import secrets
import signal
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a plain script

from tests.bench.bench_api import ROOT, manage, start_server  # noqa: E402
from tests.fault.client import WebClient  # noqa: E402
from tests.local_servers import free_port  # noqa: E402

A_RUNS = int(os.environ.get("BENCH_FAIR_A_RUNS", "12"))
A_SLEEP_S = float(os.environ.get("BENCH_FAIR_A_SLEEP_S", "15"))


def one_round(lend: str | None) -> str:
    var = Path(tempfile.mkdtemp(prefix="undoable-bench-fair-"))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "PYTHONPATH": str(ROOT),
        "UNDOABLE_VAR_DIR": str(var),
        "EXECUTOR_ROOTFS": str(ROOT / "var" / "sandbox-rootfs"),
        "UNDOABLE_LOG_LEVEL": "WARNING",
        "UNDOABLE_RUNNER": "threads",
        **({"UNDOABLE_RUNNER_LEND": lend} if lend is not None else {}),
    }
    for name in ("REDIS_URL", "DATABASE_URL"):
        env.pop(name, None)
    password = secrets.token_urlsafe(12)
    manage(env, "migrate", "--noinput")
    manage(
        env,
        "shell",
        "-c",
        "from django.contrib.auth.models import User\n"
        f"for name in ('a', 'b'):\n    User.objects.create_user(name, password={password!r})",
    )
    port = free_port()
    server = start_server(env, port)
    try:
        url = f"http://127.0.0.1:{port}"
        a, b = (WebClient(url).login(name, password) for name in ("a", "b"))
        a_query, b_query = a.query_by_hand(), b.query_by_hand()
        for _ in range(A_RUNS):
            a.run(a_query, f"import time\ntime.sleep({A_SLEEP_S})\n")
        submitted = time.monotonic()
        b_run = b.run(b_query, "print(1)\n")
        while b.run_status(b_run)["status"] != "succeeded":
            time.sleep(0.05)
        waited_s = time.monotonic() - submitted
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    with sqlite3.connect(var / "db.sqlite3") as db:
        (b_started,) = db.execute("SELECT started_at FROM queries_run WHERE id = ?", (b_run,))
        a_started = [
            row[0]
            for row in db.execute("SELECT started_at FROM queries_run WHERE id != ?", (b_run,))
        ]
    before = sum(started < b_started[0] for started in a_started)
    return f"B's print(1) done {waited_s:.2f} s after it was sent, started after {before} of A's"


def main() -> None:
    print(f"A queues {A_RUNS} runs of time.sleep({A_SLEEP_S:g}), then B one print(1)")
    print(f"  lent threads (default): {one_round(None)}")
    print(f"  no thread lent (UNDOABLE_RUNNER_LEND=0): {one_round('0')}")


if __name__ == "__main__":
    main()
