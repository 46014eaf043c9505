"""The drafters' search (``csrc/suffix_index.c``): where the most recent tokens occurred
before in a token sequence, and what followed them, with counts.

    index = SuffixIndex(max_match=32)
    index.append(prompt_ids)
    found = index.draft(recent_ids, max_tokens=16)   # found.tokens, found.counts, found.totals

Appending costs O(max_match) per token whatever the length; ``truncate`` cuts the sequence
back (the KV cache's rollback) and leaves exactly the index of the shorter sequence.
``SEPARATOR`` ends a document: no match or draft crosses it. Not thread-safe: one thread at
a time per index (the memory of earlier requests holds a lock around its own).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyspec._native.c_call import check, new_error
from pyspec._native.ffi import ffi, lib
from pyspec.errors import InvalidInputError

SEPARATOR = int(lib.PYSPEC_SUFFIX_SEPARATOR)
MAX_MATCH = int(lib.PYSPEC_SUFFIX_MAX_MATCH)
MAX_OCCURRENCES = int(lib.PYSPEC_SUFFIX_MAX_OCCURRENCES)


@dataclass(frozen=True)
class SuffixDraft:
    """A draft and what it came from. ``counts[d] / totals[d]``: of the occurrences that
    agree with the draft before token d and go on, the share that went on with token d."""

    tokens: list
    counts: list
    totals: list
    match_length: int  # tokens of the pattern matched (0: no match)
    n_occurrences: int  # occurrences of the match weighed
    source: int  # index of the first drafted token in the sequence (-1: none)


def _int32(tokens, what: str) -> np.ndarray:
    arr = np.ascontiguousarray(tokens)
    if arr.ndim != 1:
        raise InvalidInputError(f"{what} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidInputError(f"{what} must hold integer token ids, got {arr.dtype}")
    if arr.size and (arr.max() > np.iinfo(np.int32).max or arr.min() < np.iinfo(np.int32).min):
        raise InvalidInputError(f"{what} holds an id outside int32")
    return np.ascontiguousarray(arr, dtype=np.int32)


class SuffixIndex:
    def __init__(self, max_match: int = 32):
        err = new_error()
        out = ffi.new("pyspec_suffix_index **")
        check(lib.pyspec_suffix_index_create(int(max_match), out, err), err)
        self._index = ffi.gc(out[0], lib.pyspec_suffix_index_free)
        self.max_match = int(max_match)

    def __len__(self) -> int:
        return int(lib.pyspec_suffix_index_length(self._index))

    def append(self, tokens) -> None:
        arr = _int32(tokens, "tokens")
        err = new_error()
        check(
            lib.pyspec_suffix_index_append(
                self._index, ffi.from_buffer("int32_t[]", arr), arr.size, err
            ),
            err,
        )

    def truncate(self, length: int) -> None:
        err = new_error()
        check(lib.pyspec_suffix_index_truncate(self._index, int(length), err), err)

    def tokens(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        stop = len(self) if stop is None else stop
        out = np.empty(max(stop - start, 0), dtype=np.int32)
        err = new_error()
        check(
            lib.pyspec_suffix_index_read(
                self._index, int(start), int(stop - start), ffi.from_buffer("int32_t[]", out), err
            ),
            err,
        )
        return out

    def draft(
        self, pattern, max_tokens: int, *, min_match: int = 1, max_occurrences: int = 32
    ) -> SuffixDraft:
        """Up to ``max_tokens`` tokens continuing ``pattern`` (the recent tokens, oldest
        first; only its last ``max_match`` matter): the longest suffix of it (at least
        ``min_match`` tokens) found in the sequence, its latest ``max_occurrences``
        occurrences weighed, the continuation most of them agree on."""
        arr = _int32(pattern, "pattern")[-self.max_match :]
        max_tokens = int(max_tokens)
        width = max(max_tokens, 1)
        tokens = np.empty(width, dtype=np.int32)
        counts = np.empty(width, dtype=np.int32)
        totals = np.empty(width, dtype=np.int32)
        out = ffi.new("pyspec_suffix_draft *")
        err = new_error()
        check(
            lib.pyspec_suffix_index_draft(
                self._index,
                ffi.from_buffer("int32_t[]", arr),
                arr.size,
                int(min_match),
                int(max_occurrences),
                max_tokens,
                ffi.from_buffer("int32_t[]", tokens),
                ffi.from_buffer("int32_t[]", counts),
                ffi.from_buffer("int32_t[]", totals),
                out,
                err,
            ),
            err,
        )
        n = out.n_tokens
        return SuffixDraft(
            tokens[:n].tolist(),
            counts[:n].tolist(),
            totals[:n].tolist(),
            out.match_length,
            out.n_occurrences,
            out.source,
        )
