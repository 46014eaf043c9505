"""The "pyspec" field on streamed answers: added to the last chunk only, and the chunks
before it pass through unparsed (every streamed token crosses this middleware)."""

import json

from pyspec.llama.stats import SpeculationStats
from pyspec.serve.response_stats import StatsById, _sse_with_stats


def _event(chunk: dict) -> bytes:
    # as sse_starlette frames llama_cpp.server's json.dumps of a chunk
    return b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"


def _chunk(content: str, finish_reason) -> dict:
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "choices": [
            {
                "index": 0,
                "delta": {"content": content},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
    }


def _stats() -> StatsById:
    by_id = StatsById()
    by_id.put("cmpl-abc", SpeculationStats(drafter="lookup", emitted=3, drafted=2, accepted=1))
    return by_id


def test_a_chunk_before_the_last_passes_through_as_it_came():
    body = _event(_chunk("hello", None))
    assert _sse_with_stats(body, _stats()) is body  # not parsed, not rebuilt


def test_the_last_chunk_gets_the_field_even_when_the_text_quotes_the_key():
    # the generated text holds the very bytes the fast path looks for, escaped by JSON
    text = 'print({"finish_reason": null})'
    last = json.loads(_sse_with_stats(_event(_chunk(text, "stop")), _stats())[6:])
    assert last["pyspec"]["drafted_tokens"] == 2 and last["pyspec"]["drafter"] == "lookup"
    assert last["choices"][0]["delta"]["content"] == text
    before = _event(_chunk(text, None))
    assert _sse_with_stats(before, _stats()) == before


def test_two_events_in_one_body_are_each_read():
    body = _event(_chunk("a", None)) + _event(_chunk("b", "length"))
    out = _sse_with_stats(body, _stats()).split(b"\n")
    events = [json.loads(line[6:]) for line in out if line.startswith(b"data: ")]
    assert [("pyspec" in e) for e in events] == [False, True]
