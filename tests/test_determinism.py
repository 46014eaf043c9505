"""Same inputs and seed give the same outputs, across k, batch composition and threads."""

from dataclasses import replace

import numpy as np
import pytest
from reference import peaked_logits

import pyspec

V = 20000


@pytest.fixture(scope="module")
def rows():
    return peaked_logits(np.random.default_rng(21), V, n_rows=17, head=5, scale=1.0)


def _likely_drafts(rows, params, position):
    """Drafts that are often accepted: the plain sample at every position but a few."""
    d = [pyspec.sample(rows[i], params, position + i) for i in range(rows.shape[0] - 1)]
    return d


def _draft_probs(rows):
    full_support = pyspec.SamplingParams(temperature=1.2, top_k=0, top_p=1.0, min_p=0.0)
    return np.stack([pyspec.distribution(r, full_support) for r in rows[:-1]])


# Up to 4 threads, but never more than the machine's cores (more are refused).
THREAD_COUNTS = tuple(range(1, min(4, pyspec.verifier.max_threads()) + 1))


@pytest.mark.parametrize("with_probs", [False, True])
def test_repeated_calls_and_thread_counts_agree(rows, with_probs):
    probs = _draft_probs(rows) if with_probs else None
    for seed in range(40):
        params = replace(pyspec.SamplingParams(), seed=seed)
        drafts = _likely_drafts(rows, params, 100)
        if seed % 3 == 0:
            drafts[seed % 16] = 123  # force a rejection somewhere
        results = [
            pyspec.verify(rows, drafts, probs, params, 100, n_threads=t, logprobs=True)
            for t in (*THREAD_COUNTS, 1)
        ]
        for r in results[1:]:
            assert r.n_accepted == results[0].n_accepted
            np.testing.assert_array_equal(r.tokens, results[0].tokens)
            np.testing.assert_array_equal(r.logprobs, results[0].logprobs)


@pytest.mark.parametrize("with_probs", [False, True])
def test_results_do_not_depend_on_k(rows, with_probs):
    probs = _draft_probs(rows) if with_probs else None
    accepted_somewhere = 0
    for seed in range(40):
        params = replace(pyspec.SamplingParams(), seed=seed)
        drafts = _likely_drafts(rows, params, 7)
        full = pyspec.verify(rows, drafts, probs, params, 7)
        for k in (1, 2, 4, 8):
            short = pyspec.verify(
                rows[: k + 1], drafts[:k], None if probs is None else probs[:k], params, 7
            )
            # Rows that both calls decided are decided identically.
            n = min(short.n_accepted, full.n_accepted)
            np.testing.assert_array_equal(short.tokens[:n], full.tokens[:n])
            if full.n_accepted >= k:
                assert short.n_accepted == k
            else:
                assert short.n_accepted == full.n_accepted
                assert short.tokens[-1] == full.tokens[-1]
        accepted_somewhere += full.n_accepted
    assert accepted_somewhere > 40  # the test exercised acceptance, not only rejection


def test_batch_composition_does_not_change_a_sequence(rows):
    rng = np.random.default_rng(5)
    requests = []
    for s in range(12):
        k = int(rng.integers(0, 17))
        params = (
            pyspec.SamplingParams(seed=1000 + s) if s % 4 else pyspec.SamplingParams.greedy_params()
        )
        drafts = _likely_drafts(rows[: k + 1], params, 3 * s)
        probs = _draft_probs(rows[: k + 1]) if s % 2 and k else None
        requests.append(pyspec.VerifyRequest(rows[: k + 1], drafts, probs, params, 3 * s))
    alone = [
        pyspec.verify(r.target_logits, r.draft_tokens, r.draft_probs, r.params, r.position)
        for r in requests
    ]
    for order in (range(12), reversed(range(12)), [3, 1, 4, 1, 5, 9, 2, 6]):
        order = list(order)
        batch = pyspec.verify_batch([requests[i] for i in order], n_threads=2)
        for i, got in zip(order, batch):
            assert got.n_accepted == alone[i].n_accepted
            np.testing.assert_array_equal(got.tokens, alone[i].tokens)


def test_strided_rows_and_pointer_entry_point_read_in_place(rows):
    # A [rows, V] view with padding between rows, as in a bigger logits buffer.
    padded = np.zeros((rows.shape[0], V + 64), dtype=np.float32)
    padded[:, :V] = rows
    view = padded[:, :V]
    params = pyspec.SamplingParams(seed=9)
    drafts = _likely_drafts(rows, params, 0)
    want = pyspec.verify(rows, drafts, params=params)
    got = pyspec.verify(view, drafts, params=params)
    ptr = pyspec.verify_from_pointer(
        padded.ctypes.data, V, drafts, params=params, row_stride=V + 64
    )
    for r in (got, ptr):
        assert r.n_accepted == want.n_accepted
        np.testing.assert_array_equal(r.tokens, want.tokens)


def test_logprobs_are_raw_log_softmax(rows):
    params = pyspec.SamplingParams(seed=4)
    drafts = _likely_drafts(rows, params, 0)
    r = pyspec.verify(rows, drafts, params=params, logprobs=True)
    x = rows[: r.n_accepted + 1].astype(np.float64)
    log_softmax = x - x.max(axis=1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(axis=1, keepdims=True))
    want = log_softmax[np.arange(r.n_accepted + 1), r.tokens]
    np.testing.assert_allclose(r.logprobs, want, atol=1e-5)
