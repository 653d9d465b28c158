"""Stateless exec: turn a validated request into a RunSpec, run it, and shape the reply."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from webapp.agents import conf
from webapp.agents.schemas import ApiError, ExecIn, check_timeout
from webapp.executor_glue import (
    BackendUnavailable,
    InvalidLimits,
    InvalidSpec,
    NoCapacity,
    OutputChunk,
    RunResult,
    RunSpec,
    executor_get,
    server_caps,
)
from webapp.stopping import SERVER_STOPPED, ended_when_the_server_stops

logger = logging.getLogger(__name__)
T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


async def in_pool(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run blocking sandbox work on our own thread pool, never on the event loop.

    Django's default for sync code from async views is ONE shared thread, which would serialise
    every run; sandboxes wait on pipes, so many threads cost little.
    """
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=conf.get_int("AGENTS_EXEC_THREADS"), thread_name_prefix="agents-exec"
            )
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_pool, functools.partial(fn, *args, **kwargs))


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def exec_build_spec(payload: ExecIn) -> tuple[RunSpec, float]:
    """Check sizes, names and limits (413/400) and build the spec; nothing runs yet."""
    if _utf8_len(payload.code) > conf.get_int("AGENTS_MAX_CODE_BYTES"):
        raise ApiError(413, f"code is larger than {conf.get_int('AGENTS_MAX_CODE_BYTES')} bytes")
    if len(payload.files) > conf.get_int("AGENTS_MAX_FILES"):
        raise ApiError(413, f"more than {conf.get_int('AGENTS_MAX_FILES')} files")
    if sum(_utf8_len(v) for v in payload.files.values()) > conf.get_int("AGENTS_MAX_FILES_BYTES"):
        raise ApiError(413, f"files are larger than {conf.get_int('AGENTS_MAX_FILES_BYTES')} bytes")
    if _utf8_len(payload.stdin) > conf.get_int("AGENTS_MAX_STDIN_BYTES"):
        raise ApiError(413, "stdin is too large")
    timeout = check_timeout(payload.timeout_s, server_caps().wall_time_s)
    try:
        spec = RunSpec(
            code=payload.code,
            language=payload.language,
            files={name: _utf8(text, f"files[{name!r}]") for name, text in payload.files.items()},
            stdin=_utf8(payload.stdin, "stdin"),
            interpreter_mode=payload.interpreter_mode,
        )
    except InvalidSpec as exc:
        raise ApiError(400, str(exc)) from None
    return spec, timeout


def _utf8(text: str, what: str) -> bytes:
    # JSON can carry a lone surrogate (\ud800), which no UTF-8 file or pipe can.
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ApiError(400, f"{what} is not UTF-8: a lone surrogate at {exc.start}") from None


def exec_run(spec: RunSpec, *, timeout_s: float) -> tuple[RunResult, str]:
    """Run `spec` in a fresh sandbox; returns the result and stdout+stderr as they interleaved."""
    chunks: list[str] = []

    def on_output(chunk: OutputChunk) -> None:
        chunks.append(chunk.text)

    try:
        executor = executor_get()
        caps = executor.caps
        limits = caps.narrowed(wall_time_s=timeout_s, cpu_time_s=min(timeout_s, caps.cpu_time_s))
        with ended_when_the_server_stops() as cancel:
            result = executor.run(spec, limits=limits, on_output=on_output, cancel=cancel)
        if cancel.cancelled:
            raise ApiError(503, SERVER_STOPPED, retry_after_s=5)
    except NoCapacity as exc:
        raise ApiError(503, f"no sandbox capacity: {exc}", retry_after_s=1) from None
    except BackendUnavailable as exc:
        logger.error("executor unavailable", extra={"error": str(exc)})
        raise ApiError(503, "the sandbox is unavailable on this server", retry_after_s=5) from None
    except (InvalidSpec, InvalidLimits) as exc:
        raise ApiError(400, str(exc)) from None
    combined = "".join(chunks) if chunks else result.stdout + result.stderr
    return result, combined


def result_json(result: RunResult) -> dict[str, Any]:
    return {
        "stdout": result.stdout,
        "stderr": result.stderr,
        "exit_code": result.exit_code,
        "signal": result.signal,
        "limit": result.limit,
        "timed_out": result.timed_out,
        "oom_killed": result.oom_killed,
        "truncated": result.truncated,
        "duration_ms": result.duration_ms,
        # Like Jupyter's display_data: base64 with a MIME type (and the file's name).
        "images": [image.as_json() for image in result.images],
        "image_notes": list(result.image_notes),
    }
