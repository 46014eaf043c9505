"""The CUDA back end from Python: verify logits that already live on a GPU.

``pyspec.verify`` and ``pyspec.verify_batch`` route here by themselves when the logits are a
CUDA array (anything with ``__cuda_array_interface__``, such as CuPy and Numba arrays, or
with a CUDA ``__dlpack_device__``, such as PyTorch tensors); nothing here imports torch or
cupy. The logits are read in place in float32, float16 or bfloat16. Draft probabilities, when
given, must be on the same device; draft tokens and penalty histories may be host lists (they
are uploaded) or device int32 arrays.

Results come back as small host arrays (``VerifyResult``), after the work enqueued on
``stream`` is done. ``verify_from_device_pointer`` is the raw entry point: device addresses
in, results written into the caller's device buffers, nothing waited for unless asked.

``stream`` is ``None`` (the legacy default stream), an integer ``cudaStream_t``, or a stream
object with ``cuda_stream`` (PyTorch) or ``ptr`` (CuPy). The work is enqueued on it, so
order it after whatever produced the logits (PyTorch: ``torch.cuda.current_stream()``).
"""
from __future__ import annotations

import threading
from typing import Optional, Sequence

import numpy as np

from . import _arrays
from . import _device_arrays as dev
from ._abi import Status
from ._ffi import ffi, lib
from .errors import PyspecError, raise_for_status
from .params import SamplingParams

_H2D, _D2H = 0, 1


def _check(status: int, err) -> None:
    if status:
        raise_for_status(status, ffi.string(err.message).decode())


def built_with_cuda() -> bool:
    """Whether this libpyspec has the CUDA back end compiled in."""
    return bool(lib.pyspec_has_cuda())


def device_count() -> int:
    """Number of CUDA devices (0 without a driver or a device, or without CUDA support)."""
    if not built_with_cuda():
        return 0
    n = ffi.new("int32_t *")
    err = ffi.new("pyspec_error *")
    return int(n[0]) if lib.pyspec_cuda_device_count(n, err) == 0 else 0


def cuda_available() -> bool:
    """True when the CUDA back end is built in and at least one device is usable."""
    return device_count() > 0


def _require_cuda() -> None:
    if not built_with_cuda():
        raise PyspecError("pyspec was built without CUDA, so it cannot verify device arrays "
                          "(reinstall it where nvcc is found, or pass host arrays)", Status.CUDA)
    n = ffi.new("int32_t *")
    err = ffi.new("pyspec_error *")
    _check(lib.pyspec_cuda_device_count(n, err), err)
    if n[0] == 0:
        raise PyspecError("no CUDA device: cudaGetDeviceCount found 0 devices", Status.CUDA)


def stream_handle(stream) -> int:
    """The cudaStream_t (as an int) of None, an int, or a PyTorch / CuPy stream object."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise PyspecError(f"stream must be None, an int cudaStream_t or a stream object, got {stream!r}",
                          Status.PARAM)
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    raise PyspecError(f"stream must be None, an int cudaStream_t or a stream object with "
                      f"cuda_stream or ptr, got {type(stream).__name__}", Status.PARAM)


class _DeviceBuffer:
    """A device allocation made by libpyspec (for bindings without a CUDA library)."""

    def __init__(self, device: int, nbytes: int):
        out = ffi.new("void **")
        err = ffi.new("pyspec_error *")
        _check(lib.pyspec_cuda_malloc(device, nbytes, out, err), err)
        self.device, self.nbytes, self.ptr = device, nbytes, out[0]

    def address(self, offset: int = 0) -> int:
        return int(ffi.cast("uintptr_t", self.ptr)) + offset

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", None), None
        if ptr is not None and lib is not None:
            lib.pyspec_cuda_free(self.device, ptr)


def _memcpy(device: int, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
    err = ffi.new("pyspec_error *")
    _check(lib.pyspec_cuda_memcpy(device, ffi.cast("void *", dst), ffi.cast("void *", src), nbytes,
                                  kind, ffi.cast("void *", stream), err), err)


class CudaVerifier:
    """A CUDA verifier with its device workspace (allocated once; see pyspec.h)."""

    def __init__(self, max_vocab: int, max_seqs: int = 64, max_rows: Optional[int] = None,
                 device: int = 0):
        _require_cuda()
        if max_rows is None:
            max_rows = max_seqs * 17
        out = ffi.new("pyspec_cuda_verifier **")
        self._err = ffi.new("pyspec_error *")
        _check(lib.pyspec_cuda_verifier_create(max_vocab, max_seqs, max_rows, device, out,
                                               self._err), self._err)
        self._ptr = out[0]
        self.max_vocab, self.max_seqs, self.max_rows, self.device = max_vocab, max_seqs, max_rows, device
        self._arena: Optional[_DeviceBuffer] = None

    def close(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr is not None and lib is not None:
            lib.pyspec_cuda_verifier_free(ptr)

    __del__ = close

    def fits(self, n_vocab: int, n_seqs: int, n_rows: int) -> bool:
        return n_vocab <= self.max_vocab and n_seqs <= self.max_seqs and n_rows <= self.max_rows

    def arena(self, nbytes: int) -> _DeviceBuffer:
        if self._arena is None or self._arena.nbytes < nbytes:
            self._arena = None
            self._arena = _DeviceBuffer(self.device, max(nbytes, 1 << 16))
        return self._arena

    def enqueue(self, seqs, n_seqs: int, n_vocab: int, dtype: int, stream: int) -> None:
        _check(lib.pyspec_cuda_verify_batch(self._ptr, seqs, n_seqs, n_vocab, dtype,
                                            ffi.cast("void *", stream), self._err), self._err)

    def last_error(self, stream: int) -> None:
        """Waits for `stream` and raises the first device-side failure since the last check."""
        _check(lib.pyspec_cuda_verifier_last_error(self._ptr, ffi.cast("void *", stream),
                                                   self._err), self._err)


class _Verifiers(threading.local):
    def __init__(self):
        self.by_device = {}

    def get(self, device: int, n_vocab: int, n_seqs: int, n_rows: int) -> CudaVerifier:
        v = self.by_device.get(device)
        if v is None or not v.fits(n_vocab, n_seqs, n_rows):
            old_vocab = v.max_vocab if v else 0
            old_seqs = v.max_seqs if v else 0
            old_rows = v.max_rows if v else 0
            seqs = max(n_seqs, old_seqs, 64)
            v = None
            self.by_device.pop(device, None)
            v = CudaVerifier(max(n_vocab, old_vocab), seqs, max(n_rows, old_rows, 17 * seqs), device)
            self.by_device[device] = v
        return v


_VERIFIERS = _Verifiers()


def _host_or_device_tokens(obj, name: str, n_vocab: int, device, upload: list):
    """(device address or None, count): device int32 arrays are used in place; host lists
    are queued in `upload` (filled in after the arena is allocated)."""
    if obj is None:
        return None, 0
    if dev.is_device_array(obj):
        a = dev.describe(obj, name)
        if a.dtype != "int32":
            raise PyspecError(f"{name} on the device must be int32, got {a.dtype}", Status.DTYPE)
        if a.ndim != 1 or (a.shape[0] > 1 and a.strides[0] != 1):
            raise PyspecError(f"{name} on the device must be a contiguous 1-D array, got shape "
                              f"{a.shape} strides {a.strides}", Status.SHAPE)
        _same_device(a, device, name)
        upload.append(a.owner)  # keep alive
        return a.ptr, a.shape[0]
    host = _arrays.token_ids(obj, name, n_vocab) if len(obj) else np.zeros(0, np.int32)
    upload.append(host)
    return ("upload", len(upload) - 1), host.size


def _same_device(a: dev.DeviceArray, device, name: str) -> None:
    # pyspec.h has no status of its own for arrays on different devices; the C back end
    # reports a device that cannot serve the call ("device 3 does not exist") as
    # PYSPEC_ERR_CUDA, so this is that status (not DTYPE: the element type is fine).
    if device is not None and a.device is not None and a.device != device:
        raise PyspecError(f"{name} is on CUDA device {a.device} but target_logits is on device "
                          f"{device}; every array of a call must be on one device", Status.CUDA)


def _host_array_error(name: str, device) -> PyspecError:
    # The same status as arrays on two devices (_same_device): the element type is fine, the
    # memory is not where the call runs.
    return PyspecError(f"{name} is a host array but target_logits is on CUDA device {device}: "
                       f"pass {name} on the same device (only token lists may be host data)",
                       Status.CUDA)


def _logits(obj, name: str, n_rows: int):
    a = dev.describe(obj, name)
    if a.dtype not in dev.LOGIT_CODES:
        raise PyspecError(f"{name} must be float32, float16 or bfloat16, got {a.dtype} (no "
                          "up-cast copy is made)", Status.DTYPE)
    shape, strides = a.shape, a.strides
    if len(shape) == 1:
        shape, strides = (1, shape[0]), (shape[0], 1)
    if len(shape) != 2:
        raise PyspecError(f"{name} must be 2-D [rows, n_vocab], got shape {a.shape}", Status.SHAPE)
    if shape[0] != n_rows:
        raise PyspecError(f"{name} has {shape[0]} rows; it needs n_draft + 1 = {n_rows}", Status.SHAPE)
    if shape[1] < 1:
        raise PyspecError(f"{name} has an empty vocabulary axis", Status.SHAPE)
    if shape[1] > 1 and strides[1] != 1:
        raise PyspecError(f"{name} must be contiguous along the vocabulary axis (strides "
                          f"{strides} elements)", Status.SHAPE)
    row_stride = strides[0] if shape[0] > 1 else shape[1]
    if shape[0] > 1 and row_stride < shape[1]:
        raise PyspecError(f"{name} rows must not overlap (strides {strides} elements)", Status.SHAPE)
    return a, dev.LOGIT_CODES[a.dtype], row_stride, shape[1]


def _draft_probs(probs, n_draft: int, n_vocab: int, device, keep: list):
    """(dense/sparse fields) of device draft probabilities, or None."""
    from .verifier import SparseDraftProbs  # noqa: PLC0415 - avoids an import cycle

    if probs is None:
        return None
    if isinstance(probs, SparseDraftProbs):
        for part, obj in (("tokens", probs.tokens), ("probs", probs.probs)):
            if not dev.is_device_array(obj):
                raise _host_array_error(f"draft_probs.{part}", device)
        t = dev.describe(probs.tokens, "draft_probs.tokens")
        p = dev.describe(probs.probs, "draft_probs.probs")
        if t.dtype != "int32" or p.dtype != "float32":
            raise PyspecError(f"sparse draft_probs must be int32 tokens and float32 probs, got "
                              f"{t.dtype} and {p.dtype}", Status.DTYPE)
        if t.shape != p.shape or t.ndim != 2 or t.shape[0] != n_draft:
            raise PyspecError(f"sparse draft_probs must be two [n_draft = {n_draft}, m] arrays, "
                              f"got tokens {t.shape} and probs {p.shape}", Status.SHAPE)
        if t.strides != p.strides or (t.shape[1] > 1 and t.strides[1] != 1):
            raise PyspecError("sparse draft_probs tokens and probs must be row-contiguous with "
                              f"equal strides, got {t.strides} and {p.strides}", Status.SHAPE)
        _same_device(t, device, "draft_probs.tokens")
        _same_device(p, device, "draft_probs.probs")
        keep += [t.owner, p.owner]
        stride = t.strides[0] if n_draft > 1 else t.shape[1]
        return p.ptr, t.ptr, stride, t.shape[1]
    if not dev.is_device_array(probs):
        raise _host_array_error("draft_probs", device)
    p = dev.describe(probs, "draft_probs")
    if p.dtype != "float32":
        raise PyspecError(f"draft_probs must be float32, got {p.dtype}", Status.DTYPE)
    if p.ndim != 2 or p.shape != (n_draft, n_vocab):
        raise PyspecError(f"draft_probs must have shape [n_draft, n_vocab] = [{n_draft}, "
                          f"{n_vocab}], got {p.shape}", Status.SHAPE)
    if n_vocab > 1 and p.strides[1] != 1:
        raise PyspecError(f"draft_probs rows must be contiguous float32 (strides {p.strides})",
                          Status.SHAPE)
    _same_device(p, device, "draft_probs")
    keep.append(p.owner)
    return p.ptr, None, (p.strides[0] if n_draft > 1 else n_vocab), 0


def verify_batch(requests: Sequence, *, logprobs: bool = False, stream=None) -> list:
    """``pyspec.verify_batch`` for requests whose target_logits are CUDA arrays (see the
    module docstring). Returns host ``VerifyResult``s once the stream has run the call."""
    from .verifier import VerifyRequest, VerifyResult  # noqa: PLC0415

    if not requests:
        return []
    s = stream_handle(stream)
    n_seqs = len(requests)
    keep, upload = [], []
    entries = []
    n_vocab = dtype = device = None
    total_rows = 0
    for i, req in enumerate(requests):
        if not isinstance(req, VerifyRequest):
            raise PyspecError(f"requests[{i}] must be a pyspec.VerifyRequest, got {type(req).__name__}",
                              Status.SHAPE)
        name = f"requests[{i}].target_logits" if n_seqs > 1 else "target_logits"
        if not dev.is_device_array(req.target_logits):
            raise PyspecError(f"{name} is a host array but requests[0].target_logits is on a "
                              "CUDA device; a call's logits must all be on one device", Status.CUDA)
        draft = req.draft_tokens
        n_draft = dev.describe(draft, "draft_tokens").shape[0] if dev.is_device_array(draft) else len(draft)
        a, code, row_stride, v = _logits(req.target_logits, name, n_draft + 1)
        if n_vocab is None:
            n_vocab, dtype, device = v, code, a.device
        elif v != n_vocab or code != dtype:
            raise PyspecError(f"{name} is [{v}] {a.dtype}; every request must share "
                              f"requests[0]'s vocabulary ({n_vocab}) and dtype", Status.SHAPE)
        _same_device(a, device, name)
        keep.append(a.owner)
        params = req.params
        if not isinstance(params, SamplingParams):
            raise PyspecError(f"params must be a pyspec.SamplingParams, got {type(params).__name__}",
                              Status.PARAM)
        position = req.position
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)) or not 0 <= position < 2**63:
            raise PyspecError(f"position must be an int in [0, 2**63), got {position!r}", Status.SHAPE)
        tok = _host_or_device_tokens(draft, "draft_tokens", v, device, upload)
        hist = (None, 0)
        if req.penalty_history is not None and params.penalties_on:
            h = req.penalty_history
            if not dev.is_device_array(h) and params.penalty_last_n > 0:
                h = list(h)[-params.penalty_last_n:]
            hist = _host_or_device_tokens(h, "penalty_history", v, device, upload)
        dp = _draft_probs(req.draft_probs, n_draft, v, device, keep)
        entries.append((a.ptr, row_stride, n_draft, tok, hist, dp, params, int(position), total_rows))
        total_rows += n_draft + 1
    _require_cuda()  # after the argument checks, which need no device
    dev_index = device if device is not None else 0
    verifier = _VERIFIERS.get(dev_index, n_vocab, n_seqs, total_rows)

    # Arena: outputs (tokens, logprobs, n_accepted), then the uploaded host token lists.
    out_bytes = 4 * total_rows * 2 + 8 * n_seqs
    host_parts = [u for u in upload if isinstance(u, np.ndarray)]
    offsets, off = {}, out_bytes
    for idx, u in enumerate(upload):
        if isinstance(u, np.ndarray):
            offsets[idx] = off
            off += 4 * u.size
    arena = verifier.arena(off)
    base = arena.address()
    if host_parts:
        blob = np.concatenate([u.astype(np.int32, copy=False) for u in host_parts]) if host_parts else None
        if blob is not None and blob.size:
            _memcpy(dev_index, base + out_bytes, _arrays.address(blob), blob.nbytes, _H2D, s)

    def resolve(ref):
        addr, n = ref
        if isinstance(addr, tuple):
            return (base + offsets[addr[1]] if n else 0), n
        return (addr or 0), n

    seqs = ffi.new("pyspec_sequence[]", n_seqs)
    dps = []
    for i, (ptr, row_stride, n_draft, tok, hist, dp, params, position, row0) in enumerate(entries):
        seq = seqs[i]
        seq.target_logits = ffi.cast("void *", ptr)
        seq.logits_row_stride = row_stride
        t_addr, _ = resolve(tok)
        seq.draft_tokens = ffi.cast("int32_t *", t_addr)
        seq.n_draft = n_draft
        seq.position = position
        h_addr, h_n = resolve(hist) if hist[1] else (0, 0)
        params.fill(seq.params, ffi.cast("int32_t *", h_addr) if h_n else ffi.NULL, h_n)
        if dp is not None:
            c = ffi.new("pyspec_draft_probs *")
            c.probs = ffi.cast("float *", dp[0])
            c.tokens = ffi.cast("int32_t *", dp[1]) if dp[1] else ffi.NULL
            c.row_stride = dp[2]
            c.n_per_row = dp[3]
            dps.append(c)
            seq.draft_probs = c
        else:
            seq.draft_probs = ffi.NULL
        seq.out_tokens = ffi.cast("int32_t *", base + 4 * row0)
        seq.out_logprobs = ffi.cast("float *", base + 4 * total_rows + 4 * row0) if logprobs else ffi.NULL
        seq.out_n_accepted = ffi.cast("int64_t *", base + 8 * total_rows + 8 * i)
    verifier.enqueue(seqs, n_seqs, n_vocab, dtype, s)
    verifier.last_error(s)
    host = np.empty(out_bytes, dtype=np.uint8)
    _memcpy(dev_index, _arrays.address(host), base, out_bytes, _D2H, s)
    tokens = host[:4 * total_rows].view(np.int32)
    lps = host[4 * total_rows:8 * total_rows].view(np.float32)
    n_acc = host[8 * total_rows:].view(np.int64)
    results = []
    for i, e in enumerate(entries):
        row0, n = e[8], int(n_acc[i])
        lp = lps[row0:row0 + n + 1].copy() if logprobs else None
        results.append(VerifyResult(n, tokens[row0:row0 + n + 1].copy(), lp))
    del keep, upload, dps
    return results


def verify(target_logits, draft_tokens, draft_probs=None, params: Optional[SamplingParams] = None,
           position: int = 0, *, logprobs: bool = False, penalty_history=None, stream=None):
    """``pyspec.verify`` on CUDA logits (see ``verify_batch``)."""
    from .verifier import VerifyRequest  # noqa: PLC0415

    req = VerifyRequest(target_logits, draft_tokens, draft_probs,
                        params if params is not None else SamplingParams(), position, penalty_history)
    return verify_batch([req], logprobs=logprobs, stream=stream)[0]


def verify_from_device_pointer(logits_address: int, n_vocab: int, draft_tokens_address: int,
                               n_draft: int, *, out_tokens_address: int,
                               out_n_accepted_address: int, out_logprobs_address: int = 0,
                               draft_probs_address: int = 0, draft_probs_tokens_address: int = 0,
                               draft_probs_row_stride: Optional[int] = None,
                               draft_probs_per_row: int = 0,
                               params: Optional[SamplingParams] = None, position: int = 0,
                               row_stride: Optional[int] = None, dtype: str = "float32",
                               penalty_history_address: int = 0, n_penalty_history: int = 0,
                               device: int = 0, stream=None, synchronize: bool = True) -> None:
    """The raw CUDA entry point: every address is a device address on `device`.

    Enqueues one sequence's verify on `stream` and writes n_draft + 1 tokens (capacity),
    the accepted count (int64) and optionally logprobs into the caller's device buffers.
    With ``synchronize=False`` nothing is waited for: the outputs are ready when the stream
    is, and device-side errors surface at the next ``check_device_errors(device, stream)``.
    """
    _require_cuda()
    params = params if params is not None else SamplingParams()
    code = _arrays.dtype_code(dtype)
    s = stream_handle(stream)
    verifier = _VERIFIERS.get(device, n_vocab, 1, n_draft + 1)
    seqs = ffi.new("pyspec_sequence[]", 1)
    seq = seqs[0]
    seq.target_logits = ffi.cast("void *", logits_address)
    seq.logits_row_stride = n_vocab if row_stride is None else row_stride
    seq.draft_tokens = ffi.cast("int32_t *", draft_tokens_address)
    seq.n_draft = n_draft
    seq.position = position
    params.fill(seq.params, ffi.cast("int32_t *", penalty_history_address) if n_penalty_history else ffi.NULL,
                n_penalty_history)
    dp = None
    if draft_probs_address:
        dp = ffi.new("pyspec_draft_probs *")
        dp.probs = ffi.cast("float *", draft_probs_address)
        dp.tokens = ffi.cast("int32_t *", draft_probs_tokens_address) if draft_probs_tokens_address else ffi.NULL
        dp.n_per_row = draft_probs_per_row
        dp.row_stride = draft_probs_row_stride if draft_probs_row_stride is not None else (
            draft_probs_per_row if draft_probs_tokens_address else n_vocab)
        seq.draft_probs = dp
    else:
        seq.draft_probs = ffi.NULL
    seq.out_tokens = ffi.cast("int32_t *", out_tokens_address)
    seq.out_n_accepted = ffi.cast("int64_t *", out_n_accepted_address)
    seq.out_logprobs = ffi.cast("float *", out_logprobs_address) if out_logprobs_address else ffi.NULL
    verifier.enqueue(seqs, 1, n_vocab, code, s)
    if synchronize:
        verifier.last_error(s)


def check_device_errors(device: int = 0, stream=None) -> None:
    """Waits for `stream` and raises the first device-side failure of the calls this
    thread's verifier on `device` enqueued since the last check."""
    v = _VERIFIERS.by_device.get(device)
    if v is not None:
        v.last_error(stream_handle(stream))
