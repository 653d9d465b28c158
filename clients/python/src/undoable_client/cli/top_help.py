"""`undoable --help`, the top-level help, printed without importing typer.

typer (with its vendored click) is nine tenths of what `undoable --help` costs, and the
top-level help is the one people and scripts run most. TEXT is the typer app's own help,
rendered as click renders it for the console script at a terminal at least 80 columns wide (or
none); show() prints it only then, else the typer app renders it itself. A test holds TEXT equal
to the typer app's rendering: after changing a command's name or its docstring's first
sentence, paste that test's rendering here.
"""

from __future__ import annotations

import os
import sys

# click's help is at most 78 columns wide (80 less its margin): wider terminals get this text.
MIN_COLUMNS = 80
PROG_NAME = "undoable"

TEXT = """\
Usage: undoable [OPTIONS] COMMAND [ARGS]...

  Run code in Undoable's sandbox, and keep or undo what it did.

Options:
  --help  Show this message and exit.

Commands:
  review   The actions of your tokens that wait for Keep or Discard.
  do       Ask the server's LLM for an action, read it, run it, then Keep...
  connect  Sign in to a service (OAuth for native apps) and keep its...
  login    Check a token against URL and keep both in the config file...
  exec     Run a program once in a fresh sandbox; exits with the...
  mcp      Serve MCP over stdio for an agent (needs undoable-client[mcp]).
  session  Stateful sessions: variables and files persist between calls.
  action   Actions: see them, Keep or Discard a change, Undo what one did.
  creds    Credentials kept on this machine, sent with the actions that...
"""


def renders_as_stored() -> bool:
    """Whether click would render TEXT here: the console script (click names the program after
    argv[0] unless Python ran a module) at a terminal at least MIN_COLUMNS wide."""
    import shutil  # what click sizes its help with

    main = sys.modules.get("__main__")
    return (
        os.path.basename(sys.argv[0]) == PROG_NAME
        and getattr(main, "__package__", None) in (None, "")
        and shutil.get_terminal_size().columns >= MIN_COLUMNS
    )


def show() -> bool:
    """Print the top-level help if click would print TEXT here; whether it did."""
    if not renders_as_stored():
        return False
    sys.stdout.write(TEXT)
    sys.stdout.flush()
    return True
