"""pyspec.row_logprobs: what a completion's logprobs report for one row, computed in C.

The reference is float64 numpy: log-softmax of the raw row, and a stable sort by (logit
descending, token id ascending) for the top tokens."""

import numpy as np
import pytest

import pyspec
from pyspec import LogitsError, LogitsPointer, PyspecError


def _reference(row, n_top):
    x = row.astype(np.float64)
    finite = x[np.isfinite(x)]
    m = finite.max()
    lp = x - m - np.log(np.exp(finite - m).sum())
    order = np.lexsort((np.arange(x.size), -x))  # logit descending, then id ascending
    order = [int(i) for i in order if np.isfinite(x[i])][:n_top]
    return lp, np.array(order, dtype=np.int64)


@pytest.mark.parametrize("n_vocab", [7, 1000, 151936])
@pytest.mark.parametrize("n_top", [0, 1, 5, 20])
def test_token_and_top_logprobs_match_float64_log_softmax(rng, n_vocab, n_top):
    n_top = min(n_top, n_vocab)  # V=7: the whole vocabulary, in order
    row = (rng.standard_normal(n_vocab) * 3).astype(np.float32)
    lp, order = _reference(row, n_top)
    for token in (0, int(np.argmax(row)), n_vocab - 1):
        got = pyspec.row_logprobs(row, token, n_top)
        assert got.logprob == pytest.approx(lp[token], abs=2e-6)
        np.testing.assert_array_equal(got.top_ids, order)
        np.testing.assert_allclose(got.top_logprobs, lp[order], atol=2e-6)
        assert got.top_ids.dtype == np.int32 and got.top_logprobs.dtype == np.float32


def test_agrees_with_verify_logprobs_on_real_rows(gemma_logits):
    drafts = [int(np.argmax(r)) for r in gemma_logits[:-1]]
    result = pyspec.verify(
        gemma_logits, drafts, params=pyspec.SamplingParams.greedy_params(), logprobs=True
    )
    for i, token in enumerate(result.tokens):
        got = pyspec.row_logprobs(gemma_logits[i], int(token), 5)
        assert got.logprob == result.logprobs[i]  # the same normaliser, the same float
        assert got.top_ids[0] == token  # greedy: the emitted token is the most likely


def test_half_precision_rows_and_pointers(rng):
    row = (rng.standard_normal(5000) * 2).astype(np.float16)
    lp, order = _reference(row.astype(np.float32), 8)
    got = pyspec.row_logprobs(row, 17, 8)
    np.testing.assert_array_equal(got.top_ids, order)
    assert got.logprob == pytest.approx(lp[17], abs=2e-6)
    f32 = row.astype(np.float32)
    by_address = pyspec.row_logprobs(LogitsPointer(f32.ctypes.data, f32.size), 17, 8)
    np.testing.assert_array_equal(by_address.top_ids, order)
    assert by_address.logprob == got.logprob


def test_ties_keep_the_lower_id_and_minus_inf_entries_are_allowed():
    row = np.full(10, -np.inf, dtype=np.float32)
    row[[2, 3, 7]] = [1.0, 1.0, 0.5]
    got = pyspec.row_logprobs(row, 9, 5)
    np.testing.assert_array_equal(got.top_ids, [2, 3, 7])  # only 3 finite entries
    assert got.logprob == -np.inf
    z = np.log(2 * np.e + np.exp(0.5))
    np.testing.assert_allclose(got.top_logprobs, [1 - z, 1 - z, 0.5 - z], atol=1e-6)
    assert pyspec.row_logprobs(row).logprob is None


@pytest.mark.parametrize("bad, message", [(np.nan, "NaN"), (np.inf, r"\+inf")])
def test_nan_and_inf_rows_raise(bad, message):
    row = np.zeros(64, dtype=np.float32)
    row[40] = bad
    with pytest.raises(LogitsError, match=message):
        pyspec.row_logprobs(row, 0, 3)
    with pytest.raises(LogitsError, match="every entry is -inf"):
        pyspec.row_logprobs(np.full(8, -np.inf, dtype=np.float32), 0)


def test_bad_arguments_raise():
    row = np.zeros(16, dtype=np.float32)
    with pytest.raises(PyspecError, match="token = 16 is outside"):
        pyspec.row_logprobs(row, 16)
    with pytest.raises(PyspecError, match="token = -1 is outside"):
        pyspec.row_logprobs(row, -1)
    with pytest.raises(PyspecError, match=r"n_top must be an int in \[0, 16\]"):
        pyspec.row_logprobs(row, 0, 17)
    with pytest.raises(PyspecError, match="n_top"):
        pyspec.row_logprobs(row, 0, -1)
    with pytest.raises(PyspecError):
        pyspec.row_logprobs(np.zeros((2, 16), dtype=np.float32), 0)
    with pytest.raises(PyspecError, match="address"):
        pyspec.row_logprobs(LogitsPointer(0, 16), 0)
