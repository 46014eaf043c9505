"""The acceptance rate of modified rejection sampling, tested directly (issue 16, first step).

A draft x drawn from q is accepted with probability min(1, p(x) / q(x)), so over many seeds
the fraction of accepted drafts must be sum_x min(p(x), q(x)) (Leviathan et al. 2023). This
is a far sharper check of the acceptance test than the distribution of emitted tokens: a
binomial test over N = 100,000 independent seeds (one verify row each, vectorised through
``verify_batch``) at ALPHA = 1e-3 detects, with power >= 0.9, an acceptance biased by 5%
(``u * q < 1.05 * p``; that bias moves the rate from 0.285-0.330 by 0.014-0.015, about 10
standard errors). The power is computed below from the normal approximation of the binomial
for every case and asserted, and a simulated biased verifier is shown to fail the same check.
The smallest acceptance bias detected with power >= 0.9 is 2.2-2.3% in these cases.

p comes from the independent numpy reference (reference.py), q from a perturbed copy of the
target (a plausible draft model), dense and sparse.
"""

from dataclasses import replace
from math import erf, sqrt

import numpy as np
import pytest
from reference import peaked_logits, reference_distribution
from test_exactness import COMBOS, DEFAULT, draft_for, verify_over_seeds

import pyspec

ALPHA = 1e-3
Z_CRIT = 3.2905  # two-sided normal quantile at ALPHA
N = 100_000
BIAS = 1.05
N_DRAFT_MODEL = 40_000


def _phi(x: float) -> float:
    return 0.5 * (1.0 + erf(x / sqrt(2.0)))


def power_against(rate: float, biased_rate: float, n: int) -> float:
    """Probability that the two-sided binomial z-test at ALPHA rejects when the true rate is
    biased_rate (normal approximation)."""
    se0 = sqrt(rate * (1 - rate) / n)
    se1 = sqrt(biased_rate * (1 - biased_rate) / n)
    shift = biased_rate - rate
    return (1 - _phi((Z_CRIT * se0 - shift) / se1)) + _phi((-Z_CRIT * se0 - shift) / se1)


def z_score(accepted: int, n: int, rate: float) -> float:
    return (accepted - n * rate) / sqrt(n * rate * (1 - rate))


def accepted_count(rows, draft, params, n=N, sparse=False):
    """Accepted drafts over seeds 0..n-1 (one verify row each)."""
    return sum(r.n_accepted for r in verify_over_seeds(rows, draft, params, n, sparse))


CASES = [("default", DEFAULT)] + [(f"combo{i}", c) for i, c in enumerate(COMBOS)]


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("name, params", CASES[:3], ids=[c[0] for c in CASES[:3]])
def test_acceptance_rate_is_sum_of_min_p_q(name, params, sparse):
    rows = peaked_logits(np.random.default_rng(21), 5000, n_rows=2)
    p = reference_distribution(rows[0], params)
    draft = draft_for(rows[0], np.random.default_rng(4), params)
    q = draft.probs.astype(np.float64)
    rate = float(np.minimum(p, q).sum())
    biased = float(np.minimum(q, BIAS * p).sum())
    # The test can tell: a 5% acceptance bias is caught with power >= 0.9 (computed).
    assert 0.05 < rate < 0.95
    assert power_against(rate, biased, N) >= 0.9, (rate, biased)
    z = z_score(accepted_count(rows, draft, params, sparse=sparse), N, rate)
    assert abs(z) < Z_CRIT, (z, rate)


def test_a_verifier_biased_by_five_percent_fails_the_same_check():
    # The same statistic on a simulated verifier whose acceptance is u * q < 1.05 * p: its
    # accepted count is what such a library would report (exactly binomial(N, biased rate)).
    rows = peaked_logits(np.random.default_rng(21), 5000, n_rows=2)
    p = reference_distribution(rows[0], DEFAULT)
    q = draft_for(rows[0], np.random.default_rng(4), DEFAULT).probs.astype(np.float64)
    rate, biased = float(np.minimum(p, q).sum()), float(np.minimum(q, BIAS * p).sum())
    rng = np.random.default_rng(0)
    caught = sum(abs(z_score(int(rng.binomial(N, biased)), N, rate)) >= Z_CRIT for _ in range(200))
    assert caught >= 180  # power >= 0.9, as computed
    honest = sum(abs(z_score(int(rng.binomial(N, rate)), N, rate)) >= Z_CRIT for _ in range(200))
    assert honest <= 2  # and the honest rate passes (false alarms at about ALPHA)


@pytest.mark.model
def test_draft_model_draws_follow_the_q_it_reports(qwen_logits, qwen_path):
    """DraftModel on real models: Qwen2.5-Coder 0.5B drafts for 1.5B's next token after a real
    prompt. Its drafts are drawn by ``draw_from`` (the code its draft loop runs) from the
    sparse q it hands the verifier, keyed by 40,000 seeds; the target verifies each against
    its real logits row. If the draws did not follow the reported q, or the verifier's
    acceptance were biased, the accepted fraction would leave sum(min(p, q)): binomial
    z-test, its power against a 5% acceptance bias computed and asserted (here rate 0.54,
    the bias moves it by 0.015: power 0.996 over N_DRAFT_MODEL seeds; top_k 40, as
    llama-cpp-python's default, keeps each verify of the 151936-entry row cheap)."""
    import llama_cpp
    from conftest import CODE_PROMPT

    from pyspec.llama.drafting.draft_model import DraftModel, draw_from
    from pyspec.rng import Purpose
    from pyspec.testing.models import ensure_model

    vocab = llama_cpp.Llama(model_path=qwen_path, vocab_only=True, verbose=False)
    tokens = vocab.tokenize(CODE_PROMPT.encode())
    vocab.close()
    params = pyspec.SamplingParams(temperature=1.5, top_k=40, top_p=1.0, min_p=0.0, seed=0)
    drafter = DraftModel(str(ensure_model("qwen2.5-coder-0.5b")), n_ctx=256, n_threads=2)
    # After "...return a\n\ndef": the next function's name is an open choice for both models
    # (the prompt's end, "def factorial(n):\n", is followed by one sure token: nothing to test).
    tokens = tokens[:-3]
    draft = drafter.draft(tokens, 1, params, len(tokens))
    drafter.close()
    ids = draft.probs.tokens[0].astype(np.int64)
    q_sparse = draft.probs.probs[0].astype(np.float64)
    ids, q_sparse = ids[q_sparse > 0], q_sparse[q_sparse > 0]
    row = qwen_logits[-4]  # the target's logits after the same tokens
    p = reference_distribution(row, params)
    q = np.zeros_like(p)
    q[ids] = q_sparse
    rate, biased = float(np.minimum(p, q).sum()), float(np.minimum(q, BIAS * p).sum())
    assert 0.05 < rate < 0.95, rate
    n = N_DRAFT_MODEL
    power = power_against(rate, biased, n)
    assert power >= 0.9, (rate, biased, power)
    u = np.array([pyspec.uniform(s, len(tokens), Purpose.DRAFT, stream=1) for s in range(n)])
    xs = draw_from(ids, q_sparse, u)
    sparse = pyspec.SparseDraftProbs(
        ids[None, :].astype(np.int32), q_sparse[None, :].astype(np.float32)
    )
    rows = np.stack([row, row])
    accepted = 0
    for start in range(0, n, 10_000):
        requests = [
            pyspec.VerifyRequest(rows, [int(xs[s])], sparse, replace(params, seed=s), len(tokens))
            for s in range(start, min(n, start + 10_000))
        ]
        accepted += sum(r.n_accepted for r in pyspec.verify_batch(requests))
    z = z_score(accepted, n, rate)
    assert abs(z) < Z_CRIT, (z, rate, power)
