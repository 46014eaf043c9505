"""The shared rule for outputs computed in different batch shapes (pyspec.testing.near_tie):
its bookkeeping on made-up runs, and its measurement on a real model."""

import numpy as np
import pytest

from pyspec.testing.near_tie import BatchNoise, compare_greedy, measure_batch_noise, one_token_row

REFERENCE = [5, 6, 7, 8, 9, 10, 11, 12]


def _runner(tokens_after):
    """A greedy path that continues `prefix` with tokens_after(prefix)."""
    return lambda prefix: tokens_after(prefix)[: len(REFERENCE) - len(prefix)]


def _reference(prefix):
    return REFERENCE[len(prefix) :]


def test_equal_outputs_have_no_ties():
    assert compare_greedy(_reference, _reference, lambda *a: 99.0, 0.1, len(REFERENCE)) == []


def test_a_divergence_below_the_bound_is_a_near_tie_and_the_runs_go_on_from_it():
    def other(prefix):  # picks 70 instead of 7 at index 2, then follows the reference
        return (
            REFERENCE[len(prefix) : 2] + [70, 8, 9]
            if len(prefix) <= 2
            else REFERENCE[len(prefix) :]
        )

    gaps = []
    ties = compare_greedy(
        _reference,
        _runner(other),
        lambda p, a, b: gaps.append((p, a, b)) or 0.01,
        0.1,
        len(REFERENCE),
    )
    assert [(t.position, t.reference, t.other) for t in ties] == [(2, 7, 70)]
    assert gaps == [([5, 6], 7, 70)]  # the gap is asked for the reference's prefix


def test_a_divergence_above_the_bound_fails_with_the_gap_and_the_bound():
    def other(prefix):
        return REFERENCE[len(prefix) : 3] + [99] * 8

    with pytest.raises(
        AssertionError,
        match=r"diverge at token 3 .* gap is 0\.5000, above the "
        r"near-tie bound 0\.1000",
    ):
        compare_greedy(_reference, _runner(other), lambda *a: 0.5, 0.1, len(REFERENCE))


def test_an_error_after_a_near_tie_is_still_caught():
    def other(prefix):  # a near-tie at 1, then a wrong token at 5 once forced onto the reference
        if len(prefix) <= 1:
            return REFERENCE[len(prefix) : 1] + [60] + REFERENCE[2:]
        return REFERENCE[len(prefix) : 5] + [0, 0, 0]

    gaps = iter([0.01, 3.0])
    with pytest.raises(AssertionError, match="diverge at token 5"):
        compare_greedy(_reference, _runner(other), lambda *a: next(gaps), 0.1, len(REFERENCE))


def test_one_output_a_prefix_of_the_other_fails():
    with pytest.raises(AssertionError, match="prefix of the other"):
        compare_greedy(
            _reference,
            lambda prefix: REFERENCE[len(prefix) : 4],
            lambda *a: 0.0,
            1.0,
            len(REFERENCE),
        )


def test_too_many_near_ties_fail():
    def other(prefix):
        return [1000 + len(prefix)] + REFERENCE[len(prefix) + 1 :]

    with pytest.raises(AssertionError, match="more than 2 near-tie"):
        compare_greedy(_reference, _runner(other), lambda *a: 0.0, 1.0, len(REFERENCE), max_ties=2)


def test_the_bounds_are_the_measured_spread_and_noise_with_the_margin():
    noise = BatchNoise(0.09, 0.02, 64, (2, 5), {2: 0.01, 5: 0.02})
    assert noise.tie_bound == pytest.approx(1.5 * 0.02)
    assert noise.logprob_bound == pytest.approx(2 * 1.5 * 0.09)
    assert "0.0900" in noise.describe() and "5: 0.0200" in noise.describe()


@pytest.mark.model
def test_the_measurement_on_a_real_model(gemma_path):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=gemma_path, n_ctx=256, n_threads=2, verbose=False)
    try:
        noise = measure_batch_noise(llm, n_tokens=12, sizes=(2, 5, 600))
        # 600 > n_batch (512) is left out; each size compares every continuation row
        assert noise.sizes == (2, 5) and noise.rows == 24
        assert noise.max_spread == max(noise.per_size.values())
        # a spread of differences is at most twice the largest of them
        assert np.isfinite(noise.max_abs) and 0 <= noise.max_spread <= 2 * noise.max_abs
        assert llm.n_tokens == 0  # the next request evaluates afresh
        prompt = llm.tokenize(b"The quick brown fox")
        row = one_token_row(llm, prompt, [llm.tokenize(b" jumps", add_bos=False)[0]])
        out = llm.create_completion("The quick brown fox jumps", max_tokens=1, temperature=0.0)
        assert out["choices"][0]["text"]  # still usable afterwards
        assert row.shape == (llm.n_vocab(),) and np.isfinite(row).any()
        with pytest.raises(ValueError, match="no batch size"):
            measure_batch_noise(llm, sizes=(1, 4096))
    finally:
        llm.close()
