"""One streamed chunk for the tokens one round decided (pyspec serve's streams).

llama-cpp-python streams a completion chunk per token. A verify round decides several
tokens at once, and a server sends each chunk through its whole stack: on the Zen 5 EPYC
(session 50), llama_cpp.server's per-chunk work (a worker-thread hop, JSON, sse_starlette's
send through its middlewares) kept pyspec serve's event loop busy about a fifth of the time
on the 2 cores the decode uses, and the client saw 0.93x the rate the rounds decoded at on
code edits whose rounds emit 32 tokens. The tokens of one round reach the client at the same
moment either way, so sending them as one chunk costs the reader nothing.
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional

_LOGPROB_LISTS = ("tokens", "text_offset", "token_logprobs", "top_logprobs")


def coalesced_chunks(
    chunks: Iterator[dict], tokens_ready: Callable[[], int], rounds_done: Callable[[], int]
) -> Iterator[dict]:
    """``chunks`` (completion chunks), those of one round merged: while ``tokens_ready()``
    says the round that made a chunk decided more tokens, the next chunk is taken at once
    and its text (and logprobs) appended. A chunk with a finish reason is never merged into
    (llama-cpp-python's chat conversion drops the text of such a chunk), nor merged: it goes
    out as it came. Nor is a chunk that came of a later round (``rounds_done()`` moved):
    llama-cpp-python holds back text that may start a stop string (or ends inside a UTF-8
    character) and decodes on to complete it. The merged chunk before it then goes out
    after that decode, one round later than its pieces would have (the held-back text
    waits for it either way), and apart from that round's text."""
    it = iter(chunks)
    for chunk in it:
        while _finish_reason(chunk) is None and tokens_ready() > 0:
            round_before = rounds_done()
            following = next(it, None)
            if following is None:
                break
            merged = None
            if _finish_reason(following) is None and rounds_done() == round_before:
                merged = _merged(chunk, following)
            if merged is None:
                yield chunk
                chunk = following
            else:
                chunk = merged
        yield chunk


def _finish_reason(chunk: dict) -> Optional[str]:
    choices = chunk.get("choices") or [{}]
    return choices[0].get("finish_reason")


def _merged(first: dict, second: dict) -> Optional[dict]:
    """``first`` with ``second``'s text and logprobs after its own; None where they are not
    two pieces of one answer's single choice."""
    a, b = first.get("choices"), second.get("choices")
    if first.get("id") != second.get("id") or len(a) != 1 or len(b) != 1:
        return None
    ca, cb = a[0], b[0]
    if ca.get("index") != cb.get("index"):
        return None
    la, lb = ca.get("logprobs"), cb.get("logprobs")
    if (la is None) != (lb is None):
        return None
    if la is not None:
        if set(la) != set(lb) or not set(la) <= set(_LOGPROB_LISTS):
            return None
        logprobs = {k: list(la[k]) + list(lb[k]) for k in la}
    else:
        logprobs = None
    choice = {**ca, "text": ca.get("text", "") + cb.get("text", ""), "logprobs": logprobs}
    return {**first, "choices": [choice]}
