"""`undoable exec FILE|-`: one program in a fresh sandbox, the program's exit code.

Kept free of typer, rich and httpx: `undoable` (main.run) runs plain exec arguments straight
here, and the request goes over the standard library (cli/oneshot.py), so a script calling
`undoable exec` in a loop pays for little more than the interpreter and the request. Anything
else (--help, a mistake) goes through the typer command, which calls run_exec as well.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from undoable_client.models import ExecResult

EXIT_FAILED = 1


class UnreadableProgram(Exception):
    """FILE cannot be read, or is not UTF-8."""


class _Plain(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValueError(message)  # not plain: the typer command will say what is wrong


def parse_plain(args: list[str]) -> argparse.Namespace | None:
    """`FILE|- [--language L] [--timeout S] [--json]`, else None."""
    parser = _Plain(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("source")
    parser.add_argument("--language", "-l", default="python")
    parser.add_argument("--timeout", dest="timeout_s", type=float, default=None)
    parser.add_argument("--json", dest="json_out", action="store_true")
    try:
        parsed, rest = parser.parse_known_args(args)
    except (ValueError, argparse.ArgumentError):
        return None
    return None if rest else parsed


def read_program(source: str) -> str:
    """A program from FILE, or from standard input for `-`."""
    if source == "-":
        return sys.stdin.read()
    try:
        return Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UnreadableProgram(f"cannot read {source}: {exc}") from exc


def exit_code_of(exit_code: int | None, signal: int | None) -> int:
    """The shell's convention: the program's status, 128 + N for a signal N, else 1."""
    if exit_code is not None:
        return exit_code & 0xFF
    return 128 + signal if signal else EXIT_FAILED


def exec_once(code: str, language: str, timeout_s: float | None) -> ExecResult:
    from undoable_client.cli import config, oneshot

    settings = config.load()
    if oneshot.proxied():  # httpx honours the proxy variables; http.client does not
        from undoable_client.client import Client

        with Client(settings.url, settings.token) as client:
            return client.exec(code, language=language, timeout_s=timeout_s)
    return oneshot.OneShot(settings.url, settings.token).exec(
        code, language=language, timeout_s=timeout_s
    )


def run_exec(code: str, language: str, timeout_s: float | None, json_out: bool) -> int:
    """Run `code`, show its output; the exit code to leave with."""
    from undoable_client.cli.ui import make_ui

    ui = make_ui(json_out)
    with ui.spinner("running"):
        result = exec_once(code, language, timeout_s)
    if ui.json_mode:
        from dataclasses import asdict

        data = asdict(result)
        data["images"] = [{"mime": i.mime, "name": i.name} for i in result.images]
        ui.json(data)
    else:
        ui.stream(result.stdout, "stdout")
        ui.stream(result.stderr, "stderr")
        if result.limit:
            ui.note(f"stopped by the {result.limit} limit")
    return exit_code_of(result.exit_code, result.signal)
