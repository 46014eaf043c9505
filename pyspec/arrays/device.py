"""Recognises arrays that live on a CUDA device, without importing any GPU library.

Two protocols are read:

* ``__cuda_array_interface__`` (CuPy, Numba, PyTorch for float32/float16/int32): a dict with
  the device pointer, shape, typestr and strides in bytes;
* ``__dlpack_device__`` / ``__dlpack__`` (PyTorch, JAX, CuPy, ...): the device type and
  index, and a capsule holding a ``DLManagedTensor`` that is read with ctypes and released
  by the capsule's own destructor (the tensor is not consumed).

``describe`` turns either into an ``ArrayView`` (pointer, shape, strides in elements, dtype
name, device index), the form ``pyspec.checks`` reads host arrays in too; ``where`` says
whether an object is a host array, a device array or neither, so the callers can give clear
errors for host/device mix-ups.
"""

from __future__ import annotations

import ctypes
from typing import Optional

import numpy as np

from pyspec._native.abi import Status
from pyspec.arrays.view import (
    ITEMSIZE,
    LOGIT_CODES,  # noqa: F401 (re-exported: the logit element types)
    ArrayView,
    contiguous_strides,
    element_strides,
)
from pyspec.errors import InvalidInputError, PyspecError

# DLPack device types (dlpack.h): CPU, CUDA, CUDA host (pinned), CUDA managed.
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
# DLPack type codes: int, uint, float, bfloat.
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT = 0, 1, 2, 4

# pyspec element types: the C pyspec_dtype codes for logits, plus names for the others.
_TYPESTR = {
    "<f4": "float32",
    "<f2": "float16",
    "<f8": "float64",
    "<i4": "int32",
    "<i8": "int64",
    "<V2": "bfloat16",
}
_DL_NAMES = {
    (_DL_FLOAT, 32): "float32",
    (_DL_FLOAT, 16): "float16",
    (_DL_BFLOAT, 16): "bfloat16",
    (_DL_INT, 32): "int32",
    (_DL_INT, 64): "int64",
    (_DL_FLOAT, 64): "float64",
}


def _dlpack_device(obj):
    try:
        dev_type, dev_id = obj.__dlpack_device__()
        return int(dev_type), int(dev_id)
    except Exception:
        return None


def _has_cai(obj) -> bool:
    """Whether obj offers __cuda_array_interface__. Not hasattr: PyTorch raises TypeError
    (not AttributeError) for a CUDA tensor whose dtype the protocol cannot name (bfloat16),
    and AttributeError for a CPU tensor."""
    try:
        obj.__cuda_array_interface__  # noqa: B018 (the property may raise: that is the test)
        return True
    except AttributeError:
        return False
    except Exception:
        return True


# Types that are never device arrays: the common arguments skip the protocol probes (a
# verify call asks about three of its arguments, and the probes cost microseconds).
_PLAIN_TYPES = (np.ndarray, list, tuple, int, float, str, bytes, type(None))


def where(obj) -> str:
    """ "device" for a CUDA array, "host" for anything numpy can read in place, else "other"."""
    if type(obj) in _PLAIN_TYPES:
        return "host" if isinstance(obj, np.ndarray) else "other"
    if _has_cai(obj):
        return "device"
    dev = _dlpack_device(obj) if hasattr(obj, "__dlpack_device__") else None
    if dev is not None and dev[0] in (KDL_CUDA, KDL_CUDA_MANAGED):
        return "device"
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__") or dev is not None:
        return "host"
    return "other"


def is_device_array(obj) -> bool:
    return where(obj) == "device"


def _cai_device(obj) -> Optional[int]:
    dev = getattr(obj, "device", None)  # CuPy: Device with .id; PyTorch: device with .index
    for attr in ("id", "index"):
        value = getattr(dev, attr, None)
        if isinstance(value, int):
            return value
    if hasattr(obj, "__dlpack_device__"):
        d = _dlpack_device(obj)
        if d is not None:
            return d[1]
    return None


def _from_cai(obj, name: str) -> ArrayView:
    cai = obj.__cuda_array_interface__
    shape = tuple(int(s) for s in cai["shape"])
    typestr = cai["typestr"]
    dtype = _TYPESTR.get(typestr, typestr)
    item = ITEMSIZE.get(dtype)
    if item is None:
        raise InvalidInputError(
            f"{name} has element type {typestr!r}, which pyspec does not read", Status.DTYPE
        )
    ptr = int(cai["data"][0])
    strides_b = cai.get("strides")
    strides = (
        contiguous_strides(shape)
        if strides_b is None
        else element_strides(strides_b, shape, item, name)
    )
    return ArrayView(ptr, shape, strides, dtype, _cai_device(obj), obj)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


def _capsule_pointer(capsule) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, b"dltensor")


def _from_dlpack(obj, name: str) -> ArrayView:
    try:
        capsule = obj.__dlpack__()
    except Exception as exc:
        raise InvalidInputError(f"{name}: __dlpack__() failed: {exc}", Status.DTYPE) from exc
    t = _DLTensor.from_address(_capsule_pointer(capsule))  # DLManagedTensor starts with it
    if t.dtype.lanes != 1:
        raise InvalidInputError(f"{name} is a vector type (lanes {t.dtype.lanes})", Status.DTYPE)
    dtype = _DL_NAMES.get(
        (t.dtype.code, t.dtype.bits), f"dlpack(code={t.dtype.code}, bits={t.dtype.bits})"
    )
    ndim = t.ndim
    shape = tuple(t.shape[i] for i in range(ndim))
    strides = tuple(t.strides[i] for i in range(ndim)) if t.strides else contiguous_strides(shape)
    ptr = (t.data or 0) + t.byte_offset
    # The capsule (not consumed) frees the DLManagedTensor when it goes; keep it and the
    # object alive together while the pointer is in use.
    return ArrayView(ptr, shape, strides, dtype, int(t.device.device_id), (obj, capsule))


def describe(obj, name: str) -> ArrayView:
    """The ArrayView of a CUDA array (``__cuda_array_interface__`` first, then DLPack)."""
    if _has_cai(obj):
        try:
            return _from_cai(obj, name)
        except PyspecError:
            raise
        except Exception:
            if not hasattr(obj, "__dlpack__"):
                raise
    if hasattr(obj, "__dlpack__") and is_device_array(obj):
        return _from_dlpack(obj, name)
    raise InvalidInputError(
        f"{name} is not a CUDA device array ({type(obj).__name__})", Status.CUDA
    )
