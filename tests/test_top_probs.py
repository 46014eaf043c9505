"""``verify(..., top_probs=True)``: the raw target distribution's largest probability at each
emitted row, computed in the verifier's C pass (the unsure rule of the draft-length
controller reads it instead of a second pass per row).

The reference is float64 numpy: 1 / sum(exp(x - max)) over the raw row. The C pass leaves
out the logits more than PYSPEC_TOP_PROB_SPAN (16) below the maximum, so its value may be
too high by at most n_vocab * exp(-16) of itself, and is never too low."""

import math

import numpy as np
import pytest

import pyspec
from pyspec import SamplingParams
from pyspec._native.ffi import lib

SPAN = int(lib.PYSPEC_TOP_PROB_SPAN)


def _reference(row) -> float:
    x = row.astype(np.float64)
    x = x[np.isfinite(x)]
    return float(1.0 / np.exp(x - x.max()).sum())


def _within_bound(got: float, want: float, n_vocab: int) -> bool:
    over = n_vocab * math.exp(-SPAN)
    return want * (1 - 1e-5) <= got <= want * (1 + 1e-5 + over)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams.greedy_params(),
        SamplingParams(temperature=0.8, top_k=40, top_p=0.9, seed=3),
        SamplingParams(temperature=1.0, min_p=0.05, seed=4),
    ],
    ids=["greedy", "top-k/top-p", "min-p"],
)
def test_each_emitted_row_gives_its_top_probability(rng, dtype, params):
    n_vocab = 5000
    for scale in (0.5, 3.0, 8.0):  # from flat rows (unsure) to peaked ones (sure)
        logits = (rng.standard_normal((6, n_vocab)) * scale).astype(dtype)
        drafts = [int(np.argmax(r)) for r in logits[:-1]]  # greedy: all accepted
        result = pyspec.verify(logits, drafts, params=params, position=7, top_probs=True)
        assert result.top_probs.dtype == np.float32
        assert len(result.top_probs) == len(result.tokens)
        for i in range(len(result.tokens)):
            want = _reference(logits[i].astype(np.float32))
            assert _within_bound(float(result.top_probs[i]), want, n_vocab), (scale, i)


def test_off_by_default_and_the_same_through_every_entry_point(rng):
    logits = (rng.standard_normal((4, 3000)) * 4).astype(np.float32)
    drafts = [int(np.argmax(r)) for r in logits[:-1]]
    greedy = SamplingParams.greedy_params()
    assert pyspec.verify(logits, drafts, params=greedy).top_probs is None
    one = pyspec.verify(logits, drafts, params=greedy, top_probs=True)
    (batched,) = pyspec.verify_batch(
        [pyspec.VerifyRequest(logits, drafts, None, greedy)], top_probs=True
    )
    by_address = pyspec.verify_from_pointer(
        logits.ctypes.data, 3000, drafts, params=greedy, top_probs=True
    )
    np.testing.assert_array_equal(batched.top_probs, one.top_probs)
    np.testing.assert_array_equal(by_address.top_probs, one.top_probs)
    with_logprobs = pyspec.verify(logits, drafts, params=greedy, top_probs=True, logprobs=True)
    np.testing.assert_array_equal(with_logprobs.top_probs, one.top_probs)
    # greedy: the emitted token is the top one, so its log-probability is log(top), which the
    # span may raise by up to log(1 + n_vocab * exp(-16)) (3.4e-4 here), never lower
    gap = np.log(one.top_probs) - with_logprobs.logprobs
    assert np.all(gap >= -1e-5) and np.all(gap <= math.log1p(3000 * math.exp(-SPAN)) + 1e-5)


def test_penalties_do_not_move_the_raw_maximum(rng):
    """With a repeat penalty the distribution's maximum is a penalised one; the top
    probability is still the raw row's (as logprobs are)."""
    n_vocab = 2000
    row = (rng.standard_normal(n_vocab) * 2).astype(np.float32)
    top = int(np.argmax(row))
    row[top] += 6.0  # a sure row, whose top token is penalised below the others
    params = SamplingParams(temperature=0.0, repeat_penalty=1e6, penalty_last_n=8)
    result = pyspec.verify(row[None, :], [], params=params, penalty_history=[top], top_probs=True)
    assert int(result.tokens[0]) != top  # the penalty moved the choice...
    assert _within_bound(float(result.top_probs[0]), _reference(row), n_vocab)  # ...not this
    assert result.top_probs[0] > 0.5


def test_the_span_leaves_out_only_what_its_bound_allows():
    """A row whose mass below the span is as large as it can be: every other logit exactly
    16.5 below the maximum (left out), then 15.5 below (kept). The value with them left out
    is too high, by less than the documented bound; kept, it is exact."""
    n_vocab = 151936
    for gap, left_out in ((16.5, True), (15.5, False)):
        row = np.full(n_vocab, -gap, dtype=np.float32)
        row[123] = 0.0
        got = float(pyspec.verify(row[None, :], [], top_probs=True).top_probs[0])
        want = _reference(row)
        assert _within_bound(got, want, n_vocab)
        if left_out:
            assert got == 1.0 and want < 0.99  # the far mass is what it leaves out
        else:
            assert got == pytest.approx(want, rel=1e-5)


def test_real_rows_agree_with_the_softmax(gemma_logits):
    drafts = [int(np.argmax(r)) for r in gemma_logits[:-1]]
    result = pyspec.verify(
        gemma_logits, drafts, params=SamplingParams.greedy_params(), top_probs=True
    )
    for i in range(len(result.tokens)):
        want = _reference(gemma_logits[i])
        assert float(result.top_probs[i]) == pytest.approx(want, rel=1e-3)
        by_row = pyspec.row_logprobs(gemma_logits[i], None, 1)
        assert float(result.top_probs[i]) == pytest.approx(
            math.exp(float(by_row.top_logprobs[0])), rel=1e-3
        )
