"""A deleted query's workspace leaves the disk: its folder, its state and any pending copy.

The pending copy of an fs run (and a db run's reservation) may sit on a quota tmpfs
(executor.quota): it is unmounted first, so the removal never descends into a mount and no
mount is left behind. Removal goes through no-follow directory fds (fs_walk.remove_tree): a
link planted in the workspace is removed as a link, never followed. A workspace pointed at a
server folder (UNDOABLE_WORKSPACE_SERVER_FOLDERS) keeps that folder: it is the person's, only our
state goes.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from webapp.executor_glue import ExecutorError, FsWorkspace, quota_unmount, remove_tree
from webapp.workspaces.models import Workspace, workspaces_root

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkspaceFiles:
    """Where a workspace lives on disk, read before its row is deleted."""

    workspace_id: int
    folder: Path  # UNDOABLE_WORKSPACES_ROOT/<id>: files/ (unless a server folder) and state/
    state_dir: Path
    is_server_folder: bool


def workspace_files(workspace: Workspace) -> WorkspaceFiles:
    return WorkspaceFiles(
        workspace_id=workspace.pk,
        folder=workspaces_root() / str(workspace.pk),
        state_dir=workspace.state_dir,
        is_server_folder=bool(workspace.server_folder),
    )


def workspace_files_remove(files: WorkspaceFiles) -> None:
    """Unmount the pending copy and remove the workspace's folders (its state only, for a
    server folder). Logs, never raises: the query is already gone."""
    if files.folder.is_symlink() or not files.folder.is_dir():
        return  # never made, or not ours to follow
    try:
        # The lock: no begin, keep or discard is half way through while the state goes.
        with FsWorkspace(files.folder / "files", files.state_dir).locked():
            quota_unmount(files.state_dir / "pending")
            if files.is_server_folder:
                remove_tree(files.state_dir)
            else:
                remove_tree(files.folder)
        if files.is_server_folder:
            for ours in (files.folder / "files", files.folder):
                with contextlib.suppress(OSError):  # kept when not empty: not ours to judge
                    os.rmdir(ours)
    except (OSError, ExecutorError):
        logger.exception("workspace files not removed", extra={"workspace": files.workspace_id})
        return
    logger.info("workspace files removed", extra={"workspace": files.workspace_id})
