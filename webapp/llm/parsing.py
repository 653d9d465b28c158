"""Turn a model's answer (tool-call arguments or fenced code blocks) into checked values."""

from __future__ import annotations

import json
import re
from typing import Any

from webapp.executor_glue import OUTPUT_ENV
from webapp.llm.errors import LLMBadAnswer

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_ENV_NAME = re.compile(
    r"""(?:environ(?:\.get)?\(\s*|environ\[\s*|getenv\(\s*)["']([A-Z_][A-Z0-9_]*)["']"""
)
_BASH_ENV = re.compile(r"\$\{?([A-Z][A-Z0-9_]*_(?:TOKEN|KEY|SECRET|PASSWORD|URL))\b")
_HOST = re.compile(r"https?://([A-Za-z0-9.-]+)")
_NAME_OK = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Set in every run by the sandbox itself: code that reads one needs no credential for it (a run
# would otherwise stop on "Missing credential: UNDOABLE_OUTPUT_DIR" before drawing anything).
SANDBOX_ENV_NAMES = frozenset({*OUTPUT_ENV, "FORWARD_OUTPUT"})
_HOST_OK = re.compile(r"^[A-Za-z0-9.-]{1,253}(:\d{1,5})?$")


def tool_arguments(raw: str | None) -> dict[str, Any]:
    """Decode a tool call's JSON arguments; anything but a JSON object is a bad answer."""
    try:
        value = json.loads(raw or "")
    except json.JSONDecodeError:
        raise LLMBadAnswer("the model's tool call was not valid JSON") from None
    if not isinstance(value, dict):
        raise LLMBadAnswer("the model's tool call was not a JSON object")
    return value


def required_text(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise LLMBadAnswer(f"the model's answer has no {key}")
    return value.strip("\n") + "\n"


def optional_text(args: dict[str, Any], key: str) -> str:
    value = args.get(key, "")
    return value.strip() if isinstance(value, str) else ""


def names(values: Any, pattern: re.Pattern[str]) -> list[str]:
    """Keep well-formed strings only, in order, without duplicates."""
    if not isinstance(values, list):
        return []
    seen: list[str] = []
    for value in values:
        if isinstance(value, str) and pattern.match(value.strip()) and value.strip() not in seen:
            seen.append(value.strip())
    return seen


def credential_names(values: Any) -> list[str]:
    return [n for n in names(values, _NAME_OK) if n not in SANDBOX_ENV_NAMES]


def scope_needs(values: Any) -> dict[str, list[str]]:
    """The tool's `scopes` [{credential, scope}] as {credential: [scope]}; malformed items dropped.

    Only the shape is checked here; which scopes exist is the connections registry's business.
    """
    out: dict[str, list[str]] = {}
    for item in values if isinstance(values, list) else []:
        if not isinstance(item, dict):
            continue
        credential, scope = item.get("credential"), item.get("scope")
        if isinstance(credential, str) and _NAME_OK.match(credential) and isinstance(scope, str):
            scopes = out.setdefault(credential, [])
            if scope and len(scope) <= 200 and scope not in scopes:
                scopes.append(scope)
    return out


def host_names(values: Any) -> list[str]:
    return names(values, _HOST_OK)


def fenced_blocks(content: str) -> list[tuple[str, str]]:
    """(language tag, code) of every fenced block in `content`."""
    return [(lang.lower(), code) for lang, code in _FENCE.findall(content or "")]


def prose_outside_fences(content: str) -> str:
    return _FENCE.sub("", content or "").strip()


def names_used_in(code: str) -> list[str]:
    """Environment variable names the code reads, for answers that did not list them."""
    found = _ENV_NAME.findall(code) + _BASH_ENV.findall(code)
    return credential_names(found)


def hosts_used_in(code: str) -> list[str]:
    return names(_HOST.findall(code), _HOST_OK)
