"""Infrastructure failures. The user program's own failures are RunResult fields, never these."""


class ExecutorError(Exception):
    """Base class: something went wrong on our side, not in the user's program."""


class InvalidSpec(ExecutorError):
    """The run request itself is unacceptable (bad language, bad file name, too large)."""


class InvalidLimits(ExecutorError):
    """A limit is missing, out of range, or not one we know."""


class BackendUnavailable(ExecutorError):
    """The configured backend is missing or misconfigured; we refuse to run anything."""


class SandboxFailed(ExecutorError):
    """The sandbox could not be started or died for reasons outside the user's program."""


class NoCapacity(ExecutorError):
    """Every sandbox slot is busy; try again later."""
