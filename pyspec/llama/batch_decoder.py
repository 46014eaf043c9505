"""Low-level decoding for the speculative loop: logits only for the rows that are verified.

llama-cpp-python's own loop sets ``logits_all=True`` when a draft model is used, so every
evaluated token (prompt included) gets a vocabulary-wide row copied into ``scores``. Here
a batch asks llama.cpp for outputs only on its last ``n_outputs`` tokens, and the verifier
reads llama.cpp's logits buffer in place.
"""

from __future__ import annotations

import ctypes

import llama_cpp

from pyspec.errors import InvalidInputError, PyspecRuntimeError


class BatchDecoder:
    """Decodes token batches into one llama.cpp context (sequence 0)."""

    def __init__(self, ctx, n_vocab: int, capacity: int):
        self.ctx = ctx  # a llama_context_p
        self.n_vocab = n_vocab
        self.capacity = capacity
        self._batch = llama_cpp.llama_batch_init(capacity, 0, 1)
        self._row_bytes = 4 * n_vocab

    def close(self):
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None

    def __del__(self):
        self.close()

    def remove_from(self, position: int) -> None:
        """Drops every KV cell at ``position`` and after (rejected drafts)."""
        mem = llama_cpp.llama_get_memory(self.ctx)
        if not llama_cpp.llama_memory_seq_rm(mem, 0, position, -1):
            raise PyspecRuntimeError(
                f"llama.cpp refused to remove KV cells from position {position}"
            )

    def decode(self, tokens, n_past: int, n_outputs: int) -> int:
        """Evaluates ``tokens`` at positions ``n_past...``; llama.cpp keeps logits for the last
        ``n_outputs`` of them. Returns the address of the first of those rows; the rows are
        contiguous, ``n_vocab`` floats apart, and valid until the next decode."""
        self._evaluate(tokens, n_past, n_outputs)
        n = len(tokens)
        first_output = n - n_outputs
        first = ctypes.cast(
            llama_cpp.llama_get_logits_ith(self.ctx, first_output), ctypes.c_void_p
        ).value
        if n_outputs > 1:
            last = ctypes.cast(
                llama_cpp.llama_get_logits_ith(self.ctx, n - 1), ctypes.c_void_p
            ).value
            if last - first != (n_outputs - 1) * self._row_bytes:
                raise PyspecRuntimeError(
                    "llama.cpp's output rows are not contiguous in batch order"
                )
        return first

    def decode_sampled(self, tokens, n_past: int, n_outputs: int) -> None:
        """``decode`` for a sequence whose outputs are sampled in the graph (a GraphSampler
        is attached): llama.cpp keeps no logits rows for them, only the sampled tokens."""
        self._evaluate(tokens, n_past, n_outputs)

    def _evaluate(self, tokens, n_past: int, n_outputs: int) -> None:
        n = len(tokens)
        if not 1 <= n <= self.capacity:
            raise InvalidInputError(f"batch of {n} tokens (capacity {self.capacity})")
        if not 1 <= n_outputs <= n:
            raise InvalidInputError(f"n_outputs {n_outputs} for a batch of {n}")
        b = self._batch
        b.n_tokens = n
        first_output = n - n_outputs
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = n_past + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = i >= first_output
        rc = llama_cpp.llama_decode(self.ctx, b)
        if rc != 0:
            raise PyspecRuntimeError(
                f"llama_decode returned {rc} for a batch of {n} at position {n_past}"
            )
