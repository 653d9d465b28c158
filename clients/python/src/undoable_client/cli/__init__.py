"""The `undoable` command: the agent API for people and scripts (`undoable --help`).

The entry point (main.py) imports nothing heavy and runs plain `exec` arguments itself
(exec_command.py, over oneshot.py); the typer app (app.py) and its command modules import only
typer at the top; httpx, rich and keyring load inside the commands that use them, so
`undoable --help` and `undoable exec` stay fast."""
