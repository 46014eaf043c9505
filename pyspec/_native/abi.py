"""The ABI's numbers (status codes, element types, draw purposes, limits), read from pyspec.h.

The header's PYSPEC_CDEF block is parsed by cffi at import (``_ffi``), so its enums are
known here: every code and limit the Python side uses comes from them, none is typed by
hand, and a value changed in the header cannot drift from the binding.
"""

from __future__ import annotations

import enum

from pyspec._native.ffi import ffi, lib


def _enum(name: str, c_type: str, prefix: str, doc: str) -> type:
    """An IntEnum of the C enum ``c_type``, members named without ``prefix``
    (``PYSPEC_ERR_SHAPE`` -> ``SHAPE``), in value order."""
    values = ffi.typeof(c_type).relements  # {C name: value}
    members = [
        (c_name[len(prefix) :] if c_name.startswith(prefix) else c_name[len("PYSPEC_") :], value)
        for c_name, value in sorted(values.items(), key=lambda kv: kv[1])
    ]
    cls = enum.IntEnum(name, members, module=__name__)
    cls.__doc__ = doc
    return cls


Status = _enum(
    "Status",
    "pyspec_status",
    "PYSPEC_ERR_",
    "A ``pyspec_status``: ``OK`` (0), or what was wrong (``SHAPE``, ``DTYPE``, ...).",
)
Dtype = _enum(
    "Dtype",
    "pyspec_dtype",
    "PYSPEC_",
    "A ``pyspec_dtype``: the element type of a logits buffer (``F32``, ``F16``, ``BF16``).",
)
Purpose = _enum(
    "Purpose",
    "pyspec_purpose",
    "PYSPEC_PURPOSE_",
    "Which stream a draw belongs to; streams never share a Philox counter.",
)

# pyspec_limits: the longest penalty window, and the bound on the penalty values.
MAX_PENALTY_WINDOW = int(lib.PYSPEC_MAX_PENALTY_WINDOW)
MAX_PENALTY = float(lib.PYSPEC_MAX_PENALTY)
MAX_GRAPH_TOP = int(lib.PYSPEC_GRAPH_MAX_TOP)  # top logprobs per row the in-graph sampler gives
# A draft distribution: its rows sum to 1 within DRAFT_SUM_TOLERANCE, no entry above DRAFT_Q_MAX.
DRAFT_SUM_TOLERANCE = int(lib.PYSPEC_DRAFT_SUM_TOLERANCE_PPM) * 1e-6
DRAFT_Q_MAX = 1.0 + int(lib.PYSPEC_DRAFT_Q_SLACK_PPM) * 1e-6
MAX_DRAFT = int(lib.PYSPEC_MAX_DRAFT)  # draft tokens one speculative round may verify
