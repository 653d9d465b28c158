"""Fixtures shared across the whole test tree. Keep it small; suites add their own conftest.

The session's private servers (tests/servers.py) start on first use: `redis_server` and
`postgres_server`. Missing prerequisites are one line each (tests/prerequisites.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests import prerequisites, servers
from tests.local_servers import asgi_serving
from tests.prerequisites import MISSING, DockerImage, OptionalPiece, chromium_problem, required
from tests.quota_mounts import ours_under
from tests.servers import mariadb_problem, postgres_problem

# Fixtures shared by tests in several folders.
pytest_plugins = ["tests.setuid_elf"]

REPO = Path(__file__).resolve().parents[1]

# --- prerequisites -------------------------------------------------------------------------

# Fixtures that run real sandboxes: a session that uses any of them needs bwrap & co.
SANDBOX_FIXTURES = {"sandbox_rootfs", "backend", "sandbox_backend"}
OPTIONAL = {
    "docker": OptionalPiece("DOCKER", "Docker backend", DockerImage()),
    "postgres_server": OptionalPiece("POSTGRES", "PostgreSQL", lambda say: postgres_problem()),
    "mariadb_server": OptionalPiece("MARIADB", "MariaDB", lambda say: mariadb_problem()),
    "chromium": OptionalPiece("BROWSER", "Browser", lambda say: chromium_problem()),
}


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(SANDBOX_FIXTURES & set(getattr(item, "fixturenames", ())) for item in session.items):
        problems = prerequisites.sandbox_problems()
        if problems:
            pytest.exit("; ".join(problems), returncode=MISSING)


def _say(config: pytest.Config, line: str) -> None:
    """One line on the terminal, also while a test's output is being captured."""
    capture = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if reporter is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests of an optional piece (docker-marked, or using `postgres_server`, `mariadb_server` or
    `chromium`): the piece is checked once (the Docker image built if need be); without it they
    are skipped here, so that one summary line says why, not one error per test."""
    needs = {"docker"} if item.get_closest_marker("docker") else set()
    needs |= {"postgres_server", "mariadb_server", "chromium"} & set(
        getattr(item, "fixturenames", ())
    )
    for need in sorted(needs):
        piece = OPTIONAL[need]
        problem = piece.ensure(lambda line: _say(item.config, line))
        if problem is None:
            continue
        if required(piece.piece):
            pytest.exit(f"UNDOABLE_REQUIRE_{piece.piece}=1 but {problem}", returncode=MISSING)
        piece.skipped += 1
        pytest.skip(f"{problem} (UNDOABLE_REQUIRE_{piece.piece}=1 makes this a failure)")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for piece in OPTIONAL.values():
        if piece.skipped:
            line = f"{piece.label}: {piece.skipped} tests skipped: {piece.problem}"
            terminalreporter.write_line(line, yellow=True)


# --- pytest-xdist ----------------------------------------------------------------------------
# Under `-n N` each worker is a session of its own (its own servers, cgroups, temporary folder)
# and only the controller reports: a worker hands it what it would have said (its skips, what
# outlived it) through xdist's `workeroutput`, which arrives in pytest_testnodedown.

_WORKER_PROBLEMS: list[str] = []


def _worker_output(config: pytest.Config) -> dict[str, Any] | None:
    """In an xdist worker, the dict that reaches the controller when the worker ends."""
    return getattr(config, "workeroutput", None)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    output = getattr(node, "workeroutput", None) or {}
    _WORKER_PROBLEMS.extend(output.get("session_problems", ()))
    for name, (skipped, problem) in output.get("skipped", {}).items():
        OPTIONAL[name].skipped += skipped
        OPTIONAL[name].problem = problem


# --- private servers -----------------------------------------------------------------------

_ROOTS: list[servers.ServerRoot] = []


@pytest.fixture(scope="session")
def server_root() -> Iterator[servers.ServerRoot]:
    """The session's folder for its servers (and their watchdog)."""
    root = servers.ServerRoot()
    _ROOTS.append(root)
    try:
        yield root
    finally:
        root.close()


@pytest.fixture(scope="session")
def redis_server(server_root: servers.ServerRoot) -> servers.RedisServer:
    """A private redis-server for the session: tests pick a database with `.url(db)`."""
    problem = servers.redis_problem()
    if problem:
        pytest.exit(problem, returncode=MISSING)
    server = servers.RedisServer(server_root.path / "redis")
    server_root.add(server)
    assert server.process is not None
    server_root.pids.add(server.process.pid)
    return server


@pytest.fixture(scope="session")
def postgres_server(server_root: servers.ServerRoot) -> servers.PostgresServer:
    """A private PostgreSQL cluster for the session: `.database()` makes a fresh database."""
    server = servers.PostgresServer(server_root.path / "pg")
    server_root.add(server)
    server_root.pids.add(server.pid)
    return server


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """After the fixtures' teardown: no process of the session's servers may be left, and no
    quota tmpfs a test mounted under the session's temporary folder."""
    glue = sys.modules.get("webapp.executor_glue")
    if glue is not None:  # the web app's Executor, if a test built it: its cgroups go too
        glue.executor_close()
    problems = list(_WORKER_PROBLEMS)
    left = [line for root in _ROOTS for line in servers.survivors(root.path, root.pids)]
    if left:
        problems.append("server processes outlived the session: " + "; ".join(left))
    # pytest's own temporary folder of this session, if a test made one (tmp_path).
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)
    mounts = ours_under(basetemp) if basetemp is not None else []
    if mounts:
        problems.append("quota tmpfs mounts outlived the session: " + "; ".join(mounts))
    worker_output = _worker_output(session.config)
    if worker_output is not None:  # the controller says it and fails the run
        worker_output["session_problems"] = problems
        worker_output["skipped"] = {
            name: (piece.skipped, piece.problem)
            for name, piece in OPTIONAL.items()
            if piece.skipped
        }
        return
    for problem in problems:
        _say(session.config, problem)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# --- executor ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mariadb_server(server_root: servers.ServerRoot) -> servers.MariaDbServer:
    """A private MariaDB server for the session: `.database()` makes a fresh database."""
    server = servers.MariaDbServer(server_root.path / "mariadb")
    server_root.add(server)
    server_root.pids.add(server.pid)
    return server


@pytest.fixture(scope="session")
def sandbox_rootfs() -> Path:
    """The sandbox root filesystem both backends run programs on (built by make)."""
    if not prerequisites.ROOTFS_STAMP.exists():
        pytest.exit(
            f"no sandbox root filesystem in {prerequisites.ROOTFS}: run `make sandbox-rootfs`",
            returncode=MISSING,
        )
    return prerequisites.ROOTFS


@pytest.fixture(scope="session")
def docker_missing() -> Callable[[str], NoReturn]:
    """Call with a reason when the Docker backend cannot be built although the engine is there.

    CI sets UNDOABLE_REQUIRE_DOCKER=1 and then this fails loudly; elsewhere it skips, saying why.
    """

    def missing(reason: str) -> NoReturn:
        if required("DOCKER"):
            pytest.fail(f"UNDOABLE_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(f"{reason} (set UNDOABLE_REQUIRE_DOCKER=1 to make this a failure)")

    return missing


@pytest.fixture(scope="session")
def docker_engine(docker_missing) -> Iterator[Any]:
    """The Docker engine's low-level API client, or a skip (a failure in CI) without one."""
    import docker  # only the tests that ask for the engine need its client

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        docker_missing(f"no Docker engine: {exc}")
    yield client.api
    client.close()


@pytest.fixture
def app_server(transactional_db: None) -> Iterator[str]:
    """The URL of the ASGI application the product serves (webapp.asgi) under its own server,
    in this process: it sees the test's database rows and settings."""
    from webapp.asgi import application

    with asgi_serving(application) as url:
        yield url


# --- database ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """A file-based SQLite test database in a fresh folder instead of the in-memory one:
    runner threads and Celery worker processes must see the same committed rows, and a fresh
    folder means no WAL file of an earlier run can be mistaken for this one's."""
    import tempfile

    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        folder = Path(tempfile.mkdtemp(prefix="undoable-testdb-"))
        db.setdefault("TEST", {})["NAME"] = str(folder / "test.sqlite3")


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings) -> None:
    # PBKDF2's deliberate slowness buys nothing in tests; browser tests' servers keep it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _audit_tallies_flushed_by_tests(settings, monkeypatch) -> None:
    # No flusher thread writing from behind a test's back: tests flush and seal when they mean to.
    settings.UNDOABLE_AUDIT_FLUSH_S = 0
    # Each test counts from zero: an earlier test's calls belong to its rolled-back database.
    from webapp.audit import tally

    monkeypatch.setattr(tally, "_counts", {})
