"""`undoable exec FILE|-`: one program in a fresh sandbox, the program's exit code.

Kept light: `undoable` (main.run) runs plain exec arguments straight here, and the request
goes over the standard library (cli/oneshot.py) with the answer kept as the server's JSON, so
a script calling `undoable exec` in a loop pays for little more than the interpreter and the
request: no typer, rich, httpx, argparse, pathlib, dataclasses or typing. Anything else
(--help, a mistake) goes through the typer command, which calls run_exec as well.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing itself is a cost on every start: imported by type checkers only
if TYPE_CHECKING:
    from typing import Any

EXIT_FAILED = 1
# The options of the plain form that take a value, and the attribute each sets.
_PLAIN_OPTIONS = {"--language": "language", "-l": "language", "--timeout": "timeout_s"}


class UnreadableProgram(Exception):
    """FILE cannot be read, or is not UTF-8."""


class PlainArgs:
    """`FILE|- [--language L] [--timeout S] [--json]`, the arguments exec runs itself."""

    def __init__(self) -> None:
        self.source = ""  # FILE, or - for standard input
        self.language = "python"
        self.timeout_s: float | None = None
        self.json_out = False


def parse_plain(args: list[str]) -> PlainArgs | None:
    """The plain form's arguments, else None: anything else (--help, `--opt=value`, `--`, a
    second FILE, a bad number, an unknown option) is left to the typer command, which parses
    every form and says what is wrong."""
    plain = PlainArgs()
    rest = iter(args)
    for arg in rest:
        if arg == "--json":
            plain.json_out = True
        elif arg in _PLAIN_OPTIONS:
            value = next(rest, None)
            if value is None or value.startswith("-"):
                return None
            if _PLAIN_OPTIONS[arg] == "language":
                plain.language = value
            else:
                try:
                    plain.timeout_s = float(value)  # as click's FLOAT reads it
                except ValueError:
                    return None
        elif (arg == "-" or arg[:1] not in ("", "-")) and not plain.source:
            plain.source = arg
        else:
            return None
    return plain if plain.source else None


def read_program(source: str) -> str:
    """A program from FILE, or from standard input for `-`."""
    if source == "-":
        return sys.stdin.read()
    try:
        with open(source, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UnreadableProgram(f"cannot read {source}: {exc}") from exc


def exit_code_of(exit_code: int | None, signal: int | None) -> int:
    """The shell's convention: the program's status, 128 + N for a signal N, else 1."""
    if exit_code is not None:
        return exit_code & 0xFF
    return 128 + signal if signal else EXIT_FAILED


def exec_once(code: str, language: str, timeout_s: float | None) -> dict[str, Any]:
    """The server's answer (ExecResult's fields as JSON), each image as its MIME type and name."""
    from undoable_client.cli import config, oneshot

    settings = config.load()
    if oneshot.proxied():  # httpx honours the proxy variables; http.client does not
        from dataclasses import asdict

        from undoable_client.client import Client

        with Client(settings.url, settings.token) as client:
            answer = asdict(client.exec(code, language=language, timeout_s=timeout_s))
    else:
        answer = oneshot.OneShot(settings.url, settings.token).exec_json(
            code, language=language, timeout_s=timeout_s
        )
    images = answer.get("images") or ()
    answer["images"] = [{"mime": i["mime"], "name": i.get("name", "")} for i in images]
    return answer


def run_exec(code: str, language: str, timeout_s: float | None, json_out: bool) -> int:
    """Run `code`, show its output; the exit code to leave with."""
    from undoable_client.cli.ui import make_ui

    ui = make_ui(json_out)
    with ui.spinner("running"):
        result = exec_once(code, language, timeout_s)
    if ui.json_mode:
        ui.json(result)
    else:
        ui.stream(result.get("stdout") or "", "stdout")
        ui.stream(result.get("stderr") or "", "stderr")
        if result.get("limit"):
            ui.note(f"stopped by the {result['limit']} limit")
    return exit_code_of(result.get("exit_code"), result.get("signal"))
