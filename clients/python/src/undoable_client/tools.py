"""Agent glue: an OpenAI tool schema for running code, and running a completion's tool call.

tool = CodeExecTool(Client(url, token))
completion = openai_client.chat.completions.create(
    model=..., messages=..., tools=[tool.schema], tool_choice=tool.choice)
output = tool.from_response(completion)
"""

from __future__ import annotations

import json
import re
from typing import Any

from undoable_client.client import Client
from undoable_client.models import ExecResult

TOOL_NAME = "execute_python"
_DESCRIPTION = (
    "Runs a standalone Python 3 program in a fresh sandbox and returns everything it printed "
    "(stdout and stderr). Write the program as the contents of main.py, with no code fences. "
    "Always print() the result you need. There is no network and no file you did not create."
)
_FENCE = re.compile(r"^\s*```[\w+-]*[ \t]*\n(?P<body>.*?)\n?```\s*$", re.DOTALL)


def tool_schema(name: str = TOOL_NAME) -> dict[str, Any]:
    """The Chat Completions `tools` entry for code execution."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": _DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": "Python source"}},
                "required": ["code"],
                "additionalProperties": False,
            },
        },
    }


def strip_code_fences(code: str) -> str:
    """Remove the ```python ... ``` fence a model adds even when told not to."""
    match = _FENCE.match(code)
    return match.group("body") if match else code.strip("\n")


def _get(obj: Any, name: str) -> Any:
    # openai SDK objects and plain dicts (raw JSON) both work.
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def tool_call_code(completion: Any, name: str = TOOL_NAME) -> str | None:
    """The code argument of the first `name` tool call in a completion, fences stripped."""
    for choice in _get(completion, "choices") or []:
        message = _get(choice, "message")
        for call in _get(message, "tool_calls") or []:
            function = _get(call, "function")
            if _get(function, "name") != name:
                continue
            arguments = _get(function, "arguments") or "{}"
            code = json.loads(arguments).get("code") if isinstance(arguments, str) else None
            return strip_code_fences(code) if isinstance(code, str) else None
    return None


def format_output(result: ExecResult) -> str:
    """What the model gets back: the output, plus a plain note when the run did not finish."""
    text = result.stdout + result.stderr
    if result.timed_out:
        text += "\n[timed out]"
    elif result.exit_code not in (0, None):
        text += f"\n[exit code {result.exit_code}]"
    return text


class CodeExecTool:
    """Binds the tool schema to a Client, like replit-code-exec's build_code_exec()."""

    def __init__(
        self,
        client: Client,
        *,
        name: str = TOOL_NAME,
        interpreter_mode: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        self.client = client
        self.name = name
        self.interpreter_mode = interpreter_mode
        self.timeout_s = timeout_s

    @property
    def schema(self) -> dict[str, Any]:
        return tool_schema(self.name)

    @property
    def choice(self) -> dict[str, Any]:
        """A `tool_choice` that forces this tool."""
        return {"type": "function", "function": {"name": self.name}}

    def __call__(self, code: str) -> str:
        result = self.client.exec(
            strip_code_fences(code),
            interpreter_mode=self.interpreter_mode,
            timeout_s=self.timeout_s,
        )
        return format_output(result)

    def from_response(self, completion: Any) -> str:
        """Run the code of the completion's tool call and return its output."""
        code = tool_call_code(completion, self.name)
        if code is None:
            raise ValueError(f"the completion has no {self.name!r} tool call")
        return self(code)


def from_response(completion: Any, client: Client, **options: Any) -> str:
    """Module-level shortcut: `CodeExecTool(client, **options).from_response(completion)`."""
    return CodeExecTool(client, **options).from_response(completion)
