"""Exceptions carrying the C library's status codes."""
from __future__ import annotations

from pyspec._native.abi import Status


class PyspecError(ValueError):
    """A call into libpyspec failed. ``status`` is the C ``pyspec_status`` code."""

    status = -1  # not a pyspec_status: an error raised without one

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidRequestError(ValueError):
    """A request's own values cannot be served (a grammar that does not parse, ...): the
    caller's mistake, which pyspec serve answers with a 400."""


class LogitsError(PyspecError):
    """Logits hold NaN or +inf, or a row has no finite value."""

    status = Status.LOGITS


class DraftProbsError(PyspecError):
    """Draft probabilities are not probabilities, or give a drafted token probability 0."""

    status = Status.DRAFT_PROBS


class CapacityError(PyspecError):
    """The call needs more vocabulary or threads than the verifier holds scratch for."""

    status = Status.CAPACITY


_BY_STATUS = {cls.status: cls for cls in (LogitsError, DraftProbsError, CapacityError)}


def raise_for_status(status: int, message: str) -> None:
    """Raises the exception matching a non-zero C status."""
    if status == Status.OK:
        return
    cls = _BY_STATUS.get(status, PyspecError)
    raise cls(message, status)
