"""The `undoable` command: the agent API for people and scripts (`undoable --help`).

Modules import only typer at the top; httpx, rich and keyring load inside the commands that
use them, so `undoable --help` stays fast."""
