"""A keyring backend for tests: what an OS keyring does, kept in a JSON file named by
$TEST_KEYRING_FILE, so a test can look inside. Chosen with
PYTHON_KEYRING_BACKEND=file_keyring.FileKeyring (this folder on PYTHONPATH)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend


class FileKeyring(KeyringBackend):
    priority = 1  # type: ignore[assignment]

    def _load(self) -> dict[str, str]:
        path = Path(os.environ["TEST_KEYRING_FILE"])
        return json.loads(path.read_text()) if path.exists() else {}

    def _save(self, data: dict[str, str]) -> None:
        Path(os.environ["TEST_KEYRING_FILE"]).write_text(json.dumps(data))

    def get_password(self, service: str, username: str) -> str | None:
        return self._load().get(f"{service}/{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        self._save({**self._load(), f"{service}/{username}": password})

    def delete_password(self, service: str, username: str) -> None:
        data = self._load()
        data.pop(f"{service}/{username}", None)
        self._save(data)
