"""Repetition / frequency / presence penalties: same distribution as llama.cpp's penalties
sampler, for single rows and for every verify row (whose window includes the drafts)."""

import itertools
from dataclasses import replace

import numpy as np
import pytest
from reference import chisquare_pvalue, peaked_logits, reference_distribution

import pyspec
from pyspec.testing.llama_chain import LlamaCppChain

PENALTIES = [
    dict(repeat_penalty=1.3),
    dict(repeat_penalty=0.8),
    dict(frequency_penalty=0.7, presence_penalty=0.4),
    dict(repeat_penalty=1.1, frequency_penalty=0.2, presence_penalty=0.1, penalty_last_n=8),
    dict(repeat_penalty=1.5, penalty_last_n=-1),
]
TRANSFORMS = [
    dict(temperature=0.0),
    dict(),
    dict(top_k=0, top_p=0.9, min_p=0.0),
    dict(top_k=0, top_p=1.0, min_p=0.05, temperature=1.2),
    dict(top_k=3, top_p=1.0, min_p=0.0),
]


def _history(rng, logits, n=40):
    """A history full of the row's strongest tokens, so the penalties change the result."""
    top = np.argsort(logits)[-4:]
    return [int(t) for t in rng.integers(0, logits.size, size=5)] + [
        int(t) for t in rng.choice(top, size=n)
    ]


@pytest.mark.parametrize("pen,tr", list(itertools.product(PENALTIES, TRANSFORMS)))
def test_matches_numpy_reference(pen, tr, rng):
    logits = peaked_logits(rng, 3000)[0]
    params = pyspec.SamplingParams(**{**tr, **pen})
    hist = _history(rng, logits)
    got = pyspec.distribution(logits, params, penalty_history=hist)
    want = reference_distribution(logits, params, hist)
    np.testing.assert_allclose(got, want, atol=2e-6)
    if params.temperature > 0:  # the penalties really changed the distribution
        assert not np.allclose(
            want, reference_distribution(logits, replace(params, penalty_last_n=0))
        )


def test_greedy_argmax_moves_under_a_repeat_penalty():
    logits = np.zeros(50, dtype=np.float32)
    logits[7], logits[9] = 10.0, 9.0
    params = pyspec.SamplingParams(temperature=0.0, repeat_penalty=1.5)
    assert pyspec.sample(logits, params) == 7
    assert pyspec.sample(logits, params, penalty_history=[7]) == 9  # 10 / 1.5 < 9


# penalty_last_n = -1 (whole history) is pyspec's: llama.cpp's sampler clamps a negative
# window to 0 (off); llama-cpp-python always passes its positive last_n_tokens_size.
@pytest.mark.parametrize("pen", [p for p in PENALTIES if p.get("penalty_last_n", 64) > 0])
def test_matches_llama_cpp_penalties_sampler(pen, rng):
    logits = peaked_logits(rng, 151936)[0]
    params = pyspec.SamplingParams(**pen)
    hist = _history(rng, logits)
    chain = LlamaCppChain(params, logits.size)
    chain.set_history(hist)
    want = chain.probabilities(logits)
    got = pyspec.distribution(logits, params, penalty_history=hist).astype(np.float64)
    assert np.max(np.abs(got - want)) < 1e-5


def test_each_verify_row_sees_the_drafts_before_it(rng):
    rows = peaked_logits(rng, 3000, n_rows=6, head=4)
    for seed in range(50):
        params = pyspec.SamplingParams(
            repeat_penalty=1.8, frequency_penalty=0.5, penalty_last_n=16, seed=seed, temperature=0.7
        )
        hist = _history(rng, rows[0], n=20)
        plain = []
        for i in range(6):  # what plain sampling would emit, feeding each token back
            plain.append(pyspec.sample(rows[i], params, 100 + i, penalty_history=hist + plain))
        r = pyspec.verify(rows, plain[:5], params=params, position=100, penalty_history=hist)
        assert r.n_accepted == 5 and list(r.tokens) == plain
        drafts = plain[:2] + [(plain[2] + 1) % 3000, 0, 0]
        r = pyspec.verify(rows, drafts, params=params, position=100, penalty_history=hist)
        assert r.n_accepted == 2 and list(r.tokens) == plain[:3]


def test_rejection_sampling_with_penalties_keeps_the_distribution():
    rng = np.random.default_rng(3)
    rows = peaked_logits(rng, 3000, n_rows=2)
    params = pyspec.SamplingParams(
        repeat_penalty=1.4, presence_penalty=0.5, temperature=1.0, top_k=30
    )
    hist = _history(rng, rows[0])
    p = reference_distribution(rows[0], params, hist)
    q = pyspec.distribution(
        rows[0] + rng.standard_normal(3000).astype(np.float32),
        pyspec.SamplingParams(temperature=1.3, top_k=30),
    )
    cum = np.cumsum(q.astype(np.float64))
    out = []
    for s in range(6000):
        u = pyspec.uniform(s, 0, pyspec.Purpose.DRAFT)
        x = min(int(np.searchsorted(cum, u * cum[-1], side="right")), int(np.flatnonzero(q)[-1]))
        r = pyspec.verify(rows, [x], q[None], replace(params, seed=s), penalty_history=hist)
        out.append(r.tokens[0])
    assert chisquare_pvalue(np.array(out), p) > 1e-3


def test_bad_penalty_input(rng):
    logits = peaked_logits(rng, 100)[0]
    with pytest.raises(pyspec.PyspecError, match=r"repeat_penalty must be in \[1e-6, 1e6\]"):
        pyspec.SamplingParams(repeat_penalty=0.0)
    with pytest.raises(pyspec.PyspecError, match="penalty_last_n must be an int"):
        pyspec.SamplingParams(penalty_last_n=10**6)
    params = pyspec.SamplingParams(repeat_penalty=1.2)
    with pytest.raises(pyspec.PyspecError, match=r"penalty_history\[1\] = 500 is outside"):
        pyspec.sample(logits, params, penalty_history=[3, 500])
    with pytest.raises(pyspec.PyspecError, match="penalty window holds 9000 tokens"):
        pyspec.sample(
            logits,
            pyspec.SamplingParams(repeat_penalty=1.2, penalty_last_n=-1),
            penalty_history=[1] * 9000,
        )
