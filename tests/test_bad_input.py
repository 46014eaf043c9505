"""Bad input gets a clear exception naming the argument, and leaves every state intact."""

import numpy as np
import pytest

import pyspec
from pyspec import DraftProbsError, LogitsError, PyspecError, SparseDraftProbs
from pyspec._native.abi import Status

V = 1000


@pytest.fixture
def rows(rng):
    return rng.standard_normal((3, V)).astype(np.float32)


def _assert_state_intact(rows, before):
    after = pyspec.verify(rows, [1, 2], params=pyspec.SamplingParams(seed=5), logprobs=True)
    np.testing.assert_array_equal(after.tokens, before.tokens)
    np.testing.assert_array_equal(after.logprobs, before.logprobs)


@pytest.mark.parametrize("index", [0, 500, V - 1])
@pytest.mark.parametrize("value,word", [(np.nan, "NaN"), (np.inf, r"\+inf")])
def test_nan_and_pos_inf_logits_are_rejected_with_their_index(rows, index, value, word):
    before = pyspec.verify(rows, [1, 2], params=pyspec.SamplingParams(seed=5), logprobs=True)
    bad = rows.copy()
    bad[0, index] = value
    for params in (
        pyspec.SamplingParams(),
        pyspec.SamplingParams.greedy_params(),
        pyspec.SamplingParams(top_k=0, top_p=0.9),
    ):
        with pytest.raises(LogitsError, match=rf"row 0 holds {word} at vocabulary index {index}"):
            pyspec.verify(bad, [1, 2], params=params)
        with pytest.raises(LogitsError):
            pyspec.sample(bad[0], params)
    _assert_state_intact(rows, before)


def test_an_all_neg_inf_row_is_rejected(rows):
    bad = rows.copy()
    bad[0] = -np.inf
    with pytest.raises(LogitsError, match="no finite logit"):
        pyspec.verify(bad, [1, 2])


def test_neg_inf_entries_are_allowed_and_never_emitted(rows):
    masked = rows.copy()
    masked[:, 1:] = -np.inf  # only token 0 remains
    r = pyspec.verify(masked, [0, 0], params=pyspec.SamplingParams(temperature=2.0, top_k=0))
    assert list(r.tokens) == [0, 0, 0]


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint16])
def test_wrong_dtype_is_rejected_without_conversion(rows, dtype):
    with pytest.raises(PyspecError, match="must be float32, float16 or bfloat16"):
        pyspec.verify(rows.astype(dtype), [1, 2])


def test_a_list_of_floats_is_told_how_to_convert(rows):
    # numpy makes float64 of a list: the message says so and names the conversion
    with pytest.raises(PyspecError, match=r"list of floats becomes float64.*np.asarray"):
        pyspec.verify(rows.tolist(), [1, 2])
    with pytest.raises(PyspecError, match="got int32; no copy") as info:
        pyspec.verify(rows.astype(np.int32), [1, 2])
    assert "list of floats" not in str(info.value)


def test_shape_and_layout_errors(rows):
    with pytest.raises(PyspecError, match="has 3 rows; it needs n_draft \\+ 1 = 2"):
        pyspec.verify(rows, [1])
    with pytest.raises(PyspecError, match="contiguous along the vocabulary axis"):
        pyspec.verify(np.asfortranarray(rows), [1, 2])
    with pytest.raises(PyspecError, match="must be 2-D"):
        pyspec.verify(rows[None], [1, 2])
    # the one-row calls name what they need (they said "n_draft + 1 = 1": they take no drafts)
    for one_row_call in (pyspec.sample, pyspec.distribution, pyspec.row_logprobs):
        with pytest.raises(PyspecError, match="has 3 rows; it needs one row \\(\\[n_vocab\\]\\)"):
            one_row_call(rows)


@pytest.mark.parametrize("token", [-1, V, 2**40])
def test_out_of_range_draft_tokens(rows, token):
    with pytest.raises(
        PyspecError, match=rf"draft_tokens\[1\] = {token} is outside \[0, n_vocab = {V}\)"
    ):
        pyspec.verify(rows, [3, token])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(top_p=0.0), "top_p must be in"),
        (dict(top_p=1.5), "top_p must be in"),
        (dict(top_p=float("nan")), "top_p must be in"),
        (dict(temperature=float("nan")), "temperature must be finite"),
        (dict(temperature=float("inf")), "temperature must be finite"),
        (dict(min_p=1.5), "min_p must be <= 1"),
        (dict(min_p=float("nan")), "min_p must be <= 1"),
        (dict(top_k=1.5), "top_k must be an int"),
        (dict(seed=-1), "seed must be an int"),
        (dict(seed=2**64), "seed must be an int"),
    ],
)
def test_bad_params(kwargs, match):
    with pytest.raises(PyspecError, match=match):
        pyspec.SamplingParams(**kwargs)


def test_negative_top_k_means_off(rows):
    a = pyspec.distribution(rows[0], pyspec.SamplingParams(top_k=-5))
    b = pyspec.distribution(rows[0], pyspec.SamplingParams(top_k=0))
    np.testing.assert_array_equal(a, b)


def test_bad_draft_probs(rows):
    q = np.full((2, V), 1.0 / V, dtype=np.float32)
    with pytest.raises(
        PyspecError, match=r"draft_probs must have shape \[n_draft, n_vocab\] = \[2, 1000\]"
    ):
        pyspec.verify(rows, [1, 2], q[:, :999])  # a draft model with another vocabulary
    with pytest.raises(PyspecError, match="draft_probs must be float32"):
        pyspec.verify(rows, [1, 2], q.astype(np.float64))
    zero = q.copy()
    zero[0, 1] = 0.0
    with pytest.raises(DraftProbsError, match="drafted token 1 probability 0"):
        pyspec.verify(rows, [1, 2], zero)
    nan = q.copy()
    nan[0, 1] = np.nan
    with pytest.raises(DraftProbsError):
        pyspec.verify(rows, [1, 2], nan)
    with pytest.raises(PyspecError, match="sparse draft_probs must be two"):
        pyspec.verify(
            rows,
            [1, 2],
            pyspec.SparseDraftProbs(np.zeros((2, 3), np.int32), np.zeros((2, 4), np.float32)),
        )
    with pytest.raises(PyspecError, match=r"draft_probs.tokens\[0\] = 5000"):
        pyspec.verify(
            rows,
            [1, 2],
            pyspec.SparseDraftProbs(np.full((2, 1), 5000, np.int32), np.ones((2, 1), np.float32)),
        )


def test_dense_and_sparse_rows_share_one_bound_on_q(rows):
    """A draft model's float softmax can put a near-certain token a hair above 1: both the
    dense check (Python) and the sparse check (C) take pyspec.h's one bound, 1.0001."""
    from pyspec._native.abi import DRAFT_Q_MAX

    assert DRAFT_Q_MAX == pytest.approx(1.0001)
    for q_top, ok in ((1.00005, True), (1.0002, False)):
        dense = np.zeros((1, V), np.float32)
        dense[0, 1] = q_top
        sparse = pyspec.SparseDraftProbs(np.array([[1]], np.int32), np.array([[q_top]], np.float32))
        for probs in (dense, sparse):
            if ok:
                assert len(pyspec.verify(rows[:2], [1], probs).tokens) >= 1
            else:
                with pytest.raises(DraftProbsError, match=r"must be in \[0, 1\] \(up to 1.0001"):
                    pyspec.verify(rows[:2], [1], probs)


def test_pointer_entry_point_checks(rows):
    with pytest.raises(PyspecError, match="non-null address"):
        pyspec.verify_from_pointer(0, V, [1, 2])
    with pytest.raises(PyspecError, match="dtype must be one of"):
        pyspec.verify_from_pointer(rows.ctypes.data, V, [1, 2], dtype="float64")
    with pytest.raises(PyspecError, match=r"row_stride must be an int >= n_vocab"):
        pyspec.verify_from_pointer(rows.ctypes.data, V, [1, 2], row_stride=V - 1)


def test_threads_and_batch_errors(rows):
    with pytest.raises(PyspecError, match=r"n_threads must be in \[1, "):
        pyspec.verify(rows, [1, 2], n_threads=0)
    other = np.zeros((1, V + 1), dtype=np.float32)
    with pytest.raises(PyspecError, match="must share requests\\[0\\]'s vocabulary"):
        pyspec.verify_batch([pyspec.VerifyRequest(rows, [1, 2]), pyspec.VerifyRequest(other, [])])
    with pytest.raises(PyspecError, match=r"position must be in \[0, 2\*\*63 - 1 - n_draft\]"):
        pyspec.verify(rows, [1, 2], position=-1)
    with pytest.raises(PyspecError, match="params must be a pyspec.SamplingParams"):
        pyspec.verify(rows, [1, 2], params={"temperature": 1.0})


def test_device_arrays_are_refused_clearly(rows):
    class FakeDeviceArray:
        __cuda_array_interface__ = {
            "shape": (2, V),
            "typestr": "<f4",
            "data": (1, False),
            "version": 3,
        }

    # host logits with device draft probabilities: a mix-up, named as such
    with pytest.raises(PyspecError, match="draft_probs lives on a CUDA device"):
        pyspec.verify(rows, [1, 2], FakeDeviceArray())
    with pytest.raises(PyspecError, match="lives on a CUDA device"):
        pyspec.sample(FakeDeviceArray())
    # device logits go to the CUDA back end (tests/test_cuda.py); without a device that says so
    if not pyspec.cuda_available():
        with pytest.raises(PyspecError, match="no CUDA device|built without CUDA"):
            pyspec.verify(FakeDeviceArray(), [1])


def test_error_in_a_batch_names_the_sequence(rows):
    bad = rows.copy()
    bad[0, 7] = np.nan
    with pytest.raises(
        LogitsError, match=r"seqs\[1\]: target_logits row 0 holds NaN at vocabulary index 7"
    ):
        pyspec.verify_batch([pyspec.VerifyRequest(rows, [1, 2]), pyspec.VerifyRequest(bad, [1, 2])])


def test_rows_after_a_rejection_are_not_read(rows):
    """The fused verifier stops at the first rejection: a later row is never touched, so
    garbage there cannot change (or fail) the result. Documented in the README."""
    greedy = pyspec.SamplingParams.greedy_params()
    wrong = (int(rows[0].argmax()) + 1) % V
    tail_nan = rows.copy()
    tail_nan[1:] = np.nan
    r = pyspec.verify(tail_nan, [wrong, 0], params=greedy, n_threads=1)
    assert r.n_accepted == 0 and r.tokens[0] == rows[0].argmax()


def test_two_dimensional_draft_ids_are_refused_not_over_read(rows):
    drafts = np.array([[1, 2, 3]], dtype=np.int32)  # 3 ids for 2 rows if flattened
    with pytest.raises(PyspecError, match="draft_tokens must be 1-D"):
        pyspec.verify(rows[:2], drafts)
    with pytest.raises(PyspecError):
        pyspec.verify_batch([pyspec.VerifyRequest(rows[:2], drafts)])


@pytest.mark.parametrize("what", ["logits", "dense draft_probs", "sample row"])
def test_byte_swapped_arrays_are_rejected_not_misread(rows, what):
    """numpy names a big-endian '>f4' array "float32"; the C library reads native order only,
    so such an array must be refused, never read as if it were little-endian."""
    swapped = rows.astype(rows.dtype.newbyteorder())
    np.testing.assert_array_equal(swapped, rows)  # the same values, other bytes
    with pytest.raises(PyspecError, match="must be float32") as info:
        if what == "logits":
            pyspec.verify(swapped[:3], [1, 2])
        elif what == "dense draft_probs":
            q = np.full((2, rows.shape[1]), 1.0 / rows.shape[1], np.float32)
            pyspec.verify(rows[:3], [1, 2], q.astype(q.dtype.newbyteorder()))
        else:
            pyspec.sample(swapped[0], pyspec.SamplingParams.greedy_params())
    assert info.value.status == Status.DTYPE


def test_sparse_draft_probs_checks_run_in_order(rows):
    """Shape, then the probabilities' dtype, then the token range: a call wrong in several
    ways reports the first, as before the checks were shared."""
    V = rows.shape[1]
    bad_tokens = np.full((2, 3), V + 5, np.int64)
    with pytest.raises(PyspecError) as info:  # shape and range both wrong
        pyspec.verify(rows[:3], [1, 2], SparseDraftProbs(bad_tokens, np.zeros((2, 4), np.float32)))
    assert info.value.status == Status.SHAPE
    with pytest.raises(PyspecError) as info:  # dtype and range both wrong
        pyspec.verify(rows[:3], [1, 2], SparseDraftProbs(bad_tokens, np.zeros((2, 3), np.float64)))
    assert info.value.status == Status.DTYPE
    with pytest.raises(PyspecError) as info:  # range alone
        pyspec.verify(rows[:3], [1, 2], SparseDraftProbs(bad_tokens, np.zeros((2, 3), np.float32)))
    assert info.value.status == Status.TOKEN
