"""What to run: the program, its inputs and the environment it may see."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from executor.errors import InvalidSpec

LANGUAGES = ("python", "bash")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


# The kernel's limit on one name in a path (NAME_MAX), in bytes.
MAX_NAME_BYTES = 255


def validate_relative_path(name: str) -> PurePosixPath:
    """A file name inside the working directory: relative, no '..', no NUL, not empty, UTF-8.

    Returned normalised (`a//b/` is `a/b`); RunSpec asks for names already written so."""
    if not name or "\x00" in name or name.startswith("/") or "\\" in name:
        raise InvalidSpec(f"invalid file name: {name!r}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidSpec(f"invalid file name: {name!r} is not UTF-8") from None
    path = PurePosixPath(name)
    if not path.parts or ".." in path.parts:
        raise InvalidSpec(f"invalid file name: {name!r}")
    if len(path.parts) > 16 or len(name) > 255:
        raise InvalidSpec(f"file name too long: {name[:40]!r}...")
    if any(len(part.encode("utf-8")) > MAX_NAME_BYTES for part in path.parts):
        raise InvalidSpec(f"file name too long: a part of {name[:40]!r} is over 255 bytes")
    return path


def _check_file_names(names: list[str]) -> None:
    """Each name written plainly, and none of them also the folder of another."""
    for name in names:
        plain = str(validate_relative_path(name))
        if plain != name:
            raise InvalidSpec(f"invalid file name: {name!r}; write it {plain!r}")
    given = set(names)
    for name in names:
        for folder in PurePosixPath(name).parents:
            if str(folder) in given:
                raise InvalidSpec(f"{str(folder)!r} is both a file and a folder in the files")


@dataclass(frozen=True)
class RunSpec:
    code: str
    language: str = "python"
    files: dict[str, bytes] = field(default_factory=dict)
    stdin: bytes = b""
    # Only these variables reach the program; the host environment never does.
    env: dict[str, str] = field(default_factory=dict)
    # Echo the value of bare expressions, like the interactive interpreter.
    interpreter_mode: bool = False
    # For network="allowlist": the only hosts the egress proxy lets through.
    allowed_hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise InvalidSpec(f"unknown language {self.language!r}; use one of {LANGUAGES}")
        if "\x00" in self.code:
            raise InvalidSpec("code contains a NUL byte")
        _check_file_names(list(self.files))
        for key, value in self.env.items():
            if not _ENV_NAME.match(key):
                raise InvalidSpec(f"invalid environment variable name: {key!r}")
            if "\x00" in value:
                raise InvalidSpec(f"environment variable {key} contains a NUL byte")
