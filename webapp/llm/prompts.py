"""What we tell the model: the system prompts and the tool schemas (DESIGN.md "LLM proposal")."""

from __future__ import annotations

from typing import Any

PROPOSE_SYSTEM = """\
You write small programs that carry out what a person asks, plus a program that undoes it.
Answer by calling the propose_action tool.
- forward_code does the action; reverse_code undoes it as exactly as possible. If the action
  cannot be undone (an email was sent), say so in explanation and set reversible to false.
- Code runs in a sandbox with Python 3 (standard library, requests, psycopg2, numpy,
  matplotlib) or bash. To show a chart or picture, write a PNG or SVG file to the folder in
  os.environ["UNDOABLE_OUTPUT_DIR"] (create it first; matplotlib figures left open are shown).
- Secrets are environment variables. Refer to them only by name, e.g.
  os.environ["SLACK_TOKEN"]; list every name you use in credentials. You never see their values.
- List in hosts every host name the code will contact over the network.
- For a connected service, use only the scopes the person granted, and list in scopes every
  scope the code needs (credential and scope). If the request needs a scope that was not
  granted, say so in explanation.
- The reverse code can read the forward run's output from the FORWARD_OUTPUT environment
  variable (for ids the forward call returned).
"""

FIX_SYSTEM = """\
A program failed. Return a corrected version of the whole program by calling the propose_fix
tool. Keep what worked; fix the cause of the error. Secrets stay environment variables referred
to by name only.
"""

FENCED_HINT = """\
Answer with two fenced code blocks: first the forward program, then the reverse (undo) program,
each in ```python ... ``` (or ```bash). Then one paragraph of explanation.
"""

FIX_FENCED_HINT = "Answer with the whole corrected program in one fenced code block."

PROPOSE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "propose_action",
        "description": "Propose the forward program and the program that undoes it.",
        "parameters": {
            "type": "object",
            "properties": {
                "forward_code": {"type": "string"},
                "reverse_code": {"type": "string"},
                "explanation": {"type": "string"},
                "credentials": {"type": "array", "items": {"type": "string"}},
                "hosts": {"type": "array", "items": {"type": "string"}},
                "reversible": {"type": "boolean"},
                # An extension of shared/DESIGN.md's proposal (docs/api.md): optional.
                "probe": {
                    "type": "string",
                    "description": "rest only, optional: a Python program that exits 0 when "
                    "the forward call's effect is gone (run after the reverse program, with "
                    "the same hosts and credentials)",
                },
                "scopes": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "credential": {"type": "string"},
                            "scope": {"type": "string"},
                        },
                        "required": ["credential", "scope"],
                    },
                },
            },
            "required": ["forward_code", "reverse_code", "explanation"],
        },
    },
}

FIX_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "propose_fix",
        "description": "Return the corrected program.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "explanation": {"type": "string"}},
            "required": ["code"],
        },
    },
}


KIND_HINTS = {
    "db": (
        "The code gets a `db` object: db.execute(sql, params) runs ONE statement and returns "
        "its rows (a list of tuples, with .rowcount); db.executemany(sql, list_of_params). "
        "Placeholders are ? for SQLite, MariaDB and MySQL and %s for PostgreSQL. Undoable "
        "holds the transaction: never BEGIN, COMMIT or ROLLBACK (nor DDL on MariaDB/MySQL); "
        "Undo rolls everything back, so reverse_code may be empty."
    ),
    "fs": "The code works in its current folder (the workspace); Undo discards every change.",
}


def propose_user_message(
    prompt: str,
    kind: str,
    credential_names: list[str],
    connection_lines: list[str] | None = None,
    hosts: list[str] | None = None,
) -> str:
    """The person's request plus context. Only credential NAMES (and the scopes a connected
    service granted) ever reach the model."""
    lines = [f"Request: {prompt}", f"Kind of action: {kind}"]
    if kind in KIND_HINTS:
        lines.append(KIND_HINTS[kind])
    if credential_names:
        lines.append(
            "Credentials available as environment variables: " + ", ".join(credential_names)
        )
    if hosts:
        lines.append("Hosts the code may call (no others): " + ", ".join(hosts))
    if connection_lines:
        lines.append("Connected services (token in the named environment variable):")
        lines.extend(f"- {line}" for line in connection_lines)
    return "\n".join(lines)


def fix_user_message(code: str, error_output: str, language: str) -> str:
    return (
        f"Language: {language}\n\nProgram:\n```{language}\n{code}\n```\n\n"
        f"Its output and error (secrets already masked as ****):\n```\n{error_output}\n```"
    )
