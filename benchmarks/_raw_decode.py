"""llama-cpp-python's decode path with nothing around it: a greedy loop of one-token
``llama_decode`` calls on a ``Llama``'s own context through the low-level binding, the argmax
in numpy. What a Python loop cannot go below; set against ``llama-bench`` tg it separates
llama.cpp's decode (same build, same context) from what any Python loop adds per token.
"""

from __future__ import annotations

import time

import numpy as np


def raw_greedy_rate(llm, prompt_ids: list, n_gen: int) -> float:
    """Decode tokens/s after the first token, ``n_gen`` greedy tokens after ``prompt_ids``."""
    import llama_cpp.llama_cpp as low

    llm.reset()
    llm.eval(prompt_ids)  # llama-cpp-python's own prompt pass (it clears the cache first)
    ctx = llm._ctx.ctx
    n_vocab = llm.n_vocab()
    # The prompt's last row from llama.cpp itself: llama-cpp-python's scores hold n_batch
    # rows without logits_all, so a prompt of n_batch tokens or more has no row n_tokens - 1.
    last = np.ctypeslib.as_array(low.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
    token = int(last.argmax())
    pos = len(prompt_ids)
    batch = low.llama_batch_init(1, 0, 1)
    stamps = []
    try:
        for _ in range(n_gen):
            batch.n_tokens = 1
            batch.token[0] = token
            batch.pos[0] = pos
            batch.n_seq_id[0] = 1
            batch.seq_id[0][0] = 0
            batch.logits[0] = 1
            if low.llama_decode(ctx, batch) != 0:
                raise RuntimeError(f"llama_decode failed at position {pos}")
            row = np.ctypeslib.as_array(low.llama_get_logits_ith(ctx, 0), shape=(n_vocab,))
            token = int(row.argmax())
            pos += 1
            stamps.append(time.perf_counter())
    finally:
        low.llama_batch_free(batch)
        llm.reset()
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])
