"""Errors of the undoable kinds. Infrastructure-side, so they are ExecutorError subclasses."""

from executor.errors import ExecutorError


class WorkspaceBusy(ExecutorError):
    """Another run already holds this workspace (running, or its change awaits Keep/Undo)."""


class WorkspaceConflict(ExecutorError):
    """The workspace changed since the forward run started; Keep would not be exact."""


class NothingPending(ExecutorError):
    """Keep/Undo was asked for, but no change is waiting for a decision."""


class TransactionError(ExecutorError):
    """The sandboxed database driver could not open, commit or roll back its transaction."""
