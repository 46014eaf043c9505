"""Which cached KV cells a new evaluation keeps, so that the same request gives the same rows.

llama.cpp's logits for a token depend slightly on the batch it was evaluated in. A context
that keeps the common prefix of its cache and evaluates the rest computes the last prompt
row in another batch than a fresh evaluation did (llama-cpp-python re-evaluates the last
prompt token alone), so a seeded request repeated on the same object could draw differently
at a near-boundary. Two rules keep it reproducible:

- The last evaluation of a prompt is remembered: where its evaluation started and a copy
  of its last row. The same tokens again, with the cells still in the cache, re-use that
  row (no decode at all) or, where a copy is not enough, evaluate again from the same start
  in the same chunks: the same computation, bit for bit.
- ``canonical`` (the ``reproducible=True`` mode): cached cells are kept only as whole
  ``n_batch`` chunks aligned at position 0 that were decoded as such, which is exactly what
  a fresh evaluation of any context computes first. Then every prompt's rows are those of a
  fresh object, whatever was evaluated before, at the price of re-evaluating up to
  ``n_batch - 1`` cached tokens per request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np


@dataclass
class SavedEvaluation:
    tokens: tuple  # the context evaluated
    start: int  # the position its evaluation started at (cells before: kept)
    row: Optional[np.ndarray]  # a copy of the logits after its last token (None: not kept)


class PrefixReuse:
    """The bookkeeping of one llama.cpp sequence: aligned chunks decoded, last evaluation."""

    def __init__(self, n_batch: int, canonical: bool = False):
        self.n_batch = n_batch
        self.canonical = canonical
        self.aligned_end = 0  # cells [0, aligned_end) were decoded as aligned n_batch chunks
        self.saved: Optional[SavedEvaluation] = None

    def keep(self, common: int, n_tokens: int) -> int:
        """Cells to keep before evaluating a context of ``n_tokens`` whose first ``common``
        tokens are cached (the last token is always evaluated, for its logits)."""
        keep = min(common, n_tokens - 1)
        if self.canonical:
            keep = min(keep, self.aligned_end)
        return keep

    def repeat_of(self, tokens: Sequence[int], common: int) -> Optional[SavedEvaluation]:
        """The saved evaluation of exactly ``tokens``, if its cells are all still cached."""
        saved = self.saved
        if saved is None or common < len(saved.tokens) or len(tokens) != len(saved.tokens):
            return None
        return saved if tuple(tokens) == saved.tokens else None

    def decoded(self, start: int, n: int) -> None:
        """A batch of n tokens was decoded at positions start... (after removing from start)."""
        if start == self.aligned_end and start % self.n_batch == 0 and n == self.n_batch:
            self.aligned_end += n

    def removed_from(self, position: int) -> None:
        """Cells at ``position`` and after were removed from the cache."""
        self.aligned_end = min(self.aligned_end, position - position % self.n_batch)
        if self.saved is not None and position < len(self.saved.tokens):
            self.saved = None

    def save(self, tokens: Sequence[int], start: int, row: Optional[np.ndarray]) -> None:
        self.saved = SavedEvaluation(tuple(int(t) for t in tokens), start, row)

    def forget(self) -> None:
        """Something else evaluated into this context: nothing cached is known any more."""
        self.aligned_end = 0
        self.saved = None
