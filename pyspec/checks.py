"""The argument checks and array layouts of a verify call, one copy for both back ends.

The host path (``pyspec.verifier``) and the device path (``pyspec.cuda``) describe their
arrays as ``ArrayView``s and pass them through the same functions here, so a call that is
wrong in the same way gets the same exception and message on the CPU and on a GPU, and a
new argument is checked in one place. What only one back end has (thread counts on the CPU,
device indices and streams on the GPU) stays with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from pyspec._native.abi import DRAFT_Q_MAX, DRAFT_SUM_TOLERANCE, Status
from pyspec._native.ffi import ffi
from pyspec.arrays import device as device_arrays
from pyspec.arrays.view import LOGIT_CODES, ArrayView
from pyspec.errors import DraftProbsError, InvalidInputError
from pyspec.params import SamplingParams
from pyspec.request import VerifyRequest

POINTER_BITS = 8 * ffi.sizeof("void *")


def _is_int(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, np.integer))


def check_params(params, name: str = "params") -> SamplingParams:
    if not isinstance(params, SamplingParams):
        raise InvalidInputError(
            f"{name} must be a pyspec.SamplingParams, got {type(params).__name__}", Status.PARAM
        )
    return params


def check_position(position, n_draft: int = 0) -> int:
    """The absolute position of row 0 as an int; rows 0..n_draft must all fit in 63 bits."""
    if not _is_int(position):
        raise InvalidInputError(
            f"position must be an int, got {type(position).__name__} {position!r}", Status.SHAPE
        )
    limit = 2**63 - 1 - n_draft
    if not 0 <= position <= limit:
        raise InvalidInputError(
            f"position must be in [0, 2**63 - 1 - n_draft] = [0, {limit}] (the "
            f"last row's position must fit in 63 bits), got {position}",
            Status.SHAPE,
        )
    return int(position)


def check_address(address, name: str) -> int:
    """A raw address as an int: non-null and within a pointer (ffi.cast would silently keep
    only the low bits of a larger int)."""
    if not _is_int(address) or not 0 < address < 2**POINTER_BITS:
        raise InvalidInputError(
            f"{name} must be a non-null address that fits in a pointer "
            f"({POINTER_BITS} bits), got {address!r}",
            Status.NULL,
        )
    return int(address)


def check_n_vocab(n_vocab, name: str = "n_vocab") -> int:
    if not _is_int(n_vocab) or not 1 <= n_vocab < 2**31:
        raise InvalidInputError(
            f"{name} must be an int in [1, 2**31), got {n_vocab!r}", Status.SHAPE
        )
    return int(n_vocab)


def check_count(count, name: str, limit: int) -> int:
    """A count in [0, limit] as an int."""
    if not _is_int(count) or not 0 <= count <= limit:
        raise InvalidInputError(
            f"{name} must be an int in [0, {limit}], got {count!r}", Status.SHAPE
        )
    return int(count)


def check_token(token, name: str, n_vocab: int) -> int:
    """One token id in [0, n_vocab) as an int."""
    if not _is_int(token) or not 0 <= token < n_vocab:
        raise InvalidInputError(
            f"{name} = {token!r} is outside [0, n_vocab = {n_vocab})", Status.TOKEN
        )
    return int(token)


def check_row_stride(row_stride, n_vocab: int) -> int:
    """Elements from one row to the next (``None``: the rows are packed)."""
    if row_stride is None:
        return n_vocab
    if not _is_int(row_stride) or not n_vocab <= row_stride < 2**62:
        raise InvalidInputError(
            f"row_stride must be an int >= n_vocab ({n_vocab}), got {row_stride!r}", Status.SHAPE
        )
    return int(row_stride)


def check_requests(requests) -> list:
    """``requests`` as a list, each a VerifyRequest."""
    if isinstance(requests, (str, bytes)) or not hasattr(requests, "__len__"):
        raise InvalidInputError(
            f"requests must be a list of pyspec.VerifyRequest, got {type(requests).__name__}",
            Status.SHAPE,
        )
    for i, req in enumerate(requests):
        if not isinstance(req, VerifyRequest):
            raise InvalidInputError(
                f"requests[{i}] must be a pyspec.VerifyRequest, got {type(req).__name__}",
                Status.SHAPE,
            )
    return list(requests)


def draft_count(tokens, name: str) -> int:
    """How many draft ids a 1-D list or array (host or device) holds."""
    if device_arrays.is_device_array(tokens):
        shape = device_arrays.describe(tokens, name).shape
    else:
        shape = getattr(tokens, "shape", None)
    if shape is not None and not isinstance(tokens, (str, bytes)):
        if len(shape) != 1:
            raise InvalidInputError(f"{name} must be 1-D, got shape {tuple(shape)}", Status.SHAPE)
        return int(shape[0])
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__"):
        raise InvalidInputError(
            f"{name} must be a 1-D sequence of token ids (a list or an int "
            f"array), got {type(tokens).__name__} {tokens!r:.60}",
            Status.SHAPE,
        )
    return len(tokens)


def penalty_window(params: SamplingParams, history):
    """The part of ``history`` the penalties look back on: None when they are off or there
    is none; the last ``penalty_last_n`` tokens of a host sequence (a device array is passed
    whole: the C library reads only its window)."""
    if history is None or not params.penalties_on:
        return None
    if params.penalty_last_n > 0 and not device_arrays.is_device_array(history):
        last = params.penalty_last_n
        history = history[-last:] if isinstance(history, np.ndarray) else list(history)[-last:]
    return history


@dataclass
class LogitsRows:
    """A verified logits layout: ``n_rows`` rows of ``n_vocab`` elements, ``row_stride``
    elements apart, of pyspec_dtype ``dtype``."""

    view: ArrayView
    dtype: int
    row_stride: int
    n_vocab: int


def logits_rows(
    view: ArrayView, name: str, n_rows: Optional[int] = None, needs: Optional[str] = None
) -> LogitsRows:
    """Checks a ``[rows, n_vocab]`` (or one ``[n_vocab]`` row) logits array: a logit element
    type, the row count, rows contiguous along the vocabulary and not overlapping.
    ``needs``: how the error names the row count (default: a verify's n_draft + 1)."""
    shape, strides = view.shape, view.strides
    if len(shape) == 1:
        shape, strides = (1, shape[0]), (shape[0], 1)
    if len(shape) != 2:
        raise InvalidInputError(
            f"{name} must be 2-D [rows, n_vocab], got shape {view.shape}", Status.SHAPE
        )
    code = LOGIT_CODES.get(view.dtype)
    if code is None:
        # numpy makes float64 of a Python list of floats: the likeliest way to get here
        listed = " (a Python list of floats becomes float64)" if view.dtype == "float64" else ""
        raise InvalidInputError(
            f"{name} must be float32, float16 or bfloat16, got {view.dtype}{listed}; no "
            "copy is made to convert it: pass np.asarray(x, dtype=np.float32) if that is "
            "what you want",
            Status.DTYPE,
        )
    if n_rows is not None and shape[0] != n_rows:
        raise InvalidInputError(
            f"{name} has {shape[0]} rows; it needs {needs or f'n_draft + 1 = {n_rows}'}",
            Status.SHAPE,
        )
    if shape[1] < 1:
        raise InvalidInputError(f"{name} has an empty vocabulary axis", Status.SHAPE)
    if shape[1] > 1 and strides[1] != 1:
        raise InvalidInputError(
            f"{name} must be contiguous along the vocabulary axis (strides {strides} elements)",
            Status.SHAPE,
        )
    row_stride = strides[0] if shape[0] > 1 else shape[1]
    if shape[0] > 1 and row_stride < shape[1]:
        raise InvalidInputError(
            f"{name} rows must not overlap (strides {strides} elements)", Status.SHAPE
        )
    return LogitsRows(view, code, row_stride, shape[1])


def check_same_vocabulary(rows: LogitsRows, first: LogitsRows, name: str) -> None:
    """Every request of one call shares requests[0]'s vocabulary size and dtype."""
    if rows.n_vocab != first.n_vocab or rows.dtype != first.dtype:
        raise InvalidInputError(
            f"{name} is [{rows.n_vocab}] {rows.view.dtype}; every request must "
            f"share requests[0]'s vocabulary ({first.n_vocab}) and dtype",
            Status.SHAPE,
        )


def dense_draft_rows(view: ArrayView, n_draft: int, n_vocab: int) -> int:
    """Checks dense draft probabilities (``[n_draft, n_vocab]`` float32, rows contiguous);
    returns the row stride in elements."""
    if view.dtype != "float32":
        raise InvalidInputError(f"draft_probs must be float32, got {view.dtype}", Status.DTYPE)
    if view.ndim != 2 or tuple(view.shape) != (n_draft, n_vocab):
        raise InvalidInputError(
            f"draft_probs must have shape [n_draft, n_vocab] = [{n_draft}, "
            f"{n_vocab}], got {tuple(view.shape)}",
            Status.SHAPE,
        )
    # Nothing is read from an empty [0, n_vocab] array, and NumPy 2 gives one zero strides.
    if n_draft > 0 and n_vocab > 1 and view.strides[1] != 1:
        raise InvalidInputError(
            f"draft_probs rows must be contiguous float32 (strides {view.strides} elements)",
            Status.SHAPE,
        )
    return view.strides[0] if n_draft > 1 else n_vocab


def check_sparse_shapes(tokens_shape, probs_shape, n_draft: int) -> None:
    """Sparse draft probabilities are two ``[n_draft, m]`` arrays."""
    tokens_shape, probs_shape = tuple(tokens_shape), tuple(probs_shape)
    if tokens_shape != probs_shape or len(tokens_shape) != 2 or tokens_shape[0] != n_draft:
        raise InvalidInputError(
            f"sparse draft_probs must be two [n_draft = {n_draft}, m] arrays, got "
            f"tokens {tokens_shape} and probs {probs_shape}",
            Status.SHAPE,
        )


def check_sparse_probs_dtype(dtype: str) -> None:
    if dtype != "float32":
        raise InvalidInputError(f"draft_probs.probs must be float32, got {dtype}", Status.DTYPE)


def sparse_draft_rows(tokens: ArrayView, probs: ArrayView, n_draft: int):
    """Checks sparse draft probabilities (two ``[n_draft, m]`` arrays, int32 tokens and
    float32 probabilities, laid out alike); returns (row stride, entries per row)."""
    check_sparse_shapes(tokens.shape, probs.shape, n_draft)
    check_sparse_probs_dtype(probs.dtype)
    if tokens.dtype != "int32":
        raise InvalidInputError(
            f"draft_probs.tokens must be int32, got {tokens.dtype}", Status.DTYPE
        )
    m = tokens.shape[1]
    # As for dense rows: no row is read when n_draft = 0, whatever strides NumPy gave them.
    if n_draft > 0 and m > 1 and (tokens.strides[1] != 1 or probs.strides[1] != 1):
        raise InvalidInputError(
            "sparse draft_probs rows must be contiguous, got strides "
            f"{tokens.strides} and {probs.strides}",
            Status.SHAPE,
        )
    if n_draft > 1 and tokens.strides[0] != probs.strides[0]:
        raise InvalidInputError(
            "sparse draft_probs tokens and probs must have equal row strides, got "
            f"{tokens.strides} and {probs.strides}",
            Status.SHAPE,
        )
    return (tokens.strides[0] if n_draft > 1 else m), m


def check_dense_rows_sum_to_one(q: np.ndarray) -> None:
    """Each dense draft row must be a distribution: entries in [0, 1] summing to 1 within
    DRAFT_SUM_TOLERANCE. The C library reads a dense row at a few entries only (it never
    streams it), so it cannot tell; q that is not a distribution biases rejection sampling
    without any error. One numpy pass over the k rows (host arrays only)."""
    sums = q.sum(axis=1, dtype=np.float64)
    bad = np.flatnonzero(~(np.abs(sums - 1.0) <= DRAFT_SUM_TOLERANCE))
    if bad.size:
        i = int(bad[0])
        raise DraftProbsError(
            f"draft_probs row {i} sums to {sums[i]:.6g}; a draft distribution "
            f"must sum to 1 (within {DRAFT_SUM_TOLERANCE}); pass "
            f"check_draft_probs=False to skip this check"
        )
    low, high = q.min(initial=0.0), q.max(initial=0.0)
    if low < 0.0 or high > DRAFT_Q_MAX:
        raise DraftProbsError(
            f"draft_probs holds {low if low < 0 else high:g}; probabilities must be in [0, 1] "
            f"(up to {DRAFT_Q_MAX:g} for rounding)"
        )
