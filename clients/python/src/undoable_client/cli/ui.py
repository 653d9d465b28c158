"""How the command speaks: rich (colour, spinners, highlighted code and diffs) in a terminal,
plain text when piped, one JSON document with --json."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext

TYPE_CHECKING = False  # typing itself is a cost on every start: imported by type checkers only
if TYPE_CHECKING:
    from typing import Any


class Ui:
    def __init__(self, json_mode: bool) -> None:
        self.json_mode = json_mode
        self.rich = not json_mode and sys.stdout.isatty()
        self._console: Any = None

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False)
        return self._console

    def json(self, data: Any) -> None:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")

    def line(self, text: str = "", style: str = "") -> None:
        """A line for people (never in --json, which prints only its document)."""
        if self.json_mode:
            return
        if self.rich:
            from rich.text import Text

            self.console.print(Text(text, style=style))
        else:
            sys.stdout.write(text + "\n")

    def note(self, text: str) -> None:
        """Progress and hints: to stderr, so stdout stays the result."""
        if self.rich:
            from rich.console import Console
            from rich.markup import escape

            Console(stderr=True, highlight=False).print(f"[dim]{escape(text)}[/dim]")
        elif not self.json_mode:
            sys.stderr.write(text + "\n")

    def code(self, text: str, title: str, language: str = "python") -> None:
        if self.json_mode:
            return
        if self.rich:
            from rich.panel import Panel
            from rich.syntax import Syntax

            syntax = Syntax(text or "# (none)", language, line_numbers=True, word_wrap=True)
            self.console.print(Panel(syntax, title=title, title_align="left"))
        else:
            sys.stdout.write(f"--- {title}\n{text.rstrip()}\n---\n")

    def stream(self, text: str, stream: str = "stdout") -> None:
        """A program's output as it comes, unchanged, to the matching stream."""
        if self.json_mode:
            return
        out = sys.stderr if stream == "stderr" else sys.stdout
        out.write(text)
        out.flush()

    def table(self, rows: list[dict[str, Any]], columns: list[str]) -> None:
        if self.rich:
            from rich.table import Table

            table = Table(*columns)
            for row in rows:
                table.add_row(*(str(row.get(c, "")) for c in columns))
            self.console.print(table)
            return
        for row in rows:
            sys.stdout.write("\t".join(str(row.get(c, "")) for c in columns) + "\n")

    def change(self, change: dict[str, Any] | None) -> None:
        """What an action changed: +/-/~ per file with its diff, db statements, rest output."""
        if self.json_mode or not change:
            return
        if "forward_output" in change:
            self.line("response:", "bold")
            self.line(str(change["forward_output"]).rstrip())
        marks = {"added": ("+", "green"), "deleted": ("-", "red")}
        for entry in change.get("entries") or []:
            mark, colour = marks.get(entry.get("action", ""), ("~", "yellow"))
            summary = f"  ({entry['summary']})" if entry.get("summary") else ""
            self.line(f"{mark} {entry.get('path', '')}{summary}", colour)
            if entry.get("diff"):
                self.diff(str(entry["diff"]))

    def diff(self, text: str) -> None:
        if self.rich:
            from rich.syntax import Syntax

            self.console.print(Syntax(text.rstrip(), "diff", word_wrap=True))
        else:
            sys.stdout.write(text.rstrip() + "\n")

    def spinner(self, text: str) -> Any:
        if self.rich:
            return self.console.status(text)
        return nullcontext()

    def error(self, message: str) -> None:
        if self.json_mode:
            self.json({"error": message})
        elif self.rich:
            from rich.console import Console
            from rich.markup import escape

            Console(stderr=True, highlight=False).print(
                f"[bold red]error:[/bold red] {escape(message)}"
            )
        else:
            sys.stderr.write(f"error: {message}\n")


_current: list[Ui] = []


def make_ui(json_mode: bool) -> Ui:
    ui = Ui(json_mode)
    _current.append(ui)
    return ui


def current_ui() -> Ui:
    """The command's Ui, for errors raised past it (`--json` then answers with JSON)."""
    return _current[-1] if _current else Ui(json_mode="--json" in sys.argv)
