"""The fused verifier on the CPU: ``verify``, ``verify_batch``, ``verify_from_pointer``,
``sample``, ``distribution``.

All of them end in one C call, ``pyspec_verify_batch`` (or ``pyspec_sample``), that reads
the logits where they lie: no copy, no up-cast, no probability tensor. Arguments are checked
by ``pyspec.checks``, the layer the CUDA back end (``pyspec.cuda``) shares; calls whose
logits are CUDA arrays are handed to it.
"""

from __future__ import annotations

import os
import threading
from typing import Optional, Sequence

import numpy as np

from pyspec import checks, cuda
from pyspec._native.abi import Status
from pyspec._native.c_call import SequenceTable, check, new_error
from pyspec._native.ffi import ffi, lib
from pyspec.arrays import device as device_arrays
from pyspec.arrays import host as host_arrays
from pyspec.errors import InvalidInputError
from pyspec.params import SamplingParams
from pyspec.request import (
    DraftProbs,
    LogitsPointer,
    RowLogprobs,
    SparseDraftProbs,
    VerifyRequest,
    VerifyResult,
)

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
        raise InvalidInputError(
            f"{name} must be an int in [1, {limit}], got {n_threads!r}", Status.SHAPE
        )
    if not 1 <= n_threads <= limit:
        raise InvalidInputError(
            f"{name} must be in [1, {limit}] (this machine has {limit} cores), got {n_threads}",
            Status.SHAPE,
        )
    return int(n_threads)


def default_threads() -> int:
    """Worker threads per call: ``PYSPEC_NUM_THREADS`` or the machine's cores (at most 8)."""
    env = os.environ.get(THREADS_ENV)
    if env is not None and env.strip():
        try:
            value = int(env.strip())
        except ValueError:
            raise InvalidInputError(
                f"{THREADS_ENV}={env!r} is not an integer: set it to a thread "
                f"count in [1, {max_threads()}] or unset it",
                Status.SHAPE,
            ) from None
        return check_threads(value, THREADS_ENV)
    return max(1, min(8, max_threads()))


class _Verifiers(threading.local):
    """One C verifier (its scratch) per Python thread, grown when a call needs more."""

    def __init__(self):
        self.err = new_error()
        self.handle = None
        self.vocab = 0
        self.threads = 0

    def get(self, n_vocab: int, n_threads: int):
        if self.handle is None or n_vocab > self.vocab or n_threads > self.threads:
            vocab, threads = max(n_vocab, self.vocab), max(n_threads, self.threads)
            out = ffi.new("pyspec_verifier **")
            err = new_error()
            check(lib.pyspec_verifier_create(vocab, threads, out, err), err)
            self.handle = ffi.gc(out[0], lib.pyspec_verifier_free)
            self.vocab, self.threads = vocab, threads
        return self.handle


_VERIFIERS = _Verifiers()
_DEFAULT_THREADS = default_threads()
# C types resolved once (cffi parses a type string on every call that names one).
_PARAMS_P = ffi.typeof("pyspec_sampling_params *")
_VOID_P = ffi.typeof("void *")
_INT32_ARRAY = ffi.typeof("int32_t[]")
_INT64_P = ffi.typeof("int64_t *")
_FLOAT_ARRAY = ffi.typeof("float[]")


def _host_token_ids(tokens, name: str, n_vocab: int):
    """(count, int32 cdata or array, owner) of a host list or array of token ids. The C
    library range-checks them and names the index; here only values that would wrap in 32
    bits are caught."""
    n = checks.draft_count(tokens, name)
    if isinstance(tokens, np.ndarray):
        if tokens.size and not np.issubdtype(tokens.dtype, np.integer):
            raise InvalidInputError(
                f"{name} must hold integer token ids, got {tokens.dtype}", Status.DTYPE
            )
        if tokens.dtype != np.int32 or not tokens.flags.c_contiguous:
            tokens = host_arrays.token_ids(tokens, name, n_vocab)
        return n, ffi.from_buffer("int32_t[]", tokens), tokens
    try:
        return n, ffi.new(_INT32_ARRAY, tokens if type(tokens) is list else list(tokens)), None
    except (OverflowError, TypeError):
        arr = host_arrays.token_ids(tokens, name, n_vocab)  # raises with the index
        return arr.size, ffi.from_buffer("int32_t[]", arr), arr


def _host_draft_rows(probs: DraftProbs, n_draft: int, n_vocab: int, check_sums: bool, keep: list):
    """The (probs, tokens, row stride, per row) of host draft probabilities."""
    if isinstance(probs, SparseDraftProbs):
        tokens, values = np.asarray(probs.tokens), np.asarray(probs.probs)
        checks.check_sparse_shapes(tokens.shape, values.shape, n_draft)
        checks.check_sparse_probs_dtype(values.dtype.name)
        # Host token ids may be any integer type: a range-checked int32 copy (small: k x m).
        if np.issubdtype(tokens.dtype, np.integer):
            tokens = host_arrays.token_ids(tokens.ravel(), "draft_probs.tokens", n_vocab).reshape(
                tokens.shape
            )
        values = np.ascontiguousarray(values)
        t, p = (
            host_arrays.host_view(tokens, "draft_probs.tokens"),
            host_arrays.host_view(values, "draft_probs.probs"),
        )
        stride, per_row = checks.sparse_draft_rows(t, p, n_draft)
        keep += [tokens, values]
        return p.ptr, t.ptr, stride, per_row
    view = host_arrays.host_view(probs, "draft_probs")
    stride = checks.dense_draft_rows(view, n_draft, n_vocab)
    if check_sums:
        checks.check_dense_rows_sum_to_one(view.owner)
    keep.append(view.owner)
    return view.ptr, None, stride, 0


class _HostCall:
    """One ``pyspec_verify_batch`` call: its descriptors, the buffers they point into (kept
    alive until it returns) and its outputs."""

    def __init__(
        self,
        n_seqs: int,
        want_logprobs: bool,
        check_draft_probs: bool = True,
        want_top_probs: bool = False,
    ):
        self.table = SequenceTable(n_seqs)
        self.check_draft_probs = check_draft_probs
        self.want_logprobs = want_logprobs
        self.want_top_probs = want_top_probs
        self.keep = []
        self.outputs = []

    def add(
        self,
        i: int,
        logits,
        row_stride: int,
        n_vocab: int,
        draft_tokens,
        draft_probs: DraftProbs,
        params: SamplingParams,
        position: int,
        penalty_history=None,
        prefix: str = "",
    ):
        params = checks.check_params(params)
        n_draft, c_tokens, owner = _host_token_ids(draft_tokens, f"{prefix}draft_tokens", n_vocab)
        position = checks.check_position(position, n_draft)
        window = checks.penalty_window(params, penalty_history)
        n_hist, c_hist, hist_owner = (
            _host_token_ids(window, "penalty_history", n_vocab)
            if window is not None
            else (0, None, None)
        )
        rows = (
            _host_draft_rows(draft_probs, n_draft, n_vocab, self.check_draft_probs, self.keep)
            if draft_probs is not None
            else None
        )
        out_tokens = ffi.new(_INT32_ARRAY, n_draft + 1)
        out_n = ffi.new(_INT64_P)
        out_lp = ffi.new(_FLOAT_ARRAY, n_draft + 1) if self.want_logprobs else None
        out_top = ffi.new(_FLOAT_ARRAY, n_draft + 1) if self.want_top_probs else None
        self.table.fill(
            i,
            logits=logits,
            row_stride=row_stride,
            draft_tokens=c_tokens,
            n_draft=n_draft,
            position=position,
            params=params,
            history=c_hist,
            n_history=n_hist,
            draft_rows=rows,
            out_tokens=out_tokens,
            out_n_accepted=out_n,
            out_logprobs=out_lp,
            out_top_probs=out_top,
        )
        self.keep += [c_tokens, owner, c_hist, hist_owner]
        self.outputs.append((out_n, out_tokens, out_lp, out_top))

    def add_rows(self, i: int, rows: checks.LogitsRows, req: VerifyRequest, prefix: str):
        self.keep.append(rows.view.owner)
        self.add(
            i,
            rows.view.ptr,
            rows.row_stride,
            rows.n_vocab,
            req.draft_tokens,
            req.draft_probs,
            req.params,
            req.position,
            req.penalty_history,
            prefix,
        )

    def run(self, n_seqs: int, n_vocab: int, dtype: int, n_threads: Optional[int]):
        n_threads = _DEFAULT_THREADS if n_threads is None else check_threads(n_threads)
        verifier = _VERIFIERS.get(n_vocab, n_threads)
        err = _VERIFIERS.err
        check(
            lib.pyspec_verify_batch(
                verifier, self.table.seqs, n_seqs, n_vocab, dtype, n_threads, err
            ),
            err,
        )
        results = []
        for out_n, out_tokens, out_lp, out_top in self.outputs:
            n = out_n[0]
            tokens = np.frombuffer(ffi.buffer(out_tokens, 4 * (n + 1)), dtype=np.int32).copy()
            lp = None if out_lp is None else _floats(out_lp, n + 1)
            top = None if out_top is None else _floats(out_top, n + 1)
            results.append(VerifyResult(n, tokens, lp, top))
        return results


def _floats(c_array, n: int) -> np.ndarray:
    return np.frombuffer(ffi.buffer(c_array, 4 * n), dtype=np.float32).copy()


def _request_rows(req: VerifyRequest, prefix: str) -> checks.LogitsRows:
    n_draft = checks.draft_count(req.draft_tokens, f"{prefix}draft_tokens")
    name = f"{prefix}target_logits"
    return checks.logits_rows(host_arrays.host_view(req.target_logits, name), name, n_draft + 1)


def verify(
    target_logits,
    draft_tokens,
    draft_probs: DraftProbs = None,
    params: SamplingParams = DEFAULT_PARAMS,
    position: int = 0,
    *,
    logprobs: bool = False,
    n_threads: Optional[int] = None,
    penalty_history=None,
    stream=None,
    check_draft_probs: bool = True,
    top_probs: bool = False,
) -> VerifyResult:
    """Verifies the drafts of one sequence against the target's logits, in one fused pass.

    Parameters
    ----------
    target_logits : ndarray, float32 or float16, shape ``[n_draft + 1, n_vocab]``, host
        (a bfloat16 dtype, such as ml_dtypes', is read too; native byte order only).
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
    top_probs : bool
        Also return the raw target distribution's largest probability at each emitted row
        (``VerifyResult.top_probs``): how sure the target was. On the CPU the logits more
        than 16 below a row's maximum are left out (``pyspec.h``, ``out_top_probs``), so its
        pass exponentiates only the few blocks of logits near the top.
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
    if device_arrays.is_device_array(target_logits):
        return cuda.verify(
            target_logits,
            draft_tokens,
            draft_probs,
            params,
            position,
            logprobs=logprobs,
            penalty_history=penalty_history,
            stream=stream,
            top_probs=top_probs,
        )
    req = VerifyRequest(target_logits, draft_tokens, draft_probs, params, position, penalty_history)
    rows = _request_rows(req, "")
    call = _HostCall(1, logprobs, check_draft_probs, top_probs)
    call.add_rows(0, rows, req, "")
    return call.run(1, rows.n_vocab, rows.dtype, n_threads)[0]


def verify_batch(
    requests: Sequence[VerifyRequest],
    *,
    logprobs: bool = False,
    n_threads: Optional[int] = None,
    stream=None,
    check_draft_probs: bool = True,
    top_probs: bool = False,
) -> list:
    """Verifies many sequences in one call: ragged draft counts, per-sequence params and
    positions. All logits must share one dtype and vocabulary size. Returns a list of
    ``VerifyResult``, identical to calling ``verify`` on each request. Requests whose logits
    are CUDA arrays run on the GPU (``pyspec.cuda.verify_batch``; all of them on one device)."""
    requests = checks.check_requests(requests)
    if not requests:
        return []
    if any(device_arrays.is_device_array(r.target_logits) for r in requests):
        return cuda.verify_batch(requests, logprobs=logprobs, stream=stream, top_probs=top_probs)
    call = _HostCall(len(requests), logprobs, check_draft_probs, top_probs)
    first = None
    for i, req in enumerate(requests):
        prefix = f"requests[{i}]."
        rows = _request_rows(req, prefix)
        if first is None:
            first = rows
        checks.check_same_vocabulary(rows, first, f"{prefix}target_logits")
        call.add_rows(i, rows, req, prefix)
    return call.run(len(requests), first.n_vocab, first.dtype, n_threads)


def verify_from_pointer(
    logits_address: int,
    n_vocab: int,
    draft_tokens,
    draft_probs: DraftProbs = None,
    params: SamplingParams = DEFAULT_PARAMS,
    position: int = 0,
    *,
    row_stride: Optional[int] = None,
    dtype: str = "float32",
    logprobs: bool = False,
    n_threads: Optional[int] = None,
    penalty_history=None,
    check_draft_probs: bool = True,
    top_probs: bool = False,
) -> VerifyResult:
    """``verify`` on logits given as a raw host address (llama.cpp's logits buffer).

    ``logits_address`` points at row 0 of ``len(draft_tokens) + 1`` rows of ``n_vocab``
    elements of ``dtype`` ("float32", "float16" or "bfloat16"), rows ``row_stride`` elements
    apart (default ``n_vocab``). Nothing is copied; the caller keeps the buffer alive.
    ``check_draft_probs``, ``logprobs`` and ``top_probs`` as in ``verify``.
    """
    logits_address = checks.check_address(logits_address, "logits_address")
    code = host_arrays.dtype_code(dtype)
    n_vocab = checks.check_n_vocab(n_vocab)
    stride = checks.check_row_stride(row_stride, n_vocab)
    call = _HostCall(1, logprobs, check_draft_probs, top_probs)
    call.add(
        0,
        logits_address,
        stride,
        n_vocab,
        draft_tokens,
        draft_probs,
        params,
        position,
        penalty_history,
    )
    return call.run(1, n_vocab, code, n_threads)[0]


def _one_row(logits):
    """(logits pointer, n_vocab, dtype code, what must stay alive) of one row: an array or a
    LogitsPointer."""
    if isinstance(logits, LogitsPointer):
        dtype = host_arrays.dtype_code(logits.dtype)
        ptr = ffi.cast(_VOID_P, checks.check_address(logits.address, "LogitsPointer.address"))
        n_vocab = checks.check_n_vocab(logits.n_vocab, "LogitsPointer.n_vocab")
        return ptr, n_vocab, dtype, None
    rows = checks.logits_rows(
        host_arrays.host_view(logits, "logits"), "logits", 1, needs="one row ([n_vocab])"
    )
    return ffi.cast(_VOID_P, rows.view.ptr), rows.n_vocab, rows.dtype, rows.view.owner


def _single_row(logits, params, penalty_history=None):
    """(logits pointer, n_vocab, dtype code, C params, what must stay alive) of one row (an
    array or a LogitsPointer), for the calls that read one: sample, distribution,
    distribution_sparse."""
    params = checks.check_params(params)
    ptr, n_vocab, dtype, owner = _one_row(logits)
    c_params = ffi.new(_PARAMS_P)
    window = checks.penalty_window(params, penalty_history)
    if window is None:
        params.fill(c_params)
        return ptr, n_vocab, dtype, c_params, owner
    n_hist, c_hist, hist_owner = _host_token_ids(window, "penalty_history", n_vocab)
    params.fill(c_params, c_hist if n_hist else None, n_hist)
    return ptr, n_vocab, dtype, c_params, (owner, c_hist, hist_owner)


def sample(
    logits, params: SamplingParams = DEFAULT_PARAMS, position: int = 0, *, penalty_history=None
) -> int:
    """Draws one token from one row of logits (``[n_vocab]`` float32/float16, or a
    ``LogitsPointer``) at absolute ``position``. A point-mass ``verify`` emits exactly this
    token at that position."""
    ptr, n_vocab, dtype, c_params, _keep = _single_row(logits, params, penalty_history)
    position = checks.check_position(position)
    out = ffi.new(_INT32_ARRAY, 1)
    err = _VERIFIERS.err
    check(
        lib.pyspec_sample(
            _VERIFIERS.get(n_vocab, 1), ptr, n_vocab, dtype, c_params, position, out, ffi.NULL, err
        ),
        err,
    )
    return int(out[0])


def row_logprobs(logits, token: Optional[int] = None, n_top: int = 0) -> RowLogprobs:
    """What a completion's ``logprobs`` report for one row of raw logits (``[n_vocab]``
    float32/float16/bfloat16, or a ``LogitsPointer``): the log-probability of ``token``
    under the row's softmax (None when ``token`` is None) and its ``n_top`` most likely
    tokens, most likely first (among equal logits the lower id first). One pass to find the
    top tokens and one for the normaliser, in C; the one ``verify(..., logprobs=True)`` uses,
    so the two agree. NaN or +inf in the row raises ``LogitsError``."""
    ptr, n_vocab, dtype, _keep = _one_row(logits)
    n_top = checks.check_count(n_top, "n_top", n_vocab)
    c_token = -1 if token is None else checks.check_token(token, "token", n_vocab)
    ids = np.empty(n_top, dtype=np.int32)
    lps = np.empty(n_top, dtype=np.float32)
    n_found = ffi.new(_INT32_ARRAY, 1)
    token_lp = ffi.new(_FLOAT_ARRAY, 1)
    err = _VERIFIERS.err
    check(
        lib.pyspec_row_logprobs(
            ptr,
            n_vocab,
            dtype,
            c_token,
            n_top,
            ffi.cast("int32_t *", host_arrays.address(ids)),
            ffi.cast("float *", host_arrays.address(lps)),
            n_found,
            token_lp,
            err,
        ),
        err,
    )
    n = int(n_found[0])
    return RowLogprobs(None if token is None else float(token_lp[0]), ids[:n], lps[:n])


def distribution(
    logits, params: SamplingParams = DEFAULT_PARAMS, *, penalty_history=None
) -> np.ndarray:
    """The distribution ``sample`` draws from (after penalties, top-k, top-p, min-p and
    temperature), as a dense float32 ``[n_vocab]`` array."""
    ptr, n_vocab, dtype, c_params, _keep = _single_row(logits, params, penalty_history)
    out = np.empty(n_vocab, dtype=np.float32)
    err = _VERIFIERS.err
    check(
        lib.pyspec_distribution(
            _VERIFIERS.get(n_vocab, 1),
            ptr,
            n_vocab,
            dtype,
            c_params,
            ffi.cast("float *", host_arrays.address(out)),
            err,
        ),
        err,
    )
    return out


def distribution_sparse(logits, params: SamplingParams = DEFAULT_PARAMS, *, penalty_history=None):
    """The same distribution as ``(tokens int32, probs float32)`` over its kept set only,
    most likely first when top-k is on. What a drafter passes as ``SparseDraftProbs`` rows;
    no vocabulary-wide output is written."""
    ptr, n_vocab, dtype, c_params, _keep = _single_row(logits, params, penalty_history)
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
    check(
        lib.pyspec_distribution_sparse(
            _VERIFIERS.get(n_vocab, 1),
            ptr,
            n_vocab,
            dtype,
            c_params,
            ffi.cast("int32_t *", host_arrays.address(tokens)),
            ffi.cast("float *", host_arrays.address(probs)),
            capacity,
            n,
            err,
        ),
        err,
    )
    return tokens[: n[0]], probs[: n[0]]
