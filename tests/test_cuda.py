"""The CUDA back end.

Runs everywhere: the build reports CUDA as it was configured; the CUDA entry points fail with
a clear error (never a crash) when there is no device or no CUDA in the build; device arrays
are recognised from their protocols alone (small fake objects, no GPU) and host/device
mix-ups, dtypes and shapes are reported before anything touches a device.

Needs a GPU (skipped otherwise, with the reason), plus PyTorch or CuPy to make device arrays:
token identity with the CPU path over random and real-logit rows in every mode, parameter
combination and dtype, ragged batches; chi-square exactness of the GPU path alone; rows after
a rejection; device-side error reports.
"""

import ctypes
import os
import zlib

import numpy as np
import pytest

import pyspec
from pyspec import PyspecError, SamplingParams, SparseDraftProbs, VerifyRequest
from pyspec._native.abi import Status
from pyspec._native.ffi import ffi, lib
from pyspec.arrays import device as dev

CUDA_STATUS = Status.CUDA


# ---- no GPU needed ----------------------------------------------------------------------


def test_has_cuda_matches_the_build():
    expected = os.environ.get("PYSPEC_EXPECT_CUDA")
    if expected is None:
        pytest.skip(
            "PYSPEC_EXPECT_CUDA is not set: only the build that configured the "
            "library knows whether CUDA was asked for (.ci/run sets it)"
        )
    assert pyspec.HAS_CUDA == (expected == "1")


def test_device_count_and_create_fail_cleanly_without_a_device():
    if pyspec.cuda_available():
        pytest.skip("a CUDA device is present")
    n = ffi.new("int32_t *")
    err = ffi.new("pyspec_error *")
    status = lib.pyspec_cuda_device_count(n, err)
    message = ffi.string(err.message).decode()
    assert status == CUDA_STATUS and n[0] == 0
    assert ("no CUDA device" in message) if pyspec.HAS_CUDA else ("built without CUDA" in message)
    out = ffi.new("pyspec_cuda_verifier **")
    assert lib.pyspec_cuda_verifier_create(1000, 4, 8, 0, out, err) == CUDA_STATUS
    assert out[0] == ffi.NULL
    lib.pyspec_cuda_verifier_free(ffi.NULL)
    assert lib.pyspec_cuda_verify_batch(ffi.NULL, ffi.NULL, 0, 10, 0, ffi.NULL, err) != 0
    split_status = lib.pyspec_cuda_verifier_split_rows(ffi.NULL, 1, err)
    assert split_status == (Status.NULL if pyspec.HAS_CUDA else CUDA_STATUS)
    with pytest.raises(PyspecError) as info:
        pyspec.cuda.CudaVerifier(1000)
    assert info.value.status == CUDA_STATUS
    assert pyspec.cuda.device_count() == 0


def test_cpu_functions_work_in_a_cuda_build():
    logits = np.random.default_rng(0).standard_normal((2, 50)).astype(np.float32)
    r = pyspec.verify(logits, [3], params=SamplingParams(seed=2))
    assert len(r.tokens) == r.n_accepted + 1


class FakeCAI:
    """Something that looks like a CuPy/Numba array: only the protocol, no memory."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x7F0000000000, device=None):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (ptr, False),
            "strides": strides,
            "version": 3,
        }
        if device is not None:
            self.device = type("Dev", (), {"id": device})()


class FakeDLPack:
    def __init__(self, dev_type, dev_id=0):
        self._dev = (dev_type, dev_id)

    def __dlpack_device__(self):
        return self._dev

    def __dlpack__(self, stream=None):
        raise RuntimeError("fake")


def test_device_arrays_are_recognised_by_protocol():
    assert dev.where(np.zeros(3)) == "host"
    assert dev.where(FakeCAI((2, 5))) == "device"
    assert dev.where(FakeDLPack(dev.KDL_CUDA)) == "device"
    assert dev.where(FakeDLPack(dev.KDL_CPU)) == "host"
    assert dev.where([1, 2]) == "other"
    a = dev.describe(FakeCAI((3, 10), "<f2", device=1), "x")
    assert (a.shape, a.strides, a.dtype, a.device) == ((3, 10), (10, 1), "float16", 1)
    b = dev.describe(FakeCAI((3, 10), "<f4", strides=(64, 4)), "x")
    assert b.strides == (16, 1)


class FakeTorchBF16(FakeDLPack):
    """Like a PyTorch bfloat16 CUDA tensor: the CUDA array interface raises TypeError."""

    @property
    def __cuda_array_interface__(self):
        raise TypeError("Got unsupported ScalarType BFloat16")


class FakeTorchCPU(FakeDLPack):
    @property
    def __cuda_array_interface__(self):
        raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor")


def test_protocol_quirks_of_pytorch_tensors():
    assert dev.where(FakeTorchBF16(dev.KDL_CUDA)) == "device"
    assert dev.where(FakeTorchCPU(dev.KDL_CPU)) == "host"
    with pytest.raises(PyspecError, match="__dlpack__\\(\\) failed"):
        dev.describe(FakeTorchBF16(dev.KDL_CUDA), "target_logits")


@pytest.mark.skipif(not hasattr(np.ndarray, "__dlpack__"), reason="numpy without DLPack")
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_dlpack_capsules_are_read_correctly(dtype):
    # numpy exports host DLPack capsules: the same struct layout a CUDA tensor's has
    a = np.arange(40, dtype=dtype).reshape(5, 8)[1:, :6]
    d = dev._from_dlpack(a, "x")
    assert d.ptr == a.ctypes.data
    assert d.shape == (4, 6) and d.strides == (8, 1)
    assert d.dtype == {np.float32: "float32", np.float16: "float16", np.int32: "int32"}[dtype]


def _expect(match, fn, *args, **kwargs):
    with pytest.raises(PyspecError, match=match):
        fn(*args, **kwargs)


def test_device_logits_argument_errors_need_no_gpu():
    V = 10
    logits = FakeCAI((3, V), device=0)
    _expect(
        "must be float32, float16 or bfloat16, got float64",
        pyspec.verify,
        FakeCAI((3, V), "<f8"),
        [1, 2],
    )
    _expect("has 3 rows; it needs n_draft \\+ 1 = 2", pyspec.verify, logits, [1])
    _expect(
        "contiguous along the vocabulary axis",
        pyspec.verify,
        FakeCAI((3, V), strides=(8 * V, 8)),
        [1, 2],
    )
    _expect(
        "draft_probs is a host array but target_logits is on CUDA device 0",
        pyspec.verify,
        logits,
        [1, 2],
        np.full((2, V), 0.1, np.float32),
    )
    _expect(
        "draft_probs.tokens is a host array",
        pyspec.verify,
        logits,
        [1, 2],
        SparseDraftProbs(np.zeros((2, 2), np.int32), FakeCAI((2, 2))),
    )
    _expect(
        "draft_probs is on CUDA device 1 but target_logits is on device 0",
        pyspec.verify,
        logits,
        [1, 2],
        FakeCAI((2, V), device=1),
    )
    _expect(
        "draft_probs must be float32, got float16",
        pyspec.verify,
        logits,
        [1, 2],
        FakeCAI((2, V), "<f2"),
    )
    _expect("draft_tokens on the device must be int32", pyspec.verify, logits, FakeCAI((2,), "<i8"))
    _expect("outside \\[0, n_vocab = 10\\)", pyspec.verify, logits, [1, 12])
    host = np.zeros((3, V), np.float32)
    _expect(
        "requests\\[1\\].target_logits is a host array",
        pyspec.verify_batch,
        [VerifyRequest(logits, [1, 2]), VerifyRequest(host, [1, 2])],
    )
    _expect(
        "every request must share",
        pyspec.verify_batch,
        [VerifyRequest(logits, [1, 2]), VerifyRequest(FakeCAI((3, V), "<f2"), [1, 2])],
    )
    _expect("stream must be", pyspec.verify, logits, [1, 2], stream=object())


def test_arrays_on_another_device_are_a_cuda_error_not_a_dtype_error():
    # Every array of a call must be on target_logits' device; a mismatch is caught before
    # anything touches a device, and reported with the status the C back end gives a device
    # that cannot serve the call (it once raised the dtype status).
    V = 10
    logits = FakeCAI((3, V), device=0)
    cases = [
        ("draft_probs", dict(draft_tokens=[1, 2], draft_probs=FakeCAI((2, V), device=1))),
        (
            "draft_probs.tokens",
            dict(
                draft_tokens=[1, 2],
                draft_probs=SparseDraftProbs(
                    FakeCAI((2, 2), "<i4", device=1), FakeCAI((2, 2), device=0)
                ),
            ),
        ),
        ("draft_tokens", dict(draft_tokens=FakeCAI((2,), "<i4", device=1))),
        ("requests\\[1\\].target_logits", None),
    ]
    for name, kwargs in cases:
        with pytest.raises(
            PyspecError, match=f"{name} is on CUDA device 1 but target_logits is on device 0"
        ) as info:
            if kwargs is None:
                pyspec.verify_batch(
                    [
                        VerifyRequest(logits, [1, 2]),
                        VerifyRequest(FakeCAI((3, V), device=1), [1, 2]),
                    ]
                )
            else:
                pyspec.verify(logits, **kwargs)
        assert info.value.status == Status.CUDA != Status.DTYPE, name
    # The function itself, with the ArrayView it is given (a device index None is unknown,
    # so never a mismatch).
    a = dev.describe(FakeCAI((2, V), device=1), "x")
    with pytest.raises(PyspecError) as info:
        pyspec.cuda._same_device(a, 0, "x")
    assert info.value.status == Status.CUDA
    pyspec.cuda._same_device(a, 1, "x")
    pyspec.cuda._same_device(a, None, "x")


def test_host_arrays_in_a_device_call_are_a_cuda_error_not_a_dtype_error():
    V = 10
    logits = FakeCAI((3, V), device=0)
    calls = [
        (
            "draft_probs is a host array",
            lambda: pyspec.verify(logits, [1, 2], np.full((2, V), 0.1, np.float32)),
        ),
        (
            "draft_probs.tokens is a host array",
            lambda: pyspec.verify(
                logits, [1, 2], SparseDraftProbs(np.zeros((2, 2), np.int32), FakeCAI((2, 2)))
            ),
        ),
        (
            "requests\\[1\\].target_logits is a host array",
            lambda: pyspec.verify_batch(
                [VerifyRequest(logits, [1, 2]), VerifyRequest(np.zeros((3, V), np.float32), [1, 2])]
            ),
        ),
    ]
    for match, call in calls:
        with pytest.raises(PyspecError, match=match) as info:
            call()
        assert info.value.status == Status.CUDA, match
    with pytest.raises(PyspecError, match="is not a CUDA device array") as info:
        dev.describe(object(), "x")
    assert info.value.status == Status.CUDA
    pyspec.cuda._same_device(dev.describe(FakeCAI((2, V)), "y"), 0, "y")


def test_host_logits_with_device_draft_probs_is_a_clear_error():
    logits = np.zeros((3, 10), np.float32)
    _expect("draft_probs lives on a CUDA device", pyspec.verify, logits, [1, 2], FakeCAI((2, 10)))
    _expect("logits lives on a CUDA device", pyspec.sample, FakeCAI((10,)))


def test_well_formed_device_call_without_a_device_says_so():
    if pyspec.cuda_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(PyspecError) as info:
        pyspec.verify(FakeCAI((3, 10)), [1, 2])
    assert info.value.status == CUDA_STATUS
    assert ("no CUDA device" in str(info.value)) or ("built without CUDA" in str(info.value))


# ---- GPU ----------------------------------------------------------------------------------

gpu = pytest.mark.skipif(
    not pyspec.cuda_available(), reason="needs a CUDA device and a CUDA build of pyspec"
)


def _backend():
    try:
        import torch

        if torch.cuda.is_available():
            return "torch"
    except Exception:
        pass
    try:
        import cupy  # noqa: F401

        return "cupy"
    except Exception:
        return None


def to_device(arr: np.ndarray, dtype: str = None):
    """A device copy of a host array (float32 -> dtype: float32, float16 or bfloat16)."""
    kind = _backend()
    if kind is None:
        pytest.skip("needs PyTorch (CUDA) or CuPy to make device arrays")
    if kind == "torch":
        import torch

        t = torch.from_numpy(np.ascontiguousarray(arr)).cuda()
        if dtype:
            t = t.to(
                {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[
                    dtype
                ]
            )
        return t
    import cupy

    if dtype == "bfloat16":
        pytest.skip("bfloat16 device arrays need PyTorch")
    return cupy.asarray(arr.astype(dtype) if dtype else arr)


def host_copy(arr: np.ndarray, dtype: str):
    """What the device array holds, as the host array the CPU path reads."""
    if dtype == "float32":
        return arr.astype(np.float32)
    if dtype == "float16":
        return arr.astype(np.float16)
    # bfloat16: round-to-nearest-even of the float32 bits, read by the CPU via the pointer API
    bits = arr.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return bits


def cpu_verify(
    host, dtype, draft, probs, params, position, history=None, logprobs=False, top_probs=False
):
    if dtype == "bfloat16":
        return pyspec.verify_from_pointer(
            host.ctypes.data,
            host.shape[1],
            draft,
            probs,
            params,
            position,
            dtype="bfloat16",
            logprobs=logprobs,
            penalty_history=history,
            top_probs=top_probs,
        )
    return pyspec.verify(
        host,
        draft,
        probs,
        params,
        position,
        logprobs=logprobs,
        penalty_history=history,
        top_probs=top_probs,
    )


def lm_like_logits(rng, rows, V):
    """Heavy-tailed rows with a few dominant tokens, like a language model's."""
    x = rng.gumbel(size=(rows, V)).astype(np.float32) * 2.0
    for r in range(rows):
        top = rng.choice(V, size=5, replace=False)
        x[r, top] += rng.uniform(5, 15, size=5).astype(np.float32)
    return x


def _cpu_draws_in_token_order() -> bool:
    """Whether the CPU path follows the portable-draw rules (draws in token-id order over
    fixed-point weights, csrc/draw.h), which GPU identity in sampled modes needs. Tells by one
    draw: logits [0, 1, -inf] with top-k 2 and u < 0.2 give token 0 in id order (its share
    is 0.27) but token 1 in rank order."""
    logits = np.array([[0.0, 1.0, -np.inf]], np.float32)
    for pos in range(1000):
        if pyspec.uniform(0, pos, pyspec.Purpose.SAMPLE) < 0.2:
            params = SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0, seed=0)
            return int(pyspec.verify(logits, [], None, params, pos).tokens[0]) == 0
    return False


def test_the_cpu_path_draws_by_the_portable_rules():
    # GPU-vs-CPU identity in sampled modes rests on this (runs without a GPU).
    assert _cpu_draws_in_token_order()


PARAMS = [
    SamplingParams(seed=1),
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05, seed=2),
    SamplingParams(temperature=1.3, top_k=0, top_p=0.9, seed=3),
    SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.1, seed=4),
    SamplingParams(temperature=0.8, top_k=1, seed=5),
    SamplingParams(temperature=1.0, top_k=5, top_p=0.5, seed=6),
    SamplingParams(
        temperature=1.0,
        top_k=50,
        seed=7,
        penalty_last_n=64,
        repeat_penalty=1.3,
        frequency_penalty=0.2,
        presence_penalty=0.1,
    ),
    SamplingParams(
        temperature=0.9, top_k=0, top_p=0.8, seed=8, penalty_last_n=-1, repeat_penalty=1.1
    ),
    SamplingParams(temperature=1.1, top_k=1500, top_p=0.9, min_p=0.01, seed=9),  # no short list
]


def _draft_modes(rng, logits, k, V, mode):
    """(draft tokens, host q, device q) for a mode."""
    if mode == "point":
        return list(rng.integers(0, V, size=k)), None, None
    if mode == "self":  # drafts equal to the row argmax: mostly accepted
        return [int(np.argmax(logits[i])) for i in range(k)], None, None
    q = rng.dirichlet(np.full(V, 0.3), size=k).astype(np.float32)
    draft = [int(rng.choice(V, p=q[i] / q[i].sum())) for i in range(k)]
    if mode == "dense":
        return draft, q, to_device(q)
    m = 16
    picks = [rng.choice(V, size=m, replace=False) for _ in range(k)]
    toks = np.array(picks, np.int32).reshape(k, m)  # [0, m] when k = 0
    toks[:, 0] = draft
    vals = rng.dirichlet(np.ones(m), size=k).astype(np.float32)
    return draft, SparseDraftProbs(toks, vals), SparseDraftProbs(to_device(toks), to_device(vals))


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("mode", ["point", "self", "dense", "sparse"])
@pytest.mark.parametrize("params", PARAMS, ids=range(len(PARAMS)))
def test_gpu_tokens_equal_cpu_tokens(dtype, mode, params):
    rng = np.random.default_rng(zlib.crc32(f"{dtype}/{mode}/{params.seed}".encode()))
    V = 3000
    for trial in range(4):
        k = int(rng.integers(0, 6))
        logits = lm_like_logits(rng, k + 1, V)
        if trial == 3:  # ties: quantise hard
            logits = np.round(logits)
        host = host_copy(logits, dtype)
        device = to_device(logits, dtype)
        draft, q_host, q_dev = _draft_modes(rng, logits, k, V, mode)
        history = list(rng.integers(0, V, size=20))
        pos = int(rng.integers(0, 10**6))
        want = cpu_verify(host, dtype, draft, q_host, params, pos, history, True, True)
        got = pyspec.verify(
            device,
            draft,
            q_dev,
            params,
            pos,
            logprobs=True,
            penalty_history=history,
            top_probs=True,
        )
        _assert_same_as_cpu(got, want, V, trial)


def _assert_same_as_cpu(got, want, V: int, what) -> None:
    """The device's result is the CPU's: tokens exactly, logprobs and top probabilities to
    float rounding."""
    assert got.n_accepted == want.n_accepted, (what, got, want)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_allclose(got.logprobs, want.logprobs, rtol=1e-4, atol=1e-4)
    # The device sums every term; the CPU leaves out those 16 below the maximum, which
    # raises its value by at most V * exp(-16) of itself.
    over = V * np.exp(-float(lib.PYSPEC_TOP_PROB_SPAN))
    assert np.all(want.top_probs >= got.top_probs * (1 - 1e-4))
    assert np.all(want.top_probs <= got.top_probs * (1 + 1e-4 + over))


@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_ragged_batch_equals_cpu(dtype):
    rng = np.random.default_rng(7)
    V = 151936
    reqs_h, reqs_d = [], []
    for s in range(12):
        k = s % 5
        logits = lm_like_logits(rng, k + 1, V)
        params = PARAMS[s % len(PARAMS)]
        draft = [
            int(np.argmax(logits[i])) if rng.random() < 0.7 else int(rng.integers(V))
            for i in range(k)
        ]
        reqs_h.append((host_copy(logits, dtype), draft, params, 100 * s))
        reqs_d.append(VerifyRequest(to_device(logits, dtype), draft, None, params, 100 * s))
    got = pyspec.verify_batch(reqs_d)
    for g, (host, draft, params, pos) in zip(got, reqs_h):
        want = cpu_verify(host, dtype, draft, None, params, pos)
        assert g.n_accepted == want.n_accepted
        np.testing.assert_array_equal(g.tokens, want.tokens)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("mode", ["point", "dense", "sparse"])
def test_gpu_split_rows_give_the_cpu_tokens(monkeypatch, dtype, mode):
    """Split rows (PYSPEC_CUDA_SPLIT_ROWS=1): calls of a few rows over a real vocabulary
    size, so every row is scanned by several blocks; every parameter set, logprobs and top
    probabilities too."""
    monkeypatch.setenv("PYSPEC_CUDA_SPLIT_ROWS", "1")
    with pyspec.cuda.use_backend(pyspec.cuda.CudaBackend()) as split_backend:
        rng = np.random.default_rng(zlib.crc32(f"split/{dtype}/{mode}".encode()))
        V = 151936
        for params in PARAMS:
            k = int(rng.integers(0, 4))
            logits = lm_like_logits(rng, k + 1, V)
            draft, q_host, q_dev = _draft_modes(rng, logits, k, V, mode)
            history = list(rng.integers(0, V, size=20))
            want = cpu_verify(
                host_copy(logits, dtype), dtype, draft, q_host, params, 99, history, True, True
            )
            got = pyspec.verify(
                to_device(logits, dtype),
                draft,
                q_dev,
                params,
                99,
                logprobs=True,
                penalty_history=history,
                top_probs=True,
            )
            _assert_same_as_cpu(got, want, V, params)
        assert split_backend.existing_verifier(0).split_rows


@gpu
def test_gpu_real_logits_equal_cpu(request):
    from pyspec.cache import cache_dir
    from pyspec.testing.models import MODELS

    model_file = cache_dir() / "models" / MODELS["qwen2.5-coder-1.5b"].filename
    if not model_file.is_file():  # only this: any other failure of the fixture is a failure
        pytest.skip(f"{model_file} is not on this machine (a device machine has no network)")
    logits = request.getfixturevalue("qwen_logits")
    rng = np.random.default_rng(3)
    device = to_device(logits)
    for params in PARAMS:
        for _ in range(5):
            draft = [int(np.argmax(logits[i])) for i in range(8)]
            pos = int(rng.integers(10**6))
            want = pyspec.verify(logits, draft, None, params, pos, penalty_history=draft)
            got = pyspec.verify(device, draft, None, params, pos, penalty_history=draft)
            assert (got.n_accepted, list(got.tokens)) == (want.n_accepted, list(want.tokens))


def _softmax_target(logits, params):
    """float64 reference distribution after top-k / top-p / min-p / temperature."""
    x = logits.astype(np.float64)
    order = np.lexsort((np.arange(x.size), -x))
    keep = np.ones(x.size, bool)
    n = x.size
    if params.top_k > 0:
        n = min(n, params.top_k)
    e = np.exp(x[order] - x.max())
    if params.top_p < 1.0:
        cum = np.cumsum(e[:n])
        n = min(n, int(np.searchsorted(cum, params.top_p * cum[-1]) + 1))
    if params.min_p > 0:
        n = min(n, int(np.sum(x[order] >= x.max() + np.log(params.min_p))))
    keep[:] = False
    keep[order[:n]] = True
    w = np.where(keep, np.exp((x - x.max()) / params.temperature), 0.0)
    return w / w.sum()


def _chi2_ok(counts, p, n):
    from scipy import stats

    mask = p * n >= 5
    obs = np.append(counts[mask], counts[~mask].sum())
    exp = np.append(p[mask] * n, p[~mask].sum() * n)
    keep = exp > 0
    return stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue > 1e-4


@gpu
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.7, top_k=20),
        SamplingParams(temperature=1.0, top_k=0, top_p=0.8),
        SamplingParams(temperature=1.0, min_p=0.05),
    ],
)
def test_gpu_samples_follow_the_target(params):
    rng = np.random.default_rng(11)
    V, n = 64, 20000
    logits = rng.standard_normal((1, V)).astype(np.float32) * 2
    d = to_device(logits)
    reqs = [VerifyRequest(d, [], None, params, pos) for pos in range(n)]
    toks = np.array([r.tokens[0] for r in pyspec.verify_batch(reqs)])
    assert _chi2_ok(np.bincount(toks, minlength=V), _softmax_target(logits[0], params), n)


@gpu
def test_gpu_rejection_sampling_is_exact():
    rng = np.random.default_rng(12)
    V, n = 32, 20000
    logits = rng.standard_normal((2, V)).astype(np.float32)
    q = rng.dirichlet(np.ones(V)).astype(np.float32)
    d, dq = to_device(logits), to_device(q[None, :])
    params = SamplingParams(temperature=1.0)
    drafts = rng.choice(V, size=n, p=q / q.sum())
    reqs = [
        VerifyRequest(d, [int(x)], dq, SamplingParams(temperature=1.0, seed=s), 0)
        for s, x in enumerate(drafts)
    ]
    first = np.array([r.tokens[0] for r in pyspec.verify_batch(reqs)])
    assert _chi2_ok(np.bincount(first, minlength=V), _softmax_target(logits[0], params), n)


@gpu
def test_gpu_point_mass_drafts_of_its_own_samples_are_all_accepted():
    rng = np.random.default_rng(13)
    V, k = 5000, 7
    logits = lm_like_logits(rng, k + 1, V)
    d = to_device(logits)
    params = SamplingParams(temperature=0.9, top_k=100, seed=9)
    samples = [
        int(pyspec.verify(d[i : i + 1], [], None, params, 50 + i).tokens[0]) for i in range(k)
    ]
    r = pyspec.verify(d, samples, None, params, 50)
    assert r.n_accepted == k and list(r.tokens[:k]) == samples
    bad = samples[:3] + [(samples[3] + 1) % V] + samples[4:]
    r2 = pyspec.verify(d, bad, None, params, 50)
    assert r2.n_accepted == 3 and list(r2.tokens[:3]) == samples[:3]
    assert r2.tokens[3] == samples[3]  # the corrective token is row 3's own sample


@gpu
def test_gpu_errors_are_reported_after_the_stream():
    V = 100
    logits = np.zeros((3, V), np.float32)
    logits[1, 7] = np.nan
    with pytest.raises(pyspec.LogitsError, match="row 1 holds NaN at vocabulary index 7"):
        pyspec.verify(to_device(logits), [0, 1], None, SamplingParams.greedy_params())
    ok = np.zeros((3, V), np.float32)
    ok[0, 5] = 1.0  # greedy picks 5, the draft 0 is rejected at row 0: row 1's NaN is never read
    r = pyspec.verify(
        to_device(np.where(np.isnan(logits), 0, logits) + ok),
        [0, 1],
        None,
        SamplingParams.greedy_params(),
    )
    assert r.n_accepted == 0
    with pytest.raises(PyspecError, match="draft_tokens\\[1\\] = 150 is outside"):
        pyspec.verify(to_device(ok), to_device(np.array([0, 150], np.int32)), None)
    with pytest.raises(pyspec.LogitsError, match="no finite logit"):
        pyspec.verify(to_device(np.full((1, V), -np.inf, np.float32)), [])
    q = np.zeros((2, V), np.float32)
    q[0, 3] = 1.0
    with pytest.raises(pyspec.DraftProbsError, match="drafted token 4 probability 0"):
        pyspec.verify(to_device(ok), [4, 1], to_device(q))
    # the verifier works normally after an error
    r = pyspec.verify(to_device(ok), [5, 1], None, SamplingParams.greedy_params())
    assert r.n_accepted >= 1


# ---- the Python device path, with host memory posing as a device -------------------------
# Every pointer the device path builds is a plain address, so with host arrays dressed as
# CUDA arrays and the CUDA calls replaced by their CPU counterparts (pyspec_verify_batch on
# the same descriptors, memmove for copies), the whole Python side runs here: argument
# handling, uploads of host token lists, arena offsets, result extraction.


class HostAsDevice:
    """A numpy array presenting the CUDA array interface (device 0)."""

    def __init__(self, arr):
        self.arr = arr
        contiguous = arr.flags.c_contiguous
        self.__cuda_array_interface__ = {
            "shape": arr.shape,
            "typestr": arr.dtype.str,
            "data": (arr.ctypes.data, False),
            "strides": None if contiguous else arr.strides,
            "version": 3,
        }
        self.device = type("Dev", (), {"id": 0})()

    def __getitem__(self, item):
        return HostAsDevice(self.arr[item])


class _HostBuffer:
    def __init__(self, device, nbytes):
        self.device, self.nbytes = device, nbytes
        self.buf = np.zeros(nbytes, np.uint8)

    def address(self, offset=0):
        return self.buf.ctypes.data + offset


class _CpuBackedVerifier:
    """Stands in for a CudaVerifier: the descriptors the device path built are run by the
    CPU library (the arena is host memory)."""

    def __init__(self):
        self._arena = None
        self.status, self.message = 0, ""

    def arena(self, nbytes):
        if self._arena is None or self._arena.nbytes < nbytes:
            self._arena = _HostBuffer(0, max(nbytes, 1 << 16))
        return self._arena

    def enqueue(self, seqs, n_seqs, n_vocab, dtype, stream):
        cpu = lib.pyspec_verifier_create
        out = ffi.new("pyspec_verifier **")
        err = ffi.new("pyspec_error *")
        assert cpu(n_vocab, 1, out, err) == 0
        handle = ffi.gc(out[0], lib.pyspec_verifier_free)
        st = lib.pyspec_verify_batch(handle, seqs, n_seqs, n_vocab, dtype, 1, err)
        if st and not self.status:
            self.status, self.message = st, ffi.string(err.message).decode()

    def last_error(self, stream):
        st, self.status = self.status, 0
        pyspec.errors.raise_for_status(st, self.message)


class HostBackedBackend:
    """A pyspec.cuda back end whose "device" memory is host memory: the whole Python device
    path (checks, arena layout, uploads, descriptors, result copies) runs without a GPU."""

    def __init__(self):
        self.verifier_ = _CpuBackedVerifier()

    def require(self):
        pass

    def verifier(self, device, n_vocab, n_seqs, n_rows):
        return self.verifier_

    def existing_verifier(self, device):
        return self.verifier_

    def memcpy(self, device, dst, src, nbytes, kind, stream):
        ctypes.memmove(dst, src, nbytes)


@pytest.fixture
def host_as_device():
    with pyspec.cuda.use_backend(HostBackedBackend()) as backend:
        yield backend.verifier_


@pytest.mark.parametrize("mode", ["point", "dense", "sparse"])
def test_python_device_path_equals_host_path(host_as_device, mode):
    rng = np.random.default_rng(5)
    V = 500
    reqs_h, reqs_d = [], []
    for s in range(5):
        k = int(rng.integers(0, 5))
        logits = rng.standard_normal((k + 1, V)).astype(np.float32 if s % 2 else np.float16)
        draft = [int(x) for x in rng.integers(0, V, size=k)]
        probs_h = probs_d = None
        if mode == "dense" and k:
            probs_h = rng.dirichlet(np.ones(V), size=k).astype(np.float32)
            probs_h[np.arange(k), draft] += 0.1
            probs_h /= probs_h.sum(axis=1, keepdims=True)  # a draft row sums to 1 (checked)
            probs_d = HostAsDevice(probs_h)
        elif mode == "sparse" and k:
            toks = rng.integers(0, V, size=(k, 6)).astype(np.int32)
            toks[:, 0] = draft
            vals = rng.dirichlet(np.ones(6), size=k).astype(np.float32)
            probs_h = SparseDraftProbs(toks, vals)
            probs_d = SparseDraftProbs(HostAsDevice(toks), HostAsDevice(vals))
        params = PARAMS[s % len(PARAMS)]
        history = [int(x) for x in rng.integers(0, V, size=30)]
        dev_draft = HostAsDevice(np.array(draft, np.int32)) if s == 3 else draft
        reqs_h.append(VerifyRequest(logits, draft, probs_h, params, 7 * s, history))
        reqs_d.append(
            VerifyRequest(HostAsDevice(logits), dev_draft, probs_d, params, 7 * s, history)
        )
    if mode == "point":  # all logits must share a dtype in one call
        reqs_h = [r for i, r in enumerate(reqs_h) if i % 2]
        reqs_d = [r for i, r in enumerate(reqs_d) if i % 2]
        want = pyspec.verify_batch(reqs_h, logprobs=True, top_probs=True)
        got = pyspec.verify_batch(reqs_d, logprobs=True, top_probs=True)
    else:
        want = [pyspec.verify_batch([r], logprobs=True, top_probs=True)[0] for r in reqs_h]
        got = [pyspec.verify_batch([r], logprobs=True, top_probs=True)[0] for r in reqs_d]
    for g, w in zip(got, want):
        assert g.n_accepted == w.n_accepted
        np.testing.assert_array_equal(g.tokens, w.tokens)
        np.testing.assert_array_equal(g.logprobs, w.logprobs)
        np.testing.assert_array_equal(g.top_probs, w.top_probs)  # the arena's own slot
    # one sequence through pyspec.verify, a strided view of the logits
    big = rng.standard_normal((3, V + 7)).astype(np.float32)
    w = pyspec.verify(big[:, :V], [1, 2], None, PARAMS[2], 3)
    g = pyspec.verify(HostAsDevice(big[:, :V]), [1, 2], None, PARAMS[2], 3)
    assert (g.n_accepted, list(g.tokens)) == (w.n_accepted, list(w.tokens))
    assert host_as_device._arena is not None  # the device path ran


def test_python_device_path_reports_device_errors(host_as_device):
    logits = np.zeros((3, 50), np.float32)
    logits[2, 9] = np.nan
    with pytest.raises(pyspec.LogitsError, match="row 2 holds NaN at vocabulary index 9"):
        pyspec.verify(HostAsDevice(logits), [0, 0], None, SamplingParams.greedy_params())
    r = pyspec.verify(
        HostAsDevice(np.zeros((2, 50), np.float32)), [0], None, SamplingParams.greedy_params()
    )
    assert r.n_accepted == 1


def test_raw_device_pointer_entry_point(host_as_device):
    rng = np.random.default_rng(9)
    V, k = 300, 3
    logits = rng.standard_normal((k + 1, V)).astype(np.float32)
    draft = np.array([int(np.argmax(logits[i])) for i in range(k)], np.int32)
    out = np.full(k + 1, -1, np.int32)
    n = np.zeros(1, np.int64)
    params = SamplingParams.greedy_params()
    pyspec.cuda.verify_from_device_pointer(
        logits.ctypes.data,
        V,
        draft.ctypes.data,
        k,
        out_tokens_address=out.ctypes.data,
        out_n_accepted_address=n.ctypes.data,
        params=params,
    )
    want = pyspec.verify(logits, list(draft), None, params)
    assert n[0] == want.n_accepted == k and list(out) == list(want.tokens)


def _bad_calls():
    """(what, arguments of pyspec.verify) for calls that are wrong in one way each."""
    rng = np.random.default_rng(3)
    V = 64
    logits = rng.standard_normal((3, V)).astype(np.float32)
    q = np.full((2, V), 1.0 / V, np.float32)
    greedy = SamplingParams.greedy_params()
    return [
        ("row count", (logits, [1], None, greedy, 0)),
        ("logits dtype", (logits.astype(np.float64), [1, 2], None, greedy, 0)),
        ("logits rank", (logits[None], [1, 2], None, greedy, 0)),
        ("vocabulary stride", (np.repeat(logits, 2, axis=1)[:, ::2], [1, 2], None, greedy, 0)),
        ("draft rank", (logits, np.array([[1, 2]], np.int32), None, greedy, 0)),
        ("dense shape", (logits, [1, 2], q[:1], SamplingParams(seed=1), 0)),
        ("dense dtype", (logits, [1, 2], q.astype(np.float64), SamplingParams(seed=1), 0)),
        (
            "sparse shapes",
            (
                logits,
                [1, 2],
                SparseDraftProbs(np.zeros((2, 3), np.int32), np.zeros((2, 4), np.float32)),
                SamplingParams(seed=1),
                0,
            ),
        ),
        (
            "sparse dtypes",
            (
                logits,
                [1, 2],
                SparseDraftProbs(np.zeros((2, 3), np.int32), np.zeros((2, 3), np.float64)),
                SamplingParams(seed=1),
                0,
            ),
        ),
        ("params type", (logits, [1, 2], None, {"temperature": 1.0}, 0)),
        ("position range", (logits, [1, 2], None, greedy, -1)),
        ("position type", (logits, [1, 2], None, greedy, 1.5)),
    ]


def _on_device(value):
    if isinstance(value, np.ndarray):
        return HostAsDevice(value)
    if isinstance(value, SparseDraftProbs):
        return SparseDraftProbs(HostAsDevice(value.tokens), HostAsDevice(value.probs))
    return value


@pytest.mark.parametrize("what, args", _bad_calls(), ids=[c[0] for c in _bad_calls()])
def test_host_and_device_paths_reject_a_bad_call_alike(host_as_device, what, args):
    """One layer of checks (pyspec.checks) serves both back ends: the same wrong call gets
    the same exception, status and message whether its arrays are on the host or a device."""
    logits, draft, probs, params, position = args
    with pytest.raises(PyspecError) as on_host:
        pyspec.verify(logits, draft, probs, params, position)
    with pytest.raises(PyspecError) as on_device:
        pyspec.verify(_on_device(logits), _on_device(draft), _on_device(probs), params, position)
    assert type(on_device.value) is type(on_host.value)
    assert on_device.value.status == on_host.value.status
    assert str(on_device.value) == str(on_host.value)


def test_host_and_device_batches_reject_mixed_vocabularies_alike(host_as_device):
    a = np.zeros((1, 50), np.float32)
    b = np.zeros((1, 60), np.float32)
    errors = []
    for wrap in (lambda x: x, HostAsDevice):
        with pytest.raises(PyspecError, match="must share requests\\[0\\]'s vocabulary") as info:
            pyspec.verify_batch([VerifyRequest(wrap(a), []), VerifyRequest(wrap(b), [])])
        errors.append((info.value.status, str(info.value)))
    assert errors[0] == errors[1]
