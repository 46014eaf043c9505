"""Host arrays: numpy (or anything with the array protocol) read in place, without copies."""

from __future__ import annotations

import numpy as np

from pyspec._native.abi import Dtype, Status
from pyspec.arrays import device as device_arrays
from pyspec.arrays.view import ArrayView, element_strides
from pyspec.errors import InvalidInputError

DTYPE_NAMES = {
    "float32": Dtype.F32,
    "f32": Dtype.F32,
    "float16": Dtype.F16,
    "f16": Dtype.F16,
    "bfloat16": Dtype.BF16,
    "bf16": Dtype.BF16,
}


def dtype_code(name) -> int:
    """The pyspec_dtype code for a dtype name ("float32", "float16", "bfloat16", ...)."""
    code = DTYPE_NAMES.get(str(name))
    if code is None:
        raise InvalidInputError(
            f"dtype must be one of {sorted(DTYPE_NAMES)}, got {name!r}", Status.DTYPE
        )
    return code


def shape_error(message: str) -> InvalidInputError:
    return InvalidInputError(message, Status.SHAPE)


def as_array(obj, name: str) -> np.ndarray:
    """An ndarray view of obj (numpy, CPU torch, anything with the array protocol).

    Never converts dtypes: a float64 or int array for logits is an error, not a copy.
    """
    if isinstance(obj, np.ndarray):
        return obj
    if device_arrays.is_device_array(obj):
        raise InvalidInputError(
            f"{name} lives on a CUDA device but this call reads host arrays "
            "(device logits are verified on the GPU by pyspec.verify / "
            "verify_batch, with draft_probs on the same device; sample and "
            "distribution are host-only)",
            Status.DTYPE,
        )
    try:
        return np.asarray(obj)
    except Exception as exc:
        raise InvalidInputError(
            f"{name} is not an array ({type(obj).__name__}): {exc}", Status.DTYPE
        ) from exc


# numpy's dtype.name is computed on every read (microseconds); the common ones are looked up.
_DTYPE_NAMES = {
    np.dtype(t): np.dtype(t).name for t in (np.float32, np.float16, np.float64, np.int32, np.int64)
}


def host_view(obj, name: str) -> ArrayView:
    """The ArrayView of a host array (no copy; the view keeps the ndarray alive)."""
    arr = as_array(obj, name)
    # dtype.name says "float32" for a byte-swapped '>f4' too: such arrays keep their raw
    # type string, which no check accepts (the C library reads native byte order only).
    dtype = _DTYPE_NAMES.get(arr.dtype) or (arr.dtype.name if arr.dtype.isnative else arr.dtype.str)
    strides = element_strides(arr.strides, arr.shape, arr.itemsize, name)
    return ArrayView(address(arr), arr.shape, strides, dtype, None, arr)


def token_ids(obj, name: str, n_vocab: int) -> np.ndarray:
    """A contiguous int32 copy of a 1-D list of token ids, range-checked before narrowing."""
    arr = np.asarray(obj)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int32)
    if arr.ndim != 1:
        raise shape_error(f"{name} must be 1-D, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise InvalidInputError(
            f"{name} must hold integer token ids, got {arr.dtype}", Status.DTYPE
        )
    bad = np.flatnonzero((arr < 0) | (arr >= n_vocab))
    if bad.size:
        i = int(bad[0])
        raise InvalidInputError(
            f"{name}[{i}] = {int(arr[i])} is outside [0, n_vocab = {n_vocab})", Status.TOKEN
        )
    return np.ascontiguousarray(arr, dtype=np.int32)


def address(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]
