"""Errors of the undoable kinds. Infrastructure-side, so they are ExecutorError subclasses."""

from executor.errors import ExecutorError


class WorkspaceBusy(ExecutorError):
    """Another run already holds this workspace (running, or its change awaits Keep or Discard)."""


class WorkspaceConflict(ExecutorError):
    """The workspace changed since the forward run started; Keep would not be exact."""


class NothingPending(ExecutorError):
    """Keep or Discard was asked for, but no change is waiting for a decision."""


class TransactionError(ExecutorError):
    """The sandboxed database driver could not open, commit or roll back its transaction."""


class StatementRefused(ExecutorError):
    """The host refused a statement the sandboxed program sent (transaction control, ATTACH,
    several statements in one call, ...). The message is for the program's output."""


class StatementFailed(ExecutorError):
    """The database itself rejected a statement (syntax error, constraint, ...): its message."""


class RunStopped(StatementFailed):
    """The session ended the run's transaction itself (a watched setting changed, or the
    transaction ended outside the host's control): rolled back, no Keep is offered."""


class DbProcessesFull(ExecutorError):
    """As many db runs as the host or the person may hold at once are running or pending."""
