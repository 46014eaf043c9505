"""A completion's ``logprobs`` built from pyspec's own per-token records, in llama-cpp-python's
format, instead of from logits rows.

llama-cpp-python answers ``create_completion(logprobs=n)`` from ``scores``: it needs
``logits_all`` (every evaluated token's row copied out of llama.cpp), then turns all rows
into log-softmax arrays and, per emitted token, its row into a Python list of n_vocab floats
that it sorts. On Gemma's 262144-token vocabulary that is about 0.9 s per token here. The
speculative loop instead records, for each emitted token, its raw log-probability and the
n most likely tokens (``pyspec.row_logprobs`` on the host, or the in-graph sampler's own
ops), and this module lays them out exactly as llama-cpp-python's non-streaming completion
does: the same token strings, text offsets and dictionary keys.

Differences: among tokens with exactly equal logits at the n-th place, pyspec keeps the
lower id where llama-cpp-python's descending sort keeps the higher; the values are the same
log-softmax to within float rounding of the normaliser (a fixed-point sum on the host, a
float sum in the graph, numpy's float sum in llama-cpp-python).
"""

from __future__ import annotations

from typing import Optional, Sequence

from pyspec.errors import InvalidInputError


def check_n_top(logprobs) -> int:
    """llama-cpp-python's ``logprobs`` argument: how many top tokens each entry lists. A bool
    counts as the int it is (llama-cpp-python lists one top token for True, none for False)."""
    if not isinstance(logprobs, int) or logprobs < 0:
        raise InvalidInputError(
            f"logprobs must be an int >= 0 (top tokens listed per emitted token), got {logprobs!r}"
        )
    return int(logprobs)


def completion_logprobs(
    llama, prompt, emitted: Sequence[tuple], n_completion: int, n_top: int
) -> dict:
    """The ``logprobs`` of a non-echo completion. ``emitted``: the loop's (token, RowLogprobs)
    per generated token; ``n_completion``: llama-cpp-python's ``completion_tokens`` count,
    which with an empty prompt includes a BOS of its own, put first, that nobody generated."""
    bos = llama.token_bos()
    lead = [] if len(prompt) > 0 else [bos]
    emitted = list(emitted[: n_completion - len(lead)])
    completion_tokens = lead + [token for token, _ in emitted]
    text_offset = len(prompt)

    def text(tokens, prev_tokens: Optional[list] = None) -> str:
        return llama.detokenize(tokens, prev_tokens=prev_tokens).decode("utf-8", errors="ignore")

    tokens, offsets, token_logprobs, top_logprobs = [], [], [], []
    for idx, token in enumerate(completion_tokens):
        if token == bos or idx < len(lead):
            continue
        record = emitted[idx - len(lead)][1]
        before = completion_tokens[:idx]
        token_str = text([token], before)
        offsets.append(text_offset + len(text(before)))
        tokens.append(token_str)
        token_logprobs.append(record.logprob)
        # Most likely first, as llama-cpp-python's sorted list: a later entry with the same
        # text overwrites an earlier one, and the emitted token's own entry comes last.
        top = {
            text([int(i)], before): float(lp)
            for i, lp in zip(record.top_ids[:n_top], record.top_logprobs[:n_top])
        }
        top[token_str] = record.logprob
        top_logprobs.append(top)
    return {
        "tokens": tokens,
        "text_offset": offsets,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
    }
