"""The setuid proof's tools: a tiny ELF that prints its effective uid, and a stranger to run it.

After Keep, a file the sandbox made setuid must not give an unprivileged host user root: the
stranger runs the kept ELF and it must print the stranger's uid, not 0.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

STRANGER = 12345  # an unprivileged host uid that owns nothing here
_SOURCE = (
    '#include <stdio.h>\n#include <unistd.h>\nint main(void){printf("%d\\n",(int)geteuid());}\n'
)


@pytest.fixture(scope="session")
def whoami_elf(tmp_path_factory) -> bytes:
    folder = tmp_path_factory.mktemp("elf")
    (folder / "whoami.c").write_text(_SOURCE)
    subprocess.run(["gcc", "-O1", "-o", "whoami", "whoami.c"], cwd=folder, check=True)
    return (folder / "whoami").read_bytes()


def euid_as_stranger(path: Path) -> str:
    """What the ELF at `path` prints when the stranger runs it."""
    argv = ["setpriv", f"--reuid={STRANGER}", f"--regid={STRANGER}", "--clear-groups", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
