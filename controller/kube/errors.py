"""Typed errors of the Kubernetes API, so controllers can tell retry-later from conflict from gone."""

from __future__ import annotations

import json

MAX_MESSAGE = 300


class KubeError(Exception):
    """An error answer from the apiserver (or no answer: status 0)."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message[:MAX_MESSAGE]
        super().__init__(f"{status} {reason}: {self.message}" if reason else f"{status}: {self.message}")


class NotFoundError(KubeError):
    """404: the object does not exist."""


class ConflictError(KubeError):
    """409: a stale resourceVersion, or AlreadyExists (see .reason)."""


class GoneError(KubeError):
    """410: a watch's resourceVersion is too old; relist."""


class TooManyRequestsError(KubeError):
    """429: throttled, or an eviction a PodDisruptionBudget does not allow yet."""


class InvalidError(KubeError):
    """400/422: the request itself is wrong."""


class UnavailableError(KubeError):
    """No answer, a timeout, or a 5xx."""


_BY_STATUS: dict[int, type[KubeError]] = {404: NotFoundError, 409: ConflictError, 410: GoneError,
                                          429: TooManyRequestsError, 400: InvalidError, 422: InvalidError}


def from_response(status: int, body: bytes | str) -> KubeError:
    """The typed error for an HTTP status and a Status body."""
    reason, message = "", ""
    try:
        obj = json.loads(body)
        if isinstance(obj, dict):
            reason, message = str(obj.get("reason", "")), str(obj.get("message", ""))
    except (ValueError, TypeError):
        message = (body.decode(errors="replace") if isinstance(body, bytes) else str(body))[:MAX_MESSAGE]
    cls = _BY_STATUS.get(status, UnavailableError if status >= 500 or status == 0 else KubeError)
    return cls(status, reason, message)


# AWS error codes no retry will change (the request or the permissions are wrong)
PERMANENT_AWS_CODES = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException",
                                 "InvalidParameterValue", "InvalidParameterCombination", "InvalidParameter",
                                 "ValidationError", "MalformedPolicyDocument", "InvalidUserData.Malformed",
                                 "OptInRequired", "AuthFailure"})
_THROTTLING_AWS_CODES = frozenset({"Throttling", "ThrottlingException", "RequestLimitExceeded",
                                   "RequestThrottled", "ServiceUnavailable", "InternalError", "InternalFailure"})


def _aws_error(e: BaseException) -> tuple[str, int]:
    """A botocore ClientError's code and HTTP status (("", 0) for anything else), read without importing botocore."""
    response = getattr(e, "response", None)
    if not isinstance(response, dict):
        return "", 0
    code = str((response.get("Error") or {}).get("Code") or "")
    status = int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
    return code, status


def is_temporary(e: BaseException) -> bool:
    """Worth retrying with backoff: throttling, server errors, timeouts and connection failures."""
    if isinstance(e, (TooManyRequestsError, UnavailableError)):
        return True
    if isinstance(e, KubeError):
        return e.status >= 500
    code, status = _aws_error(e)
    if code:
        return code in _THROTTLING_AWS_CODES or status >= 500
    import urllib3.exceptions

    return isinstance(e, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError))


def is_permanent(e: BaseException) -> bool:
    """No retry will change it: the request is invalid (400/422), not allowed (401/403), an AWS code saying as much,
    or an error that says so itself (a `permanent = True` attribute). Everything else is retried with backoff."""
    if getattr(e, "permanent", False) is True:
        return True
    if isinstance(e, KubeError):
        return isinstance(e, InvalidError) or e.status in (401, 403)
    return _aws_error(e)[0] in PERMANENT_AWS_CODES


def reason_of(e: BaseException) -> str:
    """A short CamelCase reason for an Event about the error: the apiserver's or AWS's reason/code, else the type."""
    if isinstance(e, KubeError) and e.reason:
        return e.reason
    code = _aws_error(e)[0]
    return code or type(e).__name__
