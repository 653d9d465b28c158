"""Where the command finds its server and token, and how it writes private files.

UNDOABLE_URL and UNDOABLE_TOKEN win when set; else the file `undoable login URL` wrote:
$XDG_CONFIG_HOME/undoable/config.json (~/.config when unset), mode 0600 in a 0700 folder.
"""

from __future__ import annotations

import json
import os

TYPE_CHECKING = False  # typing itself is a cost on every start: imported by type checkers only
if TYPE_CHECKING:
    from pathlib import Path

PRIVATE_MODE = 0o600  # the token (and credentials, without a keyring) are its owner's alone
PRIVATE_DIR_MODE = 0o700


class UserError(Exception):
    """A mistake the person can fix: the command prints its message and exits 1."""


class ConfigError(UserError):
    """No server or token configured, or a config file that cannot be read."""


class Config:
    """The server and the token the command speaks to."""

    __slots__ = ("url", "token")

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token


def config_dir() -> Path:
    # Imported here: `undoable exec` with UNDOABLE_URL and UNDOABLE_TOKEN set never needs it.
    from pathlib import Path

    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "undoable"


def config_path() -> Path:
    return config_dir() / "config.json"


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` readable by its owner only: a fresh file made with the private
    mode (never through a link), then renamed over the old one, so no reader ever sees a
    partial or wider file."""
    path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(temporary, flags, PRIVATE_MODE)
    try:
        os.fchmod(fd, PRIVATE_MODE)  # the umask may only narrow the mode, never widen it
        with os.fdopen(fd, "wb", closefd=False) as out:
            out.write(data)
            out.flush()
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(temporary, path)


def read_json(path: Path) -> dict[str, object]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as handle:
        try:
            data = json.load(handle)
        except ValueError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return data


def save(url: str, token: str) -> Path:
    path = config_path()
    write_private(path, json.dumps({"url": url, "token": token}, indent=2).encode() + b"\n")
    return path


def load() -> Config:
    """The server and token: the environment first, then the config file."""
    stored = read_json(config_path()) if not _from_env_only() else {}
    url = os.environ.get("UNDOABLE_URL") or str(stored.get("url") or "")
    token = os.environ.get("UNDOABLE_TOKEN") or str(stored.get("token") or "")
    if not url or not token:
        raise ConfigError(
            "no server configured: run `undoable login URL`, or set UNDOABLE_URL and UNDOABLE_TOKEN"
        )
    return Config(url, token)


def _from_env_only() -> bool:
    return bool(os.environ.get("UNDOABLE_URL") and os.environ.get("UNDOABLE_TOKEN"))
