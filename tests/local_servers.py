"""Helpers for tests and benchmarks that start the app, workers or other servers as processes."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: Callable[[], object], *, timeout_s: float, what: str) -> object:
    """Poll `check` until it returns something truthy (processes give no event to wait on)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
        except Exception as exc:  # not up yet: connection refused, etc.
            value, last = None, exc
        else:
            last = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g}s waiting for {what} ({last!r})")
        time.sleep(0.1)


def signed_in_session_script(username: str, password: str) -> str:
    """Code for `manage.py shell -c`: create `username` and a signed-in session for them, and
    print its key (the `sessionid` cookie of a browser or websocket client). Variables `user`
    and `session` stay defined for code appended after it."""
    return f"""
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
user = get_user_model().objects.create_user({username!r}, password={password!r})
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
print(session.session_key)
"""


def worker_audit_key() -> str:
    """The audit key for a worker started on this test process's database: its DATABASE_URL
    leaves it no embedded key file, and a run's end it records must verify with the others."""
    # Imported here: the peers bench imports this module from a venv without the web app's
    # packages (make bench-peers).
    from webapp.audit.keys import audit_key

    return audit_key().decode()


def celery_worker_argv(*options: str) -> list[str]:
    """A Celery worker of the app with this interpreter (gossip and mingle off: our workers
    need nothing from each other at start), plus `options`."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "webapp",
        "worker",
        "--without-gossip",
        "--without-mingle",
        *options,
    ]


@contextmanager
def asgi_serving(application: Any) -> Iterator[str]:
    """`application` under the product's web server (webapp.server.serve's uvicorn configuration and
    limits) on a free port, in a thread of this process, so that it sees the test's database
    and settings; yields its URL.

    pytest-django's `live_server` runs Django's WSGI handler with the site's whole middleware
    stack, which the product never serves through."""
    import uvicorn

    from webapp.server import serve

    port = free_port()
    config = serve.config_from(["-b", "127.0.0.1", "-p", str(port)])
    config.app = application
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="asgi-test-server", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout_s=30, what=f"the server on port {port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
