"""The errors a failed request raises: one class per meaning, all subclasses of ApiError.

try:
    client.exec(code)
except QuotaExceeded as exc:   # 429: nothing ran; exc.retry_after_s says when to ask again
    ...
except ApiError as exc:        # any other refusal; exc.status, exc.message
    ...
"""

from __future__ import annotations


class ApiError(Exception):
    """The server answered with an error status; `message` is its {"error": ...} text.

    `retry_after_s` is the server's Retry-After in seconds (429 and 503), else None.
    """

    def __init__(self, status: int, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s


class BadRequest(ApiError):
    """400: malformed or refused input; nothing ran."""


class AuthError(ApiError):
    """401: the token is missing, unknown or revoked."""


class ActionRefused(ApiError):
    """403: the token's damage limits refuse it (a kind, a host, review required, ...)."""


class NotFound(ApiError):
    """404: no such session, action, workspace or file (another user's is not found too)."""


class Conflict(ApiError):
    """409: the object is busy or in a state where this has nothing to do."""


class SessionLost(ApiError):
    """410: the server process that held the session is gone, and the session with it."""


class TooLarge(ApiError):
    """413: a body, a file or code over the server's cap."""


class QuotaExceeded(ApiError):
    """429: over the token's quota; nothing ran, ask again after `retry_after_s`."""


class Unavailable(ApiError):
    """503: no capacity right now; `retry_after_s` says when to try again."""


class ServerError(ApiError):
    """5xx other than 503: a bug on the server, which logs it."""


class ConnectionFailed(ApiError):
    """The server could not be reached (status 0): no answer at all."""


BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: AuthError,
    403: ActionRefused,
    404: NotFound,
    409: Conflict,
    410: SessionLost,
    413: TooLarge,
    429: QuotaExceeded,
    503: Unavailable,
}


def error_for(status: int, message: str, retry_after_s: float | None = None) -> ApiError:
    """The ApiError subclass that names what `status` means."""
    default = ServerError if status >= 500 else ApiError
    return BY_STATUS.get(status, default)(status, message, retry_after_s)
