"""The query pages' tests that run code use the runs' fixtures: a real sandbox, the thread
runner."""

from tests.webapp.runs.conftest import sandbox_backend, threads_runner  # noqa: F401
