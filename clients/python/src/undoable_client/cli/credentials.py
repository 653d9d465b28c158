"""Credentials kept on this machine (`undoable creds`): in the OS keyring when it has a
backend, else in a 0600 file beside the config. The server never stores them: the command
sends the ones an action names with that call alone.

The names are listed in `credentials.json` (keyring backends cannot list); with no keyring the
values sit in that file too.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

from undoable_client.cli.config import UserError, config_dir, read_json, write_private

SERVICE = "undoable"
# An environment variable name: the program reads the credential as one.
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class SecretError(UserError):
    """A bad credential name, or one not kept here."""


def store_path() -> Path:
    return config_dir() / "credentials.json"


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise SecretError(f"{name!r} is not a valid credential name (an environment variable)")
    return name


def _keyring() -> Any | None:
    """The keyring module when a real backend is there, else None."""
    import keyring
    from keyring.backends import fail

    backend = keyring.get_keyring()
    if isinstance(backend, fail.Keyring) or backend.priority <= 0:
        return None
    return keyring


def where() -> str:
    ring = _keyring()
    return f"keyring ({type(ring.get_keyring()).__name__})" if ring else str(store_path())


def _load() -> dict[str, Any]:
    data = read_json(store_path())
    return {"names": list(data.get("names") or []), "values": dict(data.get("values") or {})}  # type: ignore[call-overload]


def _save(data: dict[str, Any]) -> None:
    write_private(store_path(), json.dumps(data, indent=2).encode() + b"\n")


def add(name: str, value: str) -> None:
    check_name(name)
    data = _load()
    ring = _keyring()
    if ring is not None:
        ring.set_password(SERVICE, name, value)
        data["values"].pop(name, None)
    else:
        data["values"][name] = value
    if name not in data["names"]:
        data["names"].append(name)
    _save(data)


def names() -> list[str]:
    return sorted(_load()["names"])


def remove(name: str) -> bool:
    data = _load()
    if name not in data["names"]:
        return False
    ring = _keyring()
    if ring is not None:
        import keyring.errors

        # Already gone from the keyring: the listing is all that is left to forget.
        with contextlib.suppress(keyring.errors.PasswordDeleteError):
            ring.delete_password(SERVICE, name)
    data["values"].pop(name, None)
    data["names"].remove(name)
    _save(data)
    return True


def get(name: str) -> str:
    ring = _keyring()
    value = ring.get_password(SERVICE, name) if ring is not None else None
    if value is None:
        value = _load()["values"].get(name)
    if value is None:
        raise SecretError(f"no credential {name!r}: add it with `undoable creds add {name}`")
    return str(value)


def gather(wanted: list[str]) -> dict[str, str]:
    """The values of the credentials an action names, for that call alone."""
    return {name: get(check_name(name)) for name in wanted}
