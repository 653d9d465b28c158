"""One file of a workspace, written, read or deleted by the host for the API.

Every path is walked from the workspace root with O_NOFOLLOW (executor.parent_of): a link the
code left in the workspace is never followed, so nothing outside it is read, written or
removed. Writes and deletes hold the workspace's lock and are refused while a change is waiting
for Keep or Discard (it would be applied over them); writes go through the uploads' all or
nothing path (webapp.workspaces.uploads), with its caps.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from webapp.executor_glue import InvalidSpec, WorkspaceBusy, open_regular, parent_of, remove_at
from webapp.executor_glue import validate_relative_path as checked
from webapp.workspaces import uploads
from webapp.workspaces.models import Workspace
from webapp.workspaces.services import workspace_fs

logger = logging.getLogger(__name__)

MAX_READ_BYTES = uploads.MAX_UPLOAD_BYTES


class FileMissing(InvalidSpec):
    """No such file in the workspace (the API answers 404)."""


@contextlib.contextmanager
def _unchanging(workspace: Workspace) -> Iterator[None]:
    fs = workspace_fs(workspace)
    with fs.locked():
        if fs.pending() is not None:
            raise WorkspaceBusy("keep or discard the pending change first")
        yield


def workspace_file_write(*, workspace: Workspace, path: str, data: bytes) -> str:
    """Write the file `path` (its folders made as needed); its normalised path."""
    with _unchanging(workspace):
        written = uploads.upload_bytes_into(workspace.root, workspace.state_dir, path, data)
    logger.info("workspace file written", extra={"workspace": workspace.pk, "bytes": len(data)})
    return written


def workspace_file_read(*, workspace: Workspace, path: str) -> bytes:
    """The bytes of the regular file `path` (FileMissing; InvalidSpec for a link, a folder,
    anything else, or a file past MAX_READ_BYTES)."""
    name = str(checked(path))
    try:
        with parent_of(workspace.root, name) as (parent, leaf):
            fd = open_regular(parent, leaf)
    except FileNotFoundError:
        raise FileMissing(f"no file {name} in the workspace") from None
    except OSError:
        raise InvalidSpec(
            f"{name} is not a file that can be read (links are never followed)"
        ) from None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_READ_BYTES + 1)
    if len(data) > MAX_READ_BYTES:
        raise InvalidSpec(f"{name} is larger than {MAX_READ_BYTES} bytes")
    return data


def workspace_file_delete(*, workspace: Workspace, path: str) -> None:
    """Remove `path`: a file, a link (the link itself), or a folder with all it holds."""
    name = str(checked(path))
    with _unchanging(workspace):
        try:
            with parent_of(workspace.root, name) as (parent, leaf):
                os.stat(leaf, dir_fd=parent, follow_symlinks=False)
                remove_at(parent, leaf)
        except FileNotFoundError:
            raise FileMissing(f"no file {name} in the workspace") from None
        except OSError as exc:  # a link or a file on the way, too: never followed
            raise InvalidSpec(f"{name} could not be removed: {exc.strerror}") from None
    logger.info("workspace file deleted", extra={"workspace": workspace.pk})
