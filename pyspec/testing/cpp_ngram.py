"""llama.cpp's ngram-simple draftless mode, replayed on a recorded generation in cost units.

``llama-speculative-simple --spec-type ngram-simple`` (common/ngram-map.cpp in the llama.cpp
sources llama-cpp-python 0.3.36 vendors; its defaults ``--spec-ngram-simple-size-n 12`` and
``-size-m 48``) drafts, at every round, from the most recent earlier occurrence of the
context's last ``size_n`` tokens (the last emitted token among them): the ``size_m`` tokens
that followed it, fewer where the context ends sooner, none when fewer than ``size_n``
follow or when the context before the last token holds ``size_n + size_m + 1`` tokens or
fewer. There is no cost model: every draft is verified whole, cut only to the tokens the
request still asks for (the tool's ``n_predict``; where none are left, it verifies an uncut
draft and decodes past its limit, which a replay over a recording of the limit leaves out).

Written from that behaviour, not from llama.cpp's code. It sets pyspec's replayed policy
beside the C++ mode that led the chats in the live runs, on any batch curve and without the
noise of a shared machine (``benchmarks/bench_peer_replay.py``); the live comparison stays
``benchmarks/bench_draftless.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pyspec.testing.replay import batch_cost, passing

SIZE_N = 12  # --spec-ngram-simple-size-n's default: tokens matched
SIZE_M = 48  # --spec-ngram-simple-size-m's default: tokens drafted


@dataclass
class PeerReplay:
    speedup: float  # plain cost / the mode's cost for the same tokens
    rounds: int
    drafted: int
    accepted: int


def ngram_simple_draft(context: list, size_n: int = SIZE_N, size_m: int = SIZE_M) -> list:
    """The draft ngram-simple makes after ``context`` (the prompt and every emitted token,
    the last one included)."""
    before = len(context) - 1  # the history the mode searches, without the last token
    if before <= size_n + size_m + 1:
        return []
    pattern = context[-size_n:]
    for start in range(before - size_n - 1, 0, -1):  # (position 0 is never a match)
        if context[start : start + size_n] == pattern:
            copied = min(size_m, before - (start + size_n))
            if copied < size_n:
                return []
            return context[start + size_n : start + size_n + copied]
    return []


def replay_ngram_simple(
    prompt: list,
    output: list,
    costs: dict,
    *,
    max_tokens: Optional[int] = None,
    size_n: int = SIZE_N,
    size_m: int = SIZE_M,
) -> PeerReplay:
    """ngram-simple on a recorded output (the first token from the prompt's own pass, as in
    ``replay_lookup``), each round's batch priced by ``costs`` (n -> cost of a pass over n
    tokens over one). ``max_tokens``: what the request asked for (None: the output's
    length)."""
    if not output:
        raise ValueError("replay needs at least one output token")
    limit = len(output) if max_tokens is None else max_tokens
    i, spent, rounds, drafted, accepted = 1, 0.0, 0, 0, 0
    while i < len(output):
        draft = ngram_simple_draft(list(prompt) + list(output[:i]), size_n, size_m)
        draft = draft[: max(limit - i - 1, 0)]
        passed = passing(draft, output, i)
        spent += batch_cost(costs, len(draft) + 1)
        rounds, drafted, accepted = rounds + 1, drafted + len(draft), accepted + passed
        i += min(passed + 1, len(output) - i)
    speedup = (len(output) - 1) * batch_cost(costs, 1) / spent if spent else 1.0
    return PeerReplay(speedup, rounds, drafted, accepted)
