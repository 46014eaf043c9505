"""``ArrayView``: an array as the checks see it, whether it lives in host or device memory.

The host path (numpy, ``pyspec.arrays.host.host_view``) and the device path (CUDA array interface or
DLPack, ``pyspec.arrays.device.describe``) both describe their arrays this way, so one set of
layout checks (``pyspec.checks``) serves both and gives both the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from pyspec._native.abi import Dtype, Status
from pyspec.errors import InvalidInputError

# Bytes per element of the element types pyspec reads.
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "float64": 8}
# The element types logits may have, with their pyspec_dtype codes (read in place, never
# up-cast).
LOGIT_CODES = {"float32": Dtype.F32, "float16": Dtype.F16, "bfloat16": Dtype.BF16}


@dataclass
class ArrayView:
    """Where an array's elements are and how they are laid out; nothing is copied."""

    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  # in elements
    dtype: str  # "float32", "float16", "bfloat16", "int32", ... or the raw type
    device: Optional[int]  # CUDA device index; None for host memory or when not known
    owner: Any  # the object, kept alive for as long as the pointer is used

    @property
    def ndim(self) -> int:
        return len(self.shape)


def contiguous_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    """The element strides of a C-contiguous array of ``shape``."""
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def element_strides(
    byte_strides: Sequence[int], shape: Sequence[int], item: int, name: str
) -> Tuple[int, ...]:
    """Byte strides as element strides. An axis of length 1 is never stepped along, so its
    stride may be anything; every other stride must be a whole number of elements."""
    out = []
    for stride, length in zip(byte_strides, shape):
        if length > 1 and int(stride) % item:
            raise InvalidInputError(
                f"{name} has strides {tuple(byte_strides)} (bytes) that are not "
                f"multiples of its element size {item}",
                Status.SHAPE,
            )
        out.append(int(stride) // item)
    return tuple(out)
