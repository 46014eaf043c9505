"""The distribution pyspec samples from equals llama.cpp's chain and an independent numpy
reference, for every transform combination, dtype and awkward vocabulary size."""

import itertools

import numpy as np
import pytest
from reference import peaked_logits, reference_distribution

import pyspec
from pyspec.testing.llama_chain import LlamaCppChain

PARAM_GRID = [
    pyspec.SamplingParams(temperature=t, top_k=k, top_p=p, min_p=m)
    for t, k, p, m in itertools.product(
        (0.0, 0.7, 1.0, 1.8), (0, 1, 40, 500), (1.0, 0.9, 0.5), (0.0, 0.05, 0.3)
    )
]
VOCABS = [1, 2, 31, 33, 64, 65, 1000, 4099]


def _params_id(p):
    return f"t{p.temperature}-k{p.top_k}-p{p.top_p}-m{p.min_p}"


@pytest.mark.parametrize("n_vocab", VOCABS)
def test_matches_numpy_reference_for_every_combination(n_vocab, rng):
    logits = peaked_logits(rng, n_vocab)[0]
    for params in PARAM_GRID:
        got = pyspec.distribution(logits, params)
        want = reference_distribution(logits, params)
        np.testing.assert_allclose(got, want, atol=2e-6, err_msg=_params_id(params))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_half_precision_rows_are_read_without_upcast_copy(dtype, rng):
    logits = peaked_logits(rng, 5000)[0].astype(dtype)
    params = pyspec.SamplingParams(temperature=0.9, top_k=0, top_p=0.9, min_p=0.02)
    # The reference sees the same values, widened exactly.
    want = reference_distribution(logits.astype(np.float32), params)
    np.testing.assert_allclose(pyspec.distribution(logits, params), want, atol=2e-6)


def test_neg_inf_logits_are_never_kept(rng):
    logits = peaked_logits(rng, 2000)[0]
    logits[::3] = -np.inf
    for params in PARAM_GRID:
        got = pyspec.distribution(logits, params)
        assert np.all(got[::3] == 0), _params_id(params)
        np.testing.assert_allclose(got.sum(), 1.0, atol=1e-5)


def test_greedy_ties_go_to_the_lowest_token():
    logits = np.zeros(100, dtype=np.float32)
    logits[[17, 42, 99]] = 5.0
    assert pyspec.sample(logits, pyspec.SamplingParams.greedy_params()) == 17
    # top-k ties at the boundary also keep the lower ids.
    p = pyspec.distribution(
        logits, pyspec.SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0)
    )
    assert set(np.flatnonzero(p)) == {17, 42}


LLAMA_PARAMS = [
    pyspec.SamplingParams(),
    pyspec.SamplingParams(temperature=1.0, top_k=0, top_p=0.9, min_p=0.0),
    pyspec.SamplingParams(temperature=0.5, top_k=100, top_p=1.0, min_p=0.1),
    pyspec.SamplingParams(temperature=1.3, top_k=0, top_p=1.0, min_p=0.02),
    pyspec.SamplingParams(temperature=0.8, top_k=10, top_p=0.5, min_p=0.0),
    pyspec.SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    pyspec.SamplingParams.greedy_params(),
]


def _assert_matches_llama(rows, params):
    chain = LlamaCppChain(params, rows.shape[1])
    for row in rows:
        want = chain.probabilities(row)
        got = pyspec.distribution(row, params).astype(np.float64)
        # Float tolerance. llama.cpp normalises and accumulates top-p in float32; over a
        # whole 150k vocabulary that moves the nucleus edge by ~0.1% of its tokens (each
        # ~1e-6; pyspec accumulates in double and matches the float64 reference exactly),
        # which renormalises every kept probability by ~1e-4 relative.
        assert np.max(np.abs(got - want)) < 1e-4, _params_id(params)
        assert 0.5 * np.abs(got - want).sum() < 5e-4, _params_id(params)


@pytest.mark.parametrize("params", LLAMA_PARAMS, ids=_params_id)
def test_matches_llama_cpp_chain_on_random_logits(params, rng):
    _assert_matches_llama(peaked_logits(rng, 151936, n_rows=2), params)


@pytest.mark.model
@pytest.mark.parametrize("params", LLAMA_PARAMS, ids=_params_id)
def test_matches_llama_cpp_chain_on_real_qwen_logits(params, qwen_logits):
    _assert_matches_llama(qwen_logits[:3], params)


@pytest.mark.model
@pytest.mark.parametrize("params", LLAMA_PARAMS, ids=_params_id)
def test_matches_llama_cpp_chain_on_real_gemma_logits(params, gemma_logits):
    _assert_matches_llama(gemma_logits[:3], params)
