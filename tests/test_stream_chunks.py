"""pyspec serve's streams: the chunks of one round's tokens go out as one chunk, text and
logprobs in order, and nothing is merged across a decode or into a finishing chunk."""

from pyspec.llama.stream_chunks import coalesced_chunks


def _chunk(text, finish=None, logprobs=None, cid="cmpl-1"):
    return {
        "id": cid,
        "object": "text_completion",
        "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}],
    }


def _run(chunks, ready_after, rounds=None):
    """ready_after[i]: tokens ready once chunk i was handed out (what the loop would say);
    rounds[i]: the loop's rounds done by then (default: unchanged)."""
    handed = []
    rounds = rounds or [0] * len(chunks)

    def source():
        for i, c in enumerate(chunks):
            handed.append(i)
            yield c

    return list(
        coalesced_chunks(source(), lambda: ready_after[handed[-1]], lambda: rounds[handed[-1]])
    )


def test_a_rounds_chunks_become_one_and_a_decode_separates_them():
    # round 1 decided "a" "b" "c" (2, 1, 0 left after each), round 2 "d", then the finish
    chunks = [_chunk("a"), _chunk("b"), _chunk("c"), _chunk("d"), _chunk("", "length")]
    out = _run(chunks, [2, 1, 0, 0, 0])
    assert [c["choices"][0]["text"] for c in out] == ["abc", "d", ""]
    assert out[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in out[:-1])


def test_a_chunk_of_the_next_round_is_not_merged_into_this_ones():
    # round 1 decided "foo" "bar" "\n"; llama-cpp-python held "\n" back (it may start a
    # stop string) and decoded round 2 to complete it: its chunk goes out apart
    chunks = [_chunk("foo"), _chunk("bar"), _chunk("\nbaz"), _chunk("", "length")]
    out = _run(chunks, [2, 1, 0, 0], rounds=[1, 1, 2, 2])
    assert [c["choices"][0]["text"] for c in out] == ["foobar", "\nbaz", ""]


def test_a_finishing_chunk_is_never_merged_and_nothing_waits_for_a_decode():
    chunks = [_chunk("a"), _chunk("b", "stop")]
    out = _run(chunks, [1, 0])
    assert [(c["choices"][0]["text"], c["choices"][0]["finish_reason"]) for c in out] == [
        ("a", None),
        ("b", "stop"),
    ]
    # nothing ready: chunk by chunk, as llama-cpp-python streams them
    plain = [_chunk("x"), _chunk("y"), _chunk("z")]
    assert len(_run(plain, [0, 0, 0])) == 3


def test_logprobs_are_laid_end_to_end_and_other_answers_are_not_merged():
    def lp(tok, off):
        return {
            "tokens": [tok],
            "text_offset": [off],
            "token_logprobs": [-0.5],
            "top_logprobs": [{tok: -0.5}],
        }

    out = _run([_chunk("a", logprobs=lp("a", 0)), _chunk("b", logprobs=lp("b", 1))], [1, 0])
    assert len(out) == 1
    assert out[0]["choices"][0]["logprobs"]["tokens"] == ["a", "b"]
    assert out[0]["choices"][0]["logprobs"]["text_offset"] == [0, 1]
    mixed = _run([_chunk("a", logprobs=lp("a", 0)), _chunk("b")], [1, 0])
    assert [c["choices"][0]["text"] for c in mixed] == ["a", "b"]
    other = _run([_chunk("a"), _chunk("b", cid="cmpl-2")], [1, 0])
    assert [c["id"] for c in other] == ["cmpl-1", "cmpl-2"]
