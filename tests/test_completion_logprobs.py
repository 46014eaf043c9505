"""A completion's logprobs answered by pyspec itself (pyspec/llama/completion_logprobs.py):
the same answer as llama-cpp-python's own, on the host and in llama.cpp's graph, without
logits_all and without sorting a vocabulary per token.

llama-cpp-python's own answer (a Llama with logits_all=True) is the reference. With
draft_max=0 the speculative loop decodes one token per call, as llama-cpp-python does, so
both read the same rows and everything but the normaliser's rounding must agree."""

import llama_cpp
import numpy as np
import pytest

from pyspec.errors import InvalidRequestError
from pyspec.llama import SpeculativeLlama
from pyspec.llama.request import current_options

pytestmark = pytest.mark.model

PROMPT = "Write a Python function that adds two numbers:"
REPEAT = (
    "The quick brown fox jumps over the lazy dog. The five boxing wizards jump quickly. "
    "Pack my box with five dozen liquor jugs. "
) * 3
KW = dict(n_ctx=512, n_threads=2, verbose=False, seed=1)
ROUNDING = 1e-6  # log-softmax of the same float row, normalised three ways (measured <= 2.4e-7)


@pytest.fixture(scope="module")
def reference(gemma_path):
    """llama-cpp-python's own logprobs (logits_all, its Python sort per token)."""
    llm = llama_cpp.Llama(model_path=gemma_path, logits_all=True, **KW)
    out = llm.create_completion(PROMPT, max_tokens=12, temperature=0.0, logprobs=3)
    llm.close()
    return out["choices"][0]


def _assert_same_answer(got, want):
    assert got["text"] == want["text"]
    lp_got, lp_want = got["logprobs"], want["logprobs"]
    assert lp_got["tokens"] == lp_want["tokens"]
    assert lp_got["text_offset"] == lp_want["text_offset"]
    np.testing.assert_allclose(
        lp_got["token_logprobs"], lp_want["token_logprobs"], rtol=0, atol=ROUNDING
    )
    for top_got, top_want in zip(lp_got["top_logprobs"], lp_want["top_logprobs"]):
        assert list(top_got) == list(top_want)  # the same strings, in the same order
        np.testing.assert_allclose(
            list(top_got.values()), list(top_want.values()), rtol=0, atol=ROUNDING
        )


@pytest.mark.parametrize("sampling", ["host", "graph"])
def test_logprobs_equal_llama_cpp_python_own_answer(gemma_path, reference, sampling):
    llm = SpeculativeLlama(gemma_path, draft_max=0, sampling=sampling, **KW)
    try:
        got = llm.create_completion(PROMPT, max_tokens=12, temperature=0.0, logprobs=3)["choices"][
            0
        ]
        assert llm.speculation.last.sampling == sampling
        assert not llm._logits_all and current_options() is None
        assert len(llm.speculation.last_request.logprobs) >= 12  # answered from the loop's records
    finally:
        llm.close()
    _assert_same_answer(got, reference)


def test_graph_logprobs_equal_the_host_ones_while_speculating(gemma_path):
    """Sampled, with lookup drafts accepted in batches: the in-graph logprobs (float sums in
    ggml) against pyspec.row_logprobs on the host rows of the same batches (a fixed draft
    length makes the two paths decode the same batches)."""
    answers = {}
    for sampling in ("host", "graph"):
        llm = SpeculativeLlama(gemma_path, draft_max=6, adaptive=False, sampling=sampling, **KW)
        try:
            out = llm.create_completion(REPEAT, max_tokens=40, seed=3, logprobs=4)
            stats = llm.speculation.last
            assert stats.sampling == sampling and stats.accepted > 0
            answers[sampling] = (out["choices"][0], llm.speculation.last_request.logprobs)
        finally:
            llm.close()
    (host, host_records), (graph, graph_records) = answers["host"], answers["graph"]
    assert graph["text"] == host["text"]
    assert [t for t, _ in graph_records] == [t for t, _ in host_records]
    for (_, g), (_, h) in zip(graph_records, host_records):
        assert g.logprob == pytest.approx(h.logprob, abs=1e-4)
        # the same top tokens unless two of them are within float rounding of each other
        if np.all(np.diff(h.top_logprobs) < -1e-4):
            np.testing.assert_array_equal(g.top_ids, h.top_ids)
        np.testing.assert_allclose(g.top_logprobs, h.top_logprobs, rtol=0, atol=1e-4)
    np.testing.assert_allclose(
        graph["logprobs"]["token_logprobs"], host["logprobs"]["token_logprobs"], rtol=0, atol=1e-4
    )


def test_sampled_logprobs_are_those_of_the_rows_the_tokens_came_from(gemma_path):
    """The loop's records against the exact rows each emitted token was decided from
    (stopping_criteria sees them), with drafts accepted in batches."""
    rows = []

    def capture(ids, logits):
        rows.append(llama_cpp.Llama.logits_to_logprobs(np.array(logits, dtype=np.float64)))
        return False

    llm = SpeculativeLlama(gemma_path, draft_max=6, adaptive=False, sampling="host", **KW)
    try:
        out = llm.create_completion(
            REPEAT,
            max_tokens=30,
            seed=7,
            logprobs=5,
            stopping_criteria=llama_cpp.StoppingCriteriaList([capture]),
        )
        assert llm.speculation.last.accepted > 0
        records = llm.speculation.last_request.logprobs
    finally:
        llm.close()
    n = out["usage"]["completion_tokens"]
    assert n >= 20 and len(rows) >= n
    for (token, record), row in zip(records[:n], rows):
        assert record.logprob == pytest.approx(row[token], abs=ROUNDING)
        order = np.lexsort((np.arange(row.size), -row))[:5]
        np.testing.assert_array_equal(record.top_ids, order)
    assert out["choices"][0]["logprobs"]["token_logprobs"] == [r.logprob for _, r in records[:n]]


def test_chat_completion_top_logprobs(qwen_path):
    """The OpenAI-style path: create_chat_completion(logprobs=True, top_logprobs=n) reaches
    create_completion with logprobs=n and is answered from the loop's records (Qwen: an
    instruct model with a chat template)."""
    llm = SpeculativeLlama(qwen_path, **KW)
    try:
        out = llm.create_chat_completion(
            [{"role": "user", "content": "What is 2 + 2?"}],
            max_tokens=8,
            temperature=0.0,
            logprobs=True,
            top_logprobs=2,
        )
        content = out["choices"][0]["logprobs"]["content"]
        assert content and all(len(entry["top_logprobs"]) >= 1 for entry in content)
        assert len(llm.speculation.last_request.logprobs) >= len(content)
        assert all(entry["logprob"] <= 0 for entry in content)
    finally:
        llm.close()


def test_bad_logprobs_argument_raises_and_leaves_the_model_usable(gemma_path):
    llm = SpeculativeLlama(gemma_path, **KW)
    try:
        for bad in (-1, 1.5, "2"):
            with pytest.raises(ValueError, match="logprobs must be an int >= 0"):
                llm.create_completion(PROMPT, max_tokens=4, logprobs=bad)
            assert current_options() is None and not llm._logits_all
        out = llm.create_completion(PROMPT, max_tokens=4, temperature=0.0)
        assert out["choices"][0]["logprobs"] is None and out["usage"]["completion_tokens"] == 4
        out = llm.create_completion(PROMPT, max_tokens=1, temperature=0.0, logprobs=0)
        assert len(out["choices"][0]["logprobs"]["top_logprobs"][0]) == 1  # just the emitted token
        # a bool is the int it is, as llama-cpp-python takes it: True lists one top token
        out = llm.create_completion(PROMPT, max_tokens=1, temperature=0.0, logprobs=True)
        assert len(out["choices"][0]["logprobs"]["top_logprobs"][0]) == 1
    finally:
        llm.close()


def test_graph_mode_serves_logprobs_up_to_its_limit(gemma_path):
    llm = SpeculativeLlama(gemma_path, sampling="graph", **KW)
    try:
        out = llm.create_completion(PROMPT, max_tokens=4, temperature=0.0, logprobs=64)
        assert llm.speculation.last.sampling == "graph"
        assert len(out["choices"][0]["logprobs"]["top_logprobs"][0]) >= 60  # strings may repeat
        with pytest.raises(InvalidRequestError, match="more than 64 top logprobs"):
            llm.create_completion(PROMPT, max_tokens=4, logprobs=65)
    finally:
        llm.close()
