"""Running the `undoable` command as people and scripts do: a child process from the source
tree, piped or through a pseudo-terminal (pexpect), with its own config folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pexpect

from tests.clients.conftest import CLIENT_SRC

# A child that runs the command after applying `patch` (Python source): sabotage tests switch
# a protection off in the command's own process this way.
LAUNCH = "{patch}\nfrom undoable_client.cli.main import run\nrun()\n"


class Cli:
    def __init__(self, home: Path, url: str | None = None, token: str | None = None) -> None:
        self.home = home
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / "config"),
            "PYTHONPATH": str(CLIENT_SRC),
            # No keyring on a test machine: the credentials go to the 0600 file, as they do on
            # any machine without one.
            "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
            "COLUMNS": "100",
        }
        if url:
            self.env["UNDOABLE_URL"] = url
        if token:
            self.env["UNDOABLE_TOKEN"] = token

    def argv(self, args: list[str], patch: str = "") -> list[str]:
        return [sys.executable, "-c", LAUNCH.format(patch=patch), *args]

    def run(self, *args: str, input: str = "", patch: str = "") -> subprocess.CompletedProcess[str]:
        """Piped: stdin, stdout and stderr are pipes, as in a script."""
        return subprocess.run(
            self.argv(list(args), patch),
            input=input,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            cwd=self.home,
        )

    def spawn(self, *args: str, patch: str = "") -> pexpect.spawn:
        """Through a pseudo-terminal, as a person at a terminal."""
        argv = self.argv(list(args), patch)
        env = {**self.env, "TERM": "xterm-256color"}
        return pexpect.spawn(argv[0], argv[1:], env=env, cwd=str(self.home), timeout=120,
                             encoding="utf-8", dimensions=(40, 100))  # fmt: skip
