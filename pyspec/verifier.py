"""The fused verifier: ``verify``, ``verify_batch``, ``verify_from_pointer``, ``sample``.

All of them end in one C call, ``pyspec_verify_batch`` (or ``pyspec_sample``), that reads
the logits where they lie: no copy, no up-cast, no probability tensor.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import numpy as np

from . import _arrays, _device_arrays
from ._abi import Status
from ._ffi import ffi, lib
from .errors import DraftProbsError, PyspecError, raise_for_status
from .params import SamplingParams

DEFAULT_PARAMS = SamplingParams()


THREADS_ENV = "PYSPEC_NUM_THREADS"


def max_threads() -> int:
    """The most worker threads a call may use: the machine's cores. More would only add
    OS threads (and their stacks) that wait for a core."""
    return max(1, os.cpu_count() or 1)


def check_threads(n_threads, name: str = "n_threads") -> int:
    """``n_threads`` as an int in [1, max_threads()], or a PyspecError naming ``name``."""
    limit = max_threads()
    if isinstance(n_threads, bool) or not isinstance(n_threads, (int, np.integer)):
        raise PyspecError(f"{name} must be an int in [1, {limit}], got {n_threads!r}", Status.SHAPE)
    if not 1 <= n_threads <= limit:
        raise PyspecError(f"{name} must be in [1, {limit}] (this machine has {limit} cores), "
                          f"got {n_threads}", Status.SHAPE)
    return int(n_threads)


def default_threads() -> int:
    """Worker threads per call: ``PYSPEC_NUM_THREADS`` or the machine's cores (at most 8)."""
    env = os.environ.get(THREADS_ENV)
    if env is not None and env.strip():
        try:
            value = int(env.strip())
        except ValueError:
            raise PyspecError(f"{THREADS_ENV}={env!r} is not an integer: set it to a thread "
                              f"count in [1, {max_threads()}] or unset it", Status.SHAPE) from None
        return check_threads(value, THREADS_ENV)
    return max(1, min(8, max_threads()))


class _Verifiers(threading.local):
    """One C verifier (its scratch) per Python thread, grown when a call needs more."""

    def __init__(self):
        self.err = ffi.new("pyspec_error *")
        self.handle = None
        self.vocab = 0
        self.threads = 0

    def get(self, n_vocab: int, n_threads: int):
        if self.handle is None or n_vocab > self.vocab or n_threads > self.threads:
            vocab, threads = max(n_vocab, self.vocab), max(n_threads, self.threads)
            out = ffi.new("pyspec_verifier **")
            err = ffi.new("pyspec_error *")
            raise_for_status(lib.pyspec_verifier_create(vocab, threads, out, err),
                             ffi.string(err.message).decode())
            self.handle = ffi.gc(out[0], lib.pyspec_verifier_free)
            self.vocab, self.threads = vocab, threads
        return self.handle


_VERIFIERS = _Verifiers()
_DEFAULT_THREADS = default_threads()


def _check(status: int, err) -> None:
    if status:
        raise_for_status(status, ffi.string(err.message).decode())


@dataclass
class SparseDraftProbs:
    """Draft distributions given as (token, probability) pairs, one row per draft.

    ``tokens`` and ``probs`` are ``[n_draft, m]`` (int32 / float32); a token a row does not
    list has probability 0; pad rows with probability 0.
    """

    tokens: np.ndarray
    probs: np.ndarray


DraftProbs = Union[None, np.ndarray, SparseDraftProbs]


@dataclass
class VerifyResult:
    """Outcome of verifying one sequence.

    ``tokens`` holds the ``n_accepted`` accepted drafts followed by exactly one corrective or
    bonus token; ``logprobs`` (when requested) the log-probability of each under the raw
    target distribution (log-softmax of the untransformed logits).
    """

    n_accepted: int
    tokens: np.ndarray
    logprobs: Optional[np.ndarray] = None


@dataclass
class VerifyRequest:
    """One sequence of a ``verify_batch`` call (see ``verify`` for the fields)."""

    target_logits: np.ndarray
    draft_tokens: Sequence[int]
    draft_probs: DraftProbs = None
    params: SamplingParams = field(default_factory=SamplingParams)
    position: int = 0
    penalty_history: Optional[Sequence[int]] = None


_VOID_P = ffi.typeof("void *")
_NO_HISTORY = (None, 0, None)


def _penalty_history(params: SamplingParams, history, n_vocab: int):
    """(int32 cdata, length, owner) of the tokens the penalties look back on; only the last
    ``penalty_last_n`` are passed (all when it is -1)."""
    if history is None or not params.penalties_on:
        return _NO_HISTORY
    if params.penalty_last_n > 0:
        history = history[-params.penalty_last_n:]
    n, c_tokens, owner = _c_token_ids(history, "penalty_history", n_vocab)
    return (c_tokens, n, owner) if n else _NO_HISTORY
_INT32_P = ffi.typeof("int32_t *")
_FLOAT_P = ffi.typeof("float *")


def _n_draft(tokens, name: str) -> int:
    """How many draft ids a 1-D list or array holds (anything else is an error)."""
    if isinstance(tokens, np.ndarray):
        if tokens.ndim != 1:
            raise _arrays.shape_error(f"{name} must be 1-D, got shape {tokens.shape}")
        return tokens.size
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__"):
        raise PyspecError(f"{name} must be a 1-D sequence of token ids (a list or an int "
                          f"array), got {type(tokens).__name__} {tokens!r:.60}", Status.SHAPE)
    return len(tokens)


def _c_token_ids(tokens, name: str, n_vocab: int):
    """int32 cdata for a list or array of token ids (range-checked by the C library, which
    names the index; here only values that would wrap in 32 bits are caught)."""
    if isinstance(tokens, np.ndarray):
        if tokens.ndim != 1:
            raise _arrays.shape_error(f"{name} must be 1-D, got shape {tokens.shape}")
        if tokens.size and not np.issubdtype(tokens.dtype, np.integer):
            raise PyspecError(f"{name} must hold integer token ids, got {tokens.dtype}", Status.DTYPE)
        if tokens.dtype != np.int32 or not tokens.flags.c_contiguous:
            tokens = _arrays.token_ids(tokens, name, n_vocab)
        return tokens.size, ffi.from_buffer("int32_t[]", tokens), tokens
    _n_draft(tokens, name)  # a clear error for ints, strings and other non-sequences
    try:
        values = list(tokens)
        return len(values), ffi.new("int32_t[]", values), None
    except (OverflowError, TypeError):
        arr = _arrays.token_ids(tokens, name, n_vocab)  # raises with the index
        return arr.size, ffi.from_buffer("int32_t[]", arr), arr


DRAFT_SUM_TOLERANCE = 1e-3  # as the C library's check of sparse rows


def check_dense_rows_sum_to_one(q: np.ndarray) -> None:
    """Each dense draft row must be a distribution: entries in [0, 1] summing to 1 within
    DRAFT_SUM_TOLERANCE. The C library reads a dense row at a few entries only (it never
    streams it), so it cannot tell; q that is not a distribution biases rejection sampling
    without any error. One numpy pass over the k rows."""
    sums = q.sum(axis=1, dtype=np.float64)
    bad = np.flatnonzero(~(np.abs(sums - 1.0) <= DRAFT_SUM_TOLERANCE))
    if bad.size:
        i = int(bad[0])
        raise DraftProbsError(f"draft_probs row {i} sums to {sums[i]:.6g}; a draft distribution "
                              f"must sum to 1 (within {DRAFT_SUM_TOLERANCE}); pass "
                              f"check_draft_probs=False to skip this check")
    low, high = q.min(initial=0.0), q.max(initial=0.0)
    if low < 0.0 or high > 1.0:
        raise DraftProbsError(f"draft_probs holds {low if low < 0 else high:g}; probabilities "
                              f"must be in [0, 1]")


_POINTER_BITS = 8 * ffi.sizeof("void *")


def _check_address(address, name: str) -> int:
    """A raw host address as an int: non-null and within a pointer (ffi.cast would silently
    keep only the low bits of a larger int)."""
    if (isinstance(address, bool) or not isinstance(address, (int, np.integer))
            or not 0 < address < 2**_POINTER_BITS):
        raise PyspecError(f"{name} must be a non-null address that fits in a pointer "
                          f"({_POINTER_BITS} bits), got {address!r}", Status.NULL)
    return int(address)


def _check_n_vocab(n_vocab, name: str) -> int:
    if isinstance(n_vocab, bool) or not isinstance(n_vocab, (int, np.integer)) or not 1 <= n_vocab < 2**31:
        raise _arrays.shape_error(f"{name} must be an int in [1, 2**31), got {n_vocab!r}")
    return int(n_vocab)


def check_position(position, n_draft: int = 0) -> int:
    """The absolute position of row 0 as an int; rows 0..n_draft must all fit in 63 bits."""
    if isinstance(position, bool) or not isinstance(position, (int, np.integer)):
        raise PyspecError(f"position must be an int, got {type(position).__name__} {position!r}",
                          Status.SHAPE)
    limit = 2**63 - 1 - n_draft
    if not 0 <= position <= limit:
        raise PyspecError(f"position must be in [0, 2**63 - 1 - n_draft] = [0, {limit}] (the "
                          f"last row's position must fit in 63 bits), got {position}", Status.SHAPE)
    return int(position)


class _Call:
    """Builds the C structs of one call and keeps every buffer alive until it returns."""

    def __init__(self, n_seqs: int, want_logprobs: bool, check_draft_probs: bool = True):
        self.check_draft_probs = check_draft_probs
        self.seqs = ffi.new("pyspec_sequence[]", max(n_seqs, 1))
        self.keep = []
        self.outputs = []
        self.want_logprobs = want_logprobs

    def add(self, i: int, logits_ptr, row_stride: int, n_vocab: int, draft_tokens,
            draft_probs: DraftProbs, params: SamplingParams, position: int,
            penalty_history=None):
        if type(params) is not SamplingParams and not isinstance(params, SamplingParams):
            raise PyspecError(f"params must be a pyspec.SamplingParams, got {type(params).__name__}",
                              Status.PARAM)
        n_draft, c_tokens, owner = _c_token_ids(draft_tokens, "draft_tokens", n_vocab)
        position = check_position(position, n_draft)
        seq = self.seqs[i]
        seq.target_logits = logits_ptr
        seq.logits_row_stride = row_stride
        seq.draft_tokens = c_tokens if n_draft else ffi.NULL
        seq.n_draft = n_draft
        seq.position = int(position)
        hist = _penalty_history(params, penalty_history, n_vocab)
        params.fill(seq.params, *hist[:2])
        self.keep.append(hist)
        seq.draft_probs = self._draft_probs(draft_probs, n_draft, n_vocab) if draft_probs is not None else ffi.NULL
        out_tokens = ffi.new("int32_t[]", n_draft + 1)
        out_n = ffi.new("int64_t *")
        out_lp = ffi.new("float[]", n_draft + 1) if self.want_logprobs else None
        seq.out_tokens = out_tokens
        seq.out_n_accepted = out_n
        seq.out_logprobs = out_lp if out_lp is not None else ffi.NULL
        self.keep += [c_tokens, owner]
        self.outputs.append((out_n, out_tokens, out_lp))

    def _draft_probs(self, probs: DraftProbs, n_draft: int, n_vocab: int):
        dp = ffi.new("pyspec_draft_probs *")
        self.keep.append(dp)
        if isinstance(probs, SparseDraftProbs):
            toks = np.asarray(probs.tokens)
            vals = np.asarray(probs.probs)
            if toks.shape != vals.shape or toks.ndim != 2 or toks.shape[0] != n_draft:
                raise _arrays.shape_error(
                    f"sparse draft_probs must be two [n_draft = {n_draft}, m] arrays, got "
                    f"tokens {toks.shape} and probs {vals.shape}")
            if vals.dtype != np.float32:
                raise PyspecError(f"draft_probs.probs must be float32, got {vals.dtype}", Status.DTYPE)
            toks = _arrays.token_ids(toks.ravel(), "draft_probs.tokens", n_vocab).reshape(toks.shape)
            vals = np.ascontiguousarray(vals)
            self.keep += [toks, vals]
            dp.tokens = ffi.cast(_INT32_P, _arrays.address(toks))
            dp.probs = ffi.cast(_FLOAT_P, _arrays.address(vals))
            dp.row_stride = toks.shape[1]
            dp.n_per_row = toks.shape[1]
            return dp
        arr = _arrays.as_array(probs, "draft_probs")
        if arr.dtype != np.float32:
            raise PyspecError(f"draft_probs must be float32, got {arr.dtype}", Status.DTYPE)
        if arr.ndim != 2 or arr.shape != (n_draft, n_vocab):
            raise _arrays.shape_error(
                f"draft_probs must have shape [n_draft, n_vocab] = [{n_draft}, {n_vocab}], "
                f"got {arr.shape}")
        if (n_vocab > 1 and arr.strides[1] != 4) or (n_draft > 1 and arr.strides[0] % 4):
            raise _arrays.shape_error("draft_probs rows must be contiguous float32 "
                                      f"(strides {arr.strides})")
        if self.check_draft_probs:
            check_dense_rows_sum_to_one(arr)
        self.keep.append(arr)
        dp.probs = ffi.cast(_FLOAT_P, _arrays.address(arr))
        dp.tokens = ffi.NULL
        dp.row_stride = arr.strides[0] // 4 if n_draft > 1 else n_vocab
        dp.n_per_row = 0
        return dp

    def run(self, n_seqs: int, n_vocab: int, dtype: int, n_threads: Optional[int]):
        n_threads = _DEFAULT_THREADS if n_threads is None else check_threads(n_threads)
        state = _VERIFIERS
        verifier = state.get(n_vocab, n_threads)
        err = state.err
        _check(lib.pyspec_verify_batch(verifier, self.seqs, n_seqs, n_vocab, dtype, n_threads, err), err)
        results = []
        for out_n, out_tokens, out_lp in self.outputs:
            n = out_n[0]
            tokens = np.frombuffer(ffi.buffer(out_tokens, 4 * (n + 1)), dtype=np.int32).copy()
            lp = None
            if out_lp is not None:
                lp = np.frombuffer(ffi.buffer(out_lp, 4 * (n + 1)), dtype=np.float32).copy()
            results.append(VerifyResult(n, tokens, lp))
        return results


def verify(target_logits, draft_tokens, draft_probs: DraftProbs = None,
           params: SamplingParams = DEFAULT_PARAMS, position: int = 0, *,
           logprobs: bool = False, n_threads: Optional[int] = None,
           penalty_history=None, stream=None, check_draft_probs: bool = True) -> VerifyResult:
    """Verifies the drafts of one sequence against the target's logits, in one fused pass.

    Parameters
    ----------
    target_logits : ndarray, float32 or float16, shape ``[n_draft + 1, n_vocab]``, host
        Row ``i`` predicts absolute position ``position + i``. Read in place: rows may be a
        strided view (for example of llama.cpp's logits buffer) but each row must be
        contiguous. A CUDA array (PyTorch tensor, CuPy array: float32, float16 or bfloat16)
        is verified on its device by the CUDA back end (``pyspec.cuda``); draft_probs must
        then be on the same device, and results still come back as host arrays.
    draft_tokens : sequence of int, length ``n_draft``
        The drafted token ids, each in ``[0, n_vocab)``.
    draft_probs : None, ndarray float32 ``[n_draft, n_vocab]``, or SparseDraftProbs
        ``None`` for point-mass drafts (n-gram lookup, greedy drafters): the emitted tokens
        are then exactly what ``sample(target_logits[i], params, position + i)`` returns, and
        ``n_accepted`` is the first row where that sample differs from the draft. Otherwise the
        distributions the drafts were drawn from: modified rejection sampling (accept with
        probability ``min(1, p/q)``, else draw from ``norm(max(0, p - q))``; Leviathan et al.
        2023). Only the entries needed are read.
    params : SamplingParams
        The target's sampling transforms and seed.
    position : int
        Absolute position of row 0 (the key of its random draws).
    logprobs : bool
        Also return each emitted token's log-probability under the raw target distribution
        (one extra pass per emitted row).
    n_threads : int, optional
        Worker threads (default ``default_threads()``). The result never depends on it.
    penalty_history : sequence of int, optional
        Tokens generated before row 0 (what llama.cpp's penalties sampler has accepted),
        when ``params`` has penalties on; row i's window also holds drafts ``0..i-1``.
    stream : optional
        Device logits only: the CUDA stream to run on (``None``: the legacy default
        stream; an int ``cudaStream_t``; a PyTorch or CuPy stream object).
    check_draft_probs : bool
        Check that each dense draft row sums to 1 (within 1e-3) with entries in [0, 1]: one
        numpy pass over the ``k`` rows (host arrays only). Sparse rows are always checked by
        the C library. Turn it off only for rows you know are normalised.

    Returns
    -------
    VerifyResult
        ``n_accepted`` and ``tokens`` (int32, ``len == n_accepted + 1``).

    Examples
    --------
    >>> import numpy as np, pyspec
    >>> logits = np.random.default_rng(0).standard_normal((3, 1000)).astype(np.float32)
    >>> r = pyspec.verify(logits, [5, 7], params=pyspec.SamplingParams(seed=1))
    >>> len(r.tokens) == r.n_accepted + 1
    True
    """
    if _device_arrays.is_device_array(target_logits):  # the CUDA back end (pyspec.cuda)
        from . import cuda  # noqa: PLC0415

        return cuda.verify(target_logits, draft_tokens, draft_probs, params, position,
                           logprobs=logprobs, penalty_history=penalty_history, stream=stream)
    n_draft = _n_draft(draft_tokens, "draft_tokens")
    arr, dtype, stride = _arrays.logits_rows(target_logits, "target_logits", n_draft + 1)
    call = _Call(1, logprobs, check_draft_probs)
    call.add(0, ffi.cast(_VOID_P, _arrays.address(arr)), stride, arr.shape[1], draft_tokens,
             draft_probs, params, position, penalty_history)
    call.keep.append(arr)
    return call.run(1, arr.shape[1], dtype, n_threads)[0]


def verify_batch(requests: Sequence[VerifyRequest], *, logprobs: bool = False,
                 n_threads: Optional[int] = None, stream=None,
                 check_draft_probs: bool = True) -> list:
    """Verifies many sequences in one call: ragged draft counts, per-sequence params and
    positions. All logits must share one dtype and vocabulary size. Returns a list of
    ``VerifyResult``, identical to calling ``verify`` on each request. Requests whose logits
    are CUDA arrays run on the GPU (``pyspec.cuda.verify_batch``; all of them on one device)."""
    if isinstance(requests, (str, bytes)) or not hasattr(requests, "__len__"):
        raise PyspecError(f"requests must be a list of pyspec.VerifyRequest, got {type(requests).__name__}",
                          Status.SHAPE)
    if not requests:
        return []
    if any(isinstance(r, VerifyRequest) and _device_arrays.is_device_array(r.target_logits)
           for r in requests):
        from . import cuda  # noqa: PLC0415

        return cuda.verify_batch(requests, logprobs=logprobs, stream=stream)
    call = _Call(len(requests), logprobs, check_draft_probs)
    n_vocab = dtype = None
    for i, req in enumerate(requests):
        if not isinstance(req, VerifyRequest):
            raise PyspecError(f"requests[{i}] must be a pyspec.VerifyRequest, got {type(req).__name__}",
                              Status.SHAPE)
        n_draft = _n_draft(req.draft_tokens, f"requests[{i}].draft_tokens")
        arr, code, stride = _arrays.logits_rows(req.target_logits, f"requests[{i}].target_logits", n_draft + 1)
        if n_vocab is None:
            n_vocab, dtype = arr.shape[1], code
        elif arr.shape[1] != n_vocab or code != dtype:
            raise _arrays.shape_error(
                f"requests[{i}].target_logits is [{arr.shape[1]}] {arr.dtype}; every request "
                f"must share requests[0]'s vocabulary ({n_vocab}) and dtype")
        call.keep.append(arr)
        call.add(i, ffi.cast(_VOID_P, _arrays.address(arr)), stride, n_vocab, req.draft_tokens,
                 req.draft_probs, req.params, req.position, req.penalty_history)
    return call.run(len(requests), n_vocab, dtype, n_threads)


def verify_from_pointer(logits_address: int, n_vocab: int, draft_tokens,
                        draft_probs: DraftProbs = None, params: SamplingParams = DEFAULT_PARAMS,
                        position: int = 0, *, row_stride: Optional[int] = None,
                        dtype: str = "float32", logprobs: bool = False,
                        n_threads: Optional[int] = None, penalty_history=None,
                        check_draft_probs: bool = True) -> VerifyResult:
    """``verify`` on logits given as a raw host address (llama.cpp's logits buffer).

    ``logits_address`` points at row 0 of ``len(draft_tokens) + 1`` rows of ``n_vocab``
    elements of ``dtype`` ("float32", "float16" or "bfloat16"), rows ``row_stride`` elements
    apart (default ``n_vocab``). Nothing is copied; the caller keeps the buffer alive.
    ``check_draft_probs`` as in ``verify``.
    """
    logits_address = _check_address(logits_address, "logits_address")
    code = _arrays.dtype_code(dtype)
    n_vocab = _check_n_vocab(n_vocab, "n_vocab")
    if row_stride is not None and (isinstance(row_stride, bool)
                                   or not isinstance(row_stride, (int, np.integer))
                                   or not n_vocab <= row_stride < 2**62):
        raise _arrays.shape_error(f"row_stride must be an int >= n_vocab ({n_vocab}), got {row_stride!r}")
    stride = n_vocab if row_stride is None else int(row_stride)
    call = _Call(1, logprobs, check_draft_probs)
    call.add(0, ffi.cast(_VOID_P, logits_address), stride, n_vocab, draft_tokens, draft_probs,
             params, position, penalty_history)
    return call.run(1, n_vocab, code, n_threads)[0]


@dataclass(frozen=True)
class LogitsPointer:
    """One row of logits given by address (for example ``llama_get_logits_ith``): read in
    place, never copied. The caller keeps the buffer alive during the call."""

    address: int
    n_vocab: int
    dtype: str = "float32"


def _single_row(logits, params, penalty_history=None):
    """(void pointer, n_vocab, dtype code, keep-alive, c params) for one row."""
    if not isinstance(params, SamplingParams):
        raise PyspecError(f"params must be a pyspec.SamplingParams, got {type(params).__name__}",
                          Status.PARAM)
    c_params = ffi.new("pyspec_sampling_params *")
    if isinstance(logits, LogitsPointer):
        code = _arrays.dtype_code(logits.dtype)
        address = _check_address(logits.address, "LogitsPointer.address")
        n_vocab = _check_n_vocab(logits.n_vocab, "LogitsPointer.n_vocab")
        ptr, keep = ffi.cast(_VOID_P, address), None
    else:
        arr, code, _ = _arrays.logits_rows(logits, "logits", 1)
        ptr, n_vocab, keep = ffi.cast(_VOID_P, _arrays.address(arr)), arr.shape[1], arr
    hist = _penalty_history(params, penalty_history, n_vocab)
    params.fill(c_params, *hist[:2])
    return ptr, n_vocab, code, (keep, hist), c_params


def sample(logits, params: SamplingParams = DEFAULT_PARAMS, position: int = 0, *,
           penalty_history=None) -> int:
    """Draws one token from one row of logits (``[n_vocab]`` float32/float16, or a
    ``LogitsPointer``) at absolute ``position``. A point-mass ``verify`` emits exactly this
    token at that position."""
    ptr, n_vocab, dtype, _keep, c_params = _single_row(logits, params, penalty_history)
    position = check_position(position)
    out = ffi.new("int32_t *")
    err = _VERIFIERS.err
    verifier = _VERIFIERS.get(n_vocab, 1)
    _check(lib.pyspec_sample(verifier, ptr, n_vocab, dtype, c_params, int(position), out,
                             ffi.NULL, err), err)
    return int(out[0])


def distribution(logits, params: SamplingParams = DEFAULT_PARAMS, *,
                 penalty_history=None) -> np.ndarray:
    """The distribution ``sample`` draws from (after penalties, top-k, top-p, min-p and
    temperature), as a dense float32 ``[n_vocab]`` array."""
    ptr, n_vocab, dtype, _keep, c_params = _single_row(logits, params, penalty_history)
    out = np.empty(n_vocab, dtype=np.float32)
    err = _VERIFIERS.err
    verifier = _VERIFIERS.get(n_vocab, 1)
    _check(lib.pyspec_distribution(verifier, ptr, n_vocab, dtype, c_params,
                                   ffi.cast(_FLOAT_P, _arrays.address(out)), err), err)
    return out


def distribution_sparse(logits, params: SamplingParams = DEFAULT_PARAMS, *,
                        penalty_history=None):
    """The same distribution as ``(tokens int32, probs float32)`` over its kept set only,
    most likely first when top-k is on. What a drafter passes as ``SparseDraftProbs`` rows;
    no vocabulary-wide output is written."""
    ptr, n_vocab, dtype, _keep, c_params = _single_row(logits, params, penalty_history)
    # The kept set can never exceed what the transforms allow.
    if params.greedy:
        capacity = 1
    elif 0 < params.top_k < n_vocab:
        capacity = params.top_k
    else:
        capacity = n_vocab
    tokens = np.empty(capacity, dtype=np.int32)
    probs = np.empty(capacity, dtype=np.float32)
    n = ffi.new("int64_t *")
    err = _VERIFIERS.err
    verifier = _VERIFIERS.get(n_vocab, 1)
    _check(lib.pyspec_distribution_sparse(verifier, ptr, n_vocab, dtype, c_params,
                                          ffi.cast(_INT32_P, _arrays.address(tokens)),
                                          ffi.cast(_FLOAT_P, _arrays.address(probs)),
                                          capacity, n, err), err)
    return tokens[: n[0]], probs[: n[0]]
