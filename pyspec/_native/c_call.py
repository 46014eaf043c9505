"""The C side of a verify call: its descriptors (``pyspec_sequence``, ``pyspec_draft_probs``)
filled the same way for the host and the device back end, and its status turned into an
exception. Addresses are ints or cdata; 0 and None are NULL."""

from __future__ import annotations

from typing import Optional, Tuple

from pyspec._native.ffi import ffi
from pyspec.errors import raise_for_status
from pyspec.params import SamplingParams

# (probabilities, tokens or None for dense rows, row stride, entries per row or 0 for dense)
DraftRows = Tuple[object, object, int, int]


_CDATA = ffi.CData
_TYPES = {name: ffi.typeof(name) for name in ("void *", "int32_t *", "int64_t *", "float *")}


def pointer(c_type: str, address):
    """``address`` as a ``c_type`` pointer (NULL for 0 or None; cdata as it is)."""
    if isinstance(address, _CDATA):
        return address
    if not address:
        return ffi.NULL
    return ffi.cast(_TYPES[c_type], address)


def check(status: int, err) -> None:
    """Raises the exception of a failed C call (its message from ``err``)."""
    if status:
        raise_for_status(status, ffi.string(err.message).decode())


def new_error():
    return ffi.new("pyspec_error *")


class SequenceTable:
    """The ``pyspec_sequence`` array of one call; keeps every struct it allocates alive for
    as long as the table lives."""

    def __init__(self, n_seqs: int):
        self.seqs = ffi.new("pyspec_sequence[]", max(n_seqs, 1))
        self._keep = []

    def fill(
        self,
        i: int,
        *,
        logits,
        row_stride: int,
        draft_tokens,
        n_draft: int,
        position: int,
        params: SamplingParams,
        history=None,
        n_history: int = 0,
        draft_rows: Optional[DraftRows] = None,
        out_tokens,
        out_n_accepted,
        out_logprobs=None,
        out_top_probs=None,
    ) -> None:
        seq = self.seqs[i]
        seq.target_logits = pointer("void *", logits)
        seq.logits_row_stride = row_stride
        seq.draft_tokens = pointer("int32_t *", draft_tokens) if n_draft else ffi.NULL
        seq.n_draft = n_draft
        seq.position = position
        params.fill(seq.params, pointer("int32_t *", history) if n_history else ffi.NULL, n_history)
        seq.draft_probs = self._draft_probs(draft_rows) if draft_rows is not None else ffi.NULL
        seq.out_tokens = pointer("int32_t *", out_tokens)
        seq.out_n_accepted = pointer("int64_t *", out_n_accepted)
        seq.out_logprobs = pointer("float *", out_logprobs)
        seq.out_top_probs = pointer("float *", out_top_probs)

    def _draft_probs(self, rows: DraftRows):
        probs, tokens, row_stride, n_per_row = rows
        dp = ffi.new("pyspec_draft_probs *")
        dp.probs = pointer("float *", probs)
        dp.tokens = pointer("int32_t *", tokens)
        dp.row_stride = row_stride
        dp.n_per_row = n_per_row
        self._keep.append(dp)
        return dp
