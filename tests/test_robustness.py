"""No crash paths and no silent wrong numbers (issue 9): logprobs under penalties, penalty
overflow, draft rows that are not distributions, one exception type for bad arguments,
thread limits. Each check runs through the public API, the way a user meets it."""

import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from reference import apply_penalties, reference_distribution

import pyspec
from pyspec import DraftProbsError, PyspecError, SamplingParams, SparseDraftProbs
from pyspec.verifier import max_threads

GREEDY = SamplingParams.greedy_params()
SAMPLED = SamplingParams(temperature=0.9, top_k=50, top_p=0.9, min_p=0.02, seed=5)
PENALTIES = {
    "presence": dict(presence_penalty=1.5),
    "frequency": dict(frequency_penalty=0.75),
    "repeat": dict(repeat_penalty=4.0),
    "repeat<1": dict(repeat_penalty=0.25),
    "all": dict(repeat_penalty=1.3, frequency_penalty=0.4, presence_penalty=-2.0),
}


def _raw_logprob(row, token):
    row = row.astype(np.float64)
    m = row.max()
    return row[token] - m - np.log(np.exp(row - m).sum())


def test_the_issue_example_gives_the_raw_log_softmax():
    r = pyspec.verify(
        np.array([[2.0, 1.0, 0.0]], np.float32),
        [],
        params=replace(GREEDY, presence_penalty=1.5),
        penalty_history=[0],
        logprobs=True,
    )
    assert r.tokens[0] == 1  # the penalty moved the argmax
    assert r.logprobs[0] == pytest.approx(-1.40761, abs=1e-5)  # was -0.862


@pytest.mark.parametrize("penalty", sorted(PENALTIES))
@pytest.mark.parametrize("mode", ["greedy", "point", "dense", "sparse"])
def test_logprobs_with_penalties_are_the_raw_log_softmax(rng, penalty, mode):
    V, k = 3000, 4
    base = GREEDY if mode == "greedy" else SAMPLED
    params = replace(base, **PENALTIES[penalty])
    worst = 0.0
    for trial in range(6):
        logits = rng.normal(0, 3, size=(k + 1, V)).astype(np.float32)
        history = [int(t) for t in np.argsort(logits[0])[-20:]]  # penalise the likely tokens
        drafts = [int(np.argmax(apply_penalties(logits[i], params, history))) for i in range(k)]
        probs = None
        if mode == "dense":
            probs = np.stack(
                [
                    reference_distribution(logits[i], replace(params, temperature=1.3), history)
                    for i in range(k)
                ]
            ).astype(np.float32)
            probs /= probs.sum(axis=1, keepdims=True)
        elif mode == "sparse":
            toks = np.array([[d, (d + 1) % V] for d in drafts], np.int32)
            probs = SparseDraftProbs(toks, np.full((k, 2), 0.5, np.float32))
        r = pyspec.verify(
            logits,
            drafts,
            probs,
            params,
            position=10 * trial,
            penalty_history=history,
            logprobs=True,
        )
        for i, tok in enumerate(r.tokens):
            want = _raw_logprob(logits[i], tok)
            assert r.logprobs[i] <= 0.0
            worst = max(worst, abs(r.logprobs[i] - want))
    assert worst < 2e-4, worst


@pytest.mark.parametrize(
    "bad",
    [
        dict(repeat_penalty=1e-44),
        dict(repeat_penalty=0.0),
        dict(repeat_penalty=3.4e38),
        dict(frequency_penalty=3.4e38),
        dict(presence_penalty=-3.4e38),
        dict(frequency_penalty=float("nan")),
    ],
)
def test_penalties_that_overflow_float32_are_refused(bad):
    with pytest.raises(PyspecError, match="must be in"):
        SamplingParams(**bad)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1e-6),
        SamplingParams(
            temperature=0.7,
            top_k=3,
            top_p=0.9,
            min_p=0.0,
            repeat_penalty=1e-6,
            frequency_penalty=1e6,
        ),
        replace(GREEDY, repeat_penalty=1e-6, presence_penalty=-1e6),
    ],
    ids=["top-k off", "top-k on", "greedy"],
)
def test_extreme_logits_with_extreme_penalties_give_a_valid_distribution(params):
    # A logit near FLT_MAX divided by repeat 1e-6 overflows float32: it saturates instead.
    # Two such logits would both become +inf, and inf - inf would make the row NaN.
    for row, history in (
        ([3e38, 1.0, -3e38, -np.inf, 2.0, -1e30], [0, 2, 3, 5]),
        ([3e38, 2e38, 1.0, -np.inf, -3e38], [0, 1, 3, 4]),
    ):
        row = np.array(row, np.float32)
        dist = pyspec.distribution(row, params, penalty_history=history)
        assert np.all(np.isfinite(dist)) and dist.sum() == pytest.approx(1.0, abs=1e-6)
        assert dist[3] == 0.0  # a masked token stays masked
        np.testing.assert_allclose(dist, reference_distribution(row, params, history), atol=1e-6)
        r = pyspec.verify(row[None], [], params=params, penalty_history=history, logprobs=True)
        assert dist[r.tokens[0]] > 0 and np.isfinite(r.logprobs[0]) and r.logprobs[0] <= 0


@pytest.mark.parametrize("total", [10.0, 0.1])
def test_dense_draft_rows_must_sum_to_one(rng, total):
    V = 500
    logits = rng.normal(size=(3, V)).astype(np.float32)
    q = rng.dirichlet(np.ones(V), size=2).astype(np.float32)
    q[1] *= total
    with pytest.raises(DraftProbsError, match=r"draft_probs row 1 sums to"):
        pyspec.verify(logits, [1, 2], q, SAMPLED)
    # The documented switch for callers that know their rows are normalised: no check.
    q[1] /= total
    assert pyspec.verify(logits, [1, 2], q, SAMPLED, check_draft_probs=False).n_accepted >= 0
    bad = q.copy()
    bad[0, 0] = -0.5
    bad[0, 1] += 0.5
    with pytest.raises(DraftProbsError, match="must be in \\[0, 1\\]"):
        pyspec.verify_from_pointer(logits.ctypes.data, V, [1, 2], bad, SAMPLED)


@pytest.mark.parametrize("make", [np.zeros, np.empty])
def test_no_drafts_with_an_empty_dense_draft_array(rng, make):
    # NumPy 2 gives a [0, V] array zero strides; with no row to read they are fine.
    V = 300
    logits = rng.normal(size=(1, V)).astype(np.float32)
    q = make((0, V), np.float32)
    got = pyspec.verify(logits, [], q, SAMPLED)
    want = pyspec.verify(logits, [], None, SAMPLED)
    assert got.tokens == want.tokens and got.n_accepted == 0


def test_no_drafts_with_empty_sparse_draft_arrays(rng):
    # [0, m] arrays: NumPy 2 gives them zero strides (PyTorch gives ordinary ones). No row
    # is read, so no stride is wrong.
    V = 300
    logits = rng.normal(size=(1, V)).astype(np.float32)
    tokens = np.zeros((0, 16), np.int32)
    probs = rng.dirichlet(np.ones(16), size=0).astype(np.float32)
    got = pyspec.verify(logits, [], SparseDraftProbs(tokens, probs), SAMPLED)
    assert got.tokens == pyspec.verify(logits, [], None, SAMPLED).tokens


@pytest.mark.parametrize("total", [10.0, 0.1])
def test_sparse_draft_rows_must_sum_to_one(rng, total):
    V = 500
    logits = rng.normal(size=(2, V)).astype(np.float32)
    toks = np.array([[7, 8, 9]], np.int32)
    probs = np.array([[0.5, 0.25, 0.25]], np.float32) * np.float32(total / 1.0)
    probs = np.minimum(probs, 1.0)  # entries stay in [0, 1]: only the sum is wrong
    with pytest.raises(DraftProbsError, match="row 0 sums to"):
        pyspec.verify(logits, [7], SparseDraftProbs(toks, probs), SAMPLED)


def test_a_failed_call_leaves_the_verifier_as_it_was(rng):
    V = 800
    logits = rng.normal(size=(3, V)).astype(np.float32)
    before = pyspec.verify(logits, [3, 4], params=SAMPLED, position=9, logprobs=True)
    for bad in (
        lambda: pyspec.verify(logits, [3, 4], np.ones((2, V), np.float32), SAMPLED),
        lambda: pyspec.verify(logits, [3, V], params=SAMPLED),
        lambda: pyspec.verify(logits, [3, 4], params=SAMPLED, position=2**63),
    ):
        with pytest.raises(PyspecError):
            bad()
    after = pyspec.verify(logits, [3, 4], params=SAMPLED, position=9, logprobs=True)
    assert after.n_accepted == before.n_accepted
    np.testing.assert_array_equal(after.tokens, before.tokens)
    np.testing.assert_array_equal(after.logprobs, before.logprobs)


def _rows():
    return np.random.default_rng(3).normal(size=(3, 100)).astype(np.float32)


BAD_ARGUMENTS = {
    "position 2**63": (lambda r: pyspec.verify(r, [1, 2], position=2**63), "position must be in"),
    "position 2**63-1 with drafts": (
        lambda r: pyspec.verify(r, [1, 2], position=2**63 - 1),
        r"last row's position must fit",
    ),
    "position -1": (lambda r: pyspec.verify(r, [1, 2], position=-1), "position must be in"),
    "position float": (lambda r: pyspec.verify(r, [1, 2], position=1.5), "position must be an int"),
    "sample position 2**63": (lambda r: pyspec.sample(r[0], position=2**63), "position must be in"),
    "drafts an int": (lambda r: pyspec.verify(r, 5), "draft_tokens must be a 1-D sequence"),
    "drafts a string": (lambda r: pyspec.verify(r, "ab"), "draft_tokens must be a 1-D sequence"),
    "draft id 2**40": (lambda r: pyspec.verify(r, [2**40, 1]), "outside"),
    "address 2**64 + addr": (
        lambda r: pyspec.verify_from_pointer(2**64 + r.ctypes.data, 100, [1, 2]),
        "fits in a pointer",
    ),
    "address negative": (
        lambda r: pyspec.verify_from_pointer(-r.ctypes.data, 100, [1, 2]),
        "non-null address",
    ),
    "n_vocab 2**40": (
        lambda r: pyspec.verify_from_pointer(r.ctypes.data, 2**40, [1, 2]),
        "n_vocab",
    ),
    "pointer row 2**64": (lambda r: pyspec.sample(pyspec.LogitsPointer(2**64, 100)), "address"),
    "n_threads 1024": (lambda r: pyspec.verify(r, [1, 2], n_threads=1024), "n_threads must be in"),
    "n_threads 0": (lambda r: pyspec.verify(r, [1, 2], n_threads=0), "n_threads must be in"),
    "n_threads str": (
        lambda r: pyspec.verify(r, [1, 2], n_threads="2"),
        "n_threads must be an int",
    ),
    "requests not a list": (lambda r: pyspec.verify_batch(5), "requests must be a list"),
    "top_k str": (lambda r: SamplingParams(top_k="40"), "top_k must be an int"),
    "seed 2**64": (lambda r: SamplingParams(seed=2**64), "seed must be an int"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_every_bad_argument_raises_pyspec_error(case):
    call, message = BAD_ARGUMENTS[case]
    with pytest.raises(PyspecError, match=message) as info:
        call(_rows())
    assert isinstance(info.value, ValueError)  # an InvalidInputError: a refused value


def test_numpy_scalars_are_accepted_as_parameters():
    rows = _rows()
    a = SamplingParams(
        top_k=np.int64(40),
        temperature=np.float32(0.5),
        top_p=np.float64(0.9),
        seed=np.uint64(7),
        penalty_last_n=np.int32(16),
    )
    b = SamplingParams(top_k=40, temperature=0.5, top_p=0.9, seed=7, penalty_last_n=16)
    assert type(a.top_k) is int and type(a.temperature) is float
    assert (
        pyspec.verify(rows, [1, 2], params=a, position=np.int64(4)).tokens.tolist()
        == pyspec.verify(rows, [1, 2], params=b, position=4).tokens.tolist()
    )


@pytest.mark.parametrize(
    "value, message",
    [
        ("abc", "PYSPEC_NUM_THREADS='abc' is not an integer"),
        ("2000", "PYSPEC_NUM_THREADS must be in \\[1, "),
        ("0", "PYSPEC_NUM_THREADS must be in \\[1, "),
    ],
)
def test_a_bad_thread_variable_gives_one_clear_error(value, message):
    env = dict(os.environ, PYSPEC_NUM_THREADS=value)
    out = subprocess.run(
        [sys.executable, "-c", "import pyspec"],
        capture_output=True,
        text=True,
        env=env,
        cwd=os.path.dirname(__file__),
    )
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("pyspec.errors.InvalidInputError:"), last
    import re

    assert re.search(message, last), last


def test_the_thread_variable_within_the_cores_is_used():
    env = dict(os.environ, PYSPEC_NUM_THREADS=str(max_threads()))
    out = subprocess.run(
        [sys.executable, "-c", "import pyspec; print(pyspec.default_threads())"],
        capture_output=True,
        text=True,
        env=env,
        cwd=os.path.dirname(__file__),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(max_threads())
