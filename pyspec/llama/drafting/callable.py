"""Any llama-cpp-python ``LlamaDraftModel``, or any callable ``ids -> draft ids``, as a drafter."""

from __future__ import annotations

import time

import numpy as np

from pyspec.errors import InvalidInputError
from pyspec.llama.drafting.base import Draft, Drafter


class CallableDrafter(Drafter):
    """Any llama-cpp-python ``LlamaDraftModel`` (or callable ``ids -> draft ids``), unchanged:
    its drafts are point masses."""

    name = "callable"
    free = True  # assumed cheap, like llama-cpp-python's prompt lookup

    def __init__(self, fn, n_vocab: int):
        self.fn, self.n_vocab = fn, n_vocab

    def draft(self, context, max_tokens, params, position):
        t0 = time.perf_counter()
        ids = np.asarray(self.fn(np.asarray(context, dtype=np.intc)))
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise InvalidInputError(
                f"the draft model returned {ids.dtype} ids of shape {ids.shape}; "
                "it must return a 1-D array of token ids"
            )
        ids = ids[:max_tokens].astype(np.int64)
        bad = np.flatnonzero((ids < 0) | (ids >= self.n_vocab))
        if bad.size:
            raise InvalidInputError(
                f"the draft model returned token id {int(ids[bad[0]])} at index "
                f"{int(bad[0])}, outside the target's vocabulary [0, {self.n_vocab})"
            )
        return Draft(ids.tolist(), None, time.perf_counter() - t0)
