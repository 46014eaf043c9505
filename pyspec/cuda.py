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

``PYSPEC_CUDA_SPLIT_ROWS=1`` turns on split rows for the verifiers made after it is set
(``pyspec_cuda_verifier_split_rows`` in pyspec.h; off by default until it has been timed on
a GPU): calls with fewer rows than the device has multiprocessors scan each row with several
blocks. The tokens are the same either way.

``stream`` is ``None`` (the legacy default stream), an integer ``cudaStream_t``, or a stream
object with ``cuda_stream`` (PyTorch) or ``ptr`` (CuPy). The work is enqueued on it, so
order it after whatever produced the logits (PyTorch: ``torch.cuda.current_stream()``).

The argument checks and array layouts are ``pyspec.checks``, shared with the host path, so
both give the same messages. What the path asks of CUDA goes through ``backend`` (a
``CudaBackend``); ``use_backend`` swaps it, which is how the tests run this module on host
memory.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Optional, Sequence

import numpy as np

from pyspec import checks
from pyspec._native.abi import Status
from pyspec._native.c_call import SequenceTable, check, new_error
from pyspec._native.ffi import ffi, lib
from pyspec.arrays import device as dev
from pyspec.arrays import host as host_arrays
from pyspec.arrays.view import ArrayView
from pyspec.errors import CudaUnavailableError, InvalidInputError
from pyspec.params import SamplingParams
from pyspec.request import SparseDraftProbs, VerifyRequest, VerifyResult
from pyspec.switches import switched_on

HOST_TO_DEVICE, DEVICE_TO_HOST = 0, 1  # pyspec_cuda_memcpy's kinds


def built_with_cuda() -> bool:
    """Whether this libpyspec has the CUDA back end compiled in."""
    return bool(lib.pyspec_has_cuda())


def device_count() -> int:
    """Number of CUDA devices (0 without a driver or a device, or without CUDA support)."""
    if not built_with_cuda():
        return 0
    n = ffi.new("int32_t *")
    return int(n[0]) if lib.pyspec_cuda_device_count(n, new_error()) == 0 else 0


def cuda_available() -> bool:
    """True when the CUDA back end is built in and at least one device is usable."""
    return device_count() > 0


def stream_handle(stream) -> int:
    """The cudaStream_t (as an int) of None, an int, or a PyTorch / CuPy stream object."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise InvalidInputError(
            f"stream must be None, an int cudaStream_t or a stream object, got {stream!r}",
            Status.PARAM,
        )
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    raise InvalidInputError(
        f"stream must be None, an int cudaStream_t or a stream object with "
        f"cuda_stream or ptr, got {type(stream).__name__}",
        Status.PARAM,
    )


class _DeviceBuffer:
    """A device allocation made by libpyspec (for bindings without a CUDA library)."""

    def __init__(self, device: int, nbytes: int):
        out = ffi.new("void **")
        err = new_error()
        check(lib.pyspec_cuda_malloc(device, nbytes, out, err), err)
        self.device, self.nbytes, self.ptr = device, nbytes, out[0]

    def address(self, offset: int = 0) -> int:
        return int(ffi.cast("uintptr_t", self.ptr)) + offset

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", None), None
        if ptr is not None and lib is not None:
            lib.pyspec_cuda_free(self.device, ptr)


# Rows a verifier's workspace holds per sequence unless told: a 16-token draft and its bonus
# row (the llama loop's default draft_max); a larger call grows the workspace.
DEFAULT_ROWS_PER_SEQUENCE = 17


class CudaVerifier:
    """A CUDA verifier with its device workspace (allocated once; see pyspec.h). split_rows:
    None follows ``PYSPEC_CUDA_SPLIT_ROWS`` (off unless it says on)."""

    def __init__(
        self,
        max_vocab: int,
        max_seqs: int = 64,
        max_rows: Optional[int] = None,
        device: int = 0,
        split_rows: Optional[bool] = None,
    ):
        backend.require()
        if max_rows is None:
            max_rows = max_seqs * DEFAULT_ROWS_PER_SEQUENCE
        out = ffi.new("pyspec_cuda_verifier **")
        self._err = new_error()
        check(
            lib.pyspec_cuda_verifier_create(max_vocab, max_seqs, max_rows, device, out, self._err),
            self._err,
        )
        self._ptr = out[0]
        if split_rows is None:
            split_rows = switched_on("PYSPEC_CUDA_SPLIT_ROWS")
        check(lib.pyspec_cuda_verifier_split_rows(self._ptr, int(split_rows), self._err), self._err)
        self.split_rows = bool(split_rows)
        self.max_vocab, self.max_seqs, self.max_rows, self.device = (
            max_vocab,
            max_seqs,
            max_rows,
            device,
        )
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
        check(
            lib.pyspec_cuda_verify_batch(
                self._ptr, seqs, n_seqs, n_vocab, dtype, ffi.cast("void *", stream), self._err
            ),
            self._err,
        )

    def last_error(self, stream: int) -> None:
        """Waits for `stream` and raises the first device-side failure since the last check."""
        check(
            lib.pyspec_cuda_verifier_last_error(self._ptr, ffi.cast("void *", stream), self._err),
            self._err,
        )


class CudaBackend:
    """What the device path asks of CUDA: that it is there, a verifier per device (one per
    Python thread, grown when a call needs more) and copies between host and device.

    The module's ``backend`` is an instance; ``use_backend`` swaps in another object with
    the same four methods (the tests run the whole Python device path on host memory that
    way, with the CPU library standing in for the kernels)."""

    def __init__(self):
        self._local = threading.local()

    def require(self) -> None:
        """Raises CudaUnavailableError unless the back end is built in and a device exists."""
        if not built_with_cuda():
            raise CudaUnavailableError(
                "pyspec was built without CUDA, so it cannot verify device arrays "
                "(reinstall it where nvcc is found, or pass host arrays)",
                Status.CUDA,
            )
        n = ffi.new("int32_t *")
        err = new_error()
        status = lib.pyspec_cuda_device_count(n, err)
        if status:  # no driver, or a driver that cannot start: no device to verify on
            raise CudaUnavailableError(ffi.string(err.message).decode(), status)
        if n[0] == 0:
            raise CudaUnavailableError(
                "no CUDA device: cudaGetDeviceCount found 0 devices", Status.CUDA
            )

    def _verifiers(self) -> dict:
        if not hasattr(self._local, "by_device"):
            self._local.by_device = {}
        return self._local.by_device

    def verifier(self, device: int, n_vocab: int, n_seqs: int, n_rows: int) -> CudaVerifier:
        """This thread's verifier on `device`, large enough for the call."""
        by_device = self._verifiers()
        v = by_device.get(device)
        if v is None or not v.fits(n_vocab, n_seqs, n_rows):
            vocab = max(n_vocab, v.max_vocab if v else 0)
            seqs = max(n_seqs, v.max_seqs if v else 0, 64)
            rows = max(n_rows, v.max_rows if v else 0, DEFAULT_ROWS_PER_SEQUENCE * seqs)
            by_device.pop(device, None)
            v = None  # free the old workspace before allocating the new one
            v = by_device[device] = CudaVerifier(vocab, seqs, rows, device)
        return v

    def existing_verifier(self, device: int) -> Optional[CudaVerifier]:
        return self._verifiers().get(device)

    def memcpy(self, device: int, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        err = new_error()
        check(
            lib.pyspec_cuda_memcpy(
                device,
                ffi.cast("void *", dst),
                ffi.cast("void *", src),
                nbytes,
                kind,
                ffi.cast("void *", stream),
                err,
            ),
            err,
        )


backend = CudaBackend()


@contextlib.contextmanager
def use_backend(replacement):
    """Runs the device path on ``replacement`` (an object with CudaBackend's methods)."""
    global backend
    previous, backend = backend, replacement
    try:
        yield replacement
    finally:
        backend = previous


def _same_device(a: ArrayView, device, name: str) -> None:
    # pyspec.h has no status of its own for arrays on different devices; the C back end
    # reports a device that cannot serve the call ("device 3 does not exist") as
    # PYSPEC_ERR_CUDA, so this is that status (not DTYPE: the element type is fine).
    if device is not None and a.device is not None and a.device != device:
        raise InvalidInputError(
            f"{name} is on CUDA device {a.device} but target_logits is on device "
            f"{device}; every array of a call must be on one device",
            Status.CUDA,
        )


def _host_array_error(name: str, device) -> InvalidInputError:
    # The same status as arrays on two devices (_same_device): the element type is fine, the
    # memory is not where the call runs.
    return InvalidInputError(
        f"{name} is a host array but target_logits is on CUDA device {device}: "
        f"pass {name} on the same device (only token lists may be host data)",
        Status.CUDA,
    )


def _device_view(obj, name: str, device) -> ArrayView:
    if not dev.is_device_array(obj):
        raise _host_array_error(name, device)
    view = dev.describe(obj, name)
    _same_device(view, device, name)
    return view


class _Uploads:
    """Token ids of one call: device int32 arrays are used in place, host lists are packed
    into one blob that is copied into the arena behind the outputs."""

    def __init__(self):
        self.parts = []  # host int32 arrays, in blob order
        self.keep = []  # device arrays' owners

    def add(self, obj, name: str, n_vocab: int, device):
        """(address or ("blob", offset), count) of a host or device list of token ids."""
        if dev.is_device_array(obj):
            a = dev.describe(obj, name)
            if a.dtype != "int32":
                raise InvalidInputError(
                    f"{name} on the device must be int32, got {a.dtype}", Status.DTYPE
                )
            if a.ndim != 1 or (a.shape[0] > 1 and a.strides[0] != 1):
                raise InvalidInputError(
                    f"{name} on the device must be a contiguous 1-D array, got "
                    f"shape {a.shape} strides {a.strides}",
                    Status.SHAPE,
                )
            _same_device(a, device, name)
            self.keep.append(a.owner)
            return a.ptr, a.shape[0]
        host = host_arrays.token_ids(obj, name, n_vocab)
        offset = 4 * sum(p.size for p in self.parts)
        self.parts.append(host)
        return ("blob", offset), host.size

    def blob(self) -> Optional[np.ndarray]:
        return np.concatenate(self.parts) if any(p.size for p in self.parts) else None


def _device_draft_rows(probs, n_draft: int, n_vocab: int, device, keep: list):
    """The (probs, tokens, row stride, per row) of device draft probabilities."""
    if isinstance(probs, SparseDraftProbs):
        t = _device_view(probs.tokens, "draft_probs.tokens", device)
        p = _device_view(probs.probs, "draft_probs.probs", device)
        stride, per_row = checks.sparse_draft_rows(t, p, n_draft)
        keep += [t.owner, p.owner]
        return p.ptr, t.ptr, stride, per_row
    view = _device_view(probs, "draft_probs", device)
    stride = checks.dense_draft_rows(view, n_draft, n_vocab)
    keep.append(view.owner)
    return view.ptr, None, stride, 0


def _checked_entries(requests, single: bool, uploads: _Uploads, keep: list):
    """Every request checked (no device needed): the per-sequence fields, the call's
    vocabulary, dtype and device."""
    entries, first, device, total_rows = [], None, None, 0
    for i, req in enumerate(requests):
        prefix = "" if single else f"requests[{i}]."
        name = f"{prefix}target_logits"
        if not dev.is_device_array(req.target_logits):
            raise InvalidInputError(
                f"{name} is a host array but requests[0].target_logits is on a "
                "CUDA device; a call's logits must all be on one device",
                Status.CUDA,
            )
        n_draft = checks.draft_count(req.draft_tokens, f"{prefix}draft_tokens")
        rows = checks.logits_rows(dev.describe(req.target_logits, name), name, n_draft + 1)
        if first is None:
            first, device = rows, rows.view.device
        checks.check_same_vocabulary(rows, first, name)
        _same_device(rows.view, device, name)
        keep.append(rows.view.owner)
        params = checks.check_params(req.params)
        position = checks.check_position(req.position, n_draft)
        tokens = uploads.add(req.draft_tokens, f"{prefix}draft_tokens", rows.n_vocab, device)
        window = checks.penalty_window(params, req.penalty_history)
        history = (
            uploads.add(window, "penalty_history", rows.n_vocab, device)
            if window is not None
            else (None, 0)
        )
        draft_rows = (
            _device_draft_rows(req.draft_probs, n_draft, rows.n_vocab, device, keep)
            if req.draft_probs is not None
            else None
        )
        entries.append((rows, n_draft, tokens, history, draft_rows, params, position, total_rows))
        total_rows += n_draft + 1
    return entries, first, device, total_rows


def verify_batch(
    requests: Sequence,
    *,
    logprobs: bool = False,
    stream=None,
    top_probs: bool = False,
    _single: bool = False,
) -> list:
    """``pyspec.verify_batch`` for requests whose target_logits are CUDA arrays (see the
    module docstring). Returns host ``VerifyResult``s once the stream has run the call."""
    requests = checks.check_requests(requests)
    if not requests:
        return []
    s = stream_handle(stream)
    uploads, keep = _Uploads(), []
    entries, first, device, total_rows = _checked_entries(requests, _single, uploads, keep)
    backend.require()  # after the argument checks, which need no device
    device = device if device is not None else 0
    n_seqs = len(requests)
    verifier = backend.verifier(device, first.n_vocab, n_seqs, total_rows)

    # Arena: outputs (tokens, logprobs, n_accepted, top probabilities: a multiple of 8 bytes
    # each), then the uploaded host token lists.
    top_at = 8 * total_rows + 8 * n_seqs
    out_bytes = top_at + 8 * ((total_rows + 1) // 2)
    blob = uploads.blob()
    arena = verifier.arena(out_bytes + (blob.nbytes if blob is not None else 0))
    base = arena.address()
    if blob is not None:
        backend.memcpy(
            device, base + out_bytes, host_arrays.address(blob), blob.nbytes, HOST_TO_DEVICE, s
        )

    def address(ref):
        where, n = ref
        if not n:
            return 0
        return base + out_bytes + where[1] if isinstance(where, tuple) else where

    table = SequenceTable(n_seqs)
    for i, (rows, n_draft, tokens, history, draft_rows, params, position, row0) in enumerate(
        entries
    ):
        table.fill(
            i,
            logits=rows.view.ptr,
            row_stride=rows.row_stride,
            draft_tokens=address(tokens),
            n_draft=n_draft,
            position=position,
            params=params,
            history=address(history),
            n_history=history[1],
            draft_rows=draft_rows,
            out_tokens=base + 4 * row0,
            out_n_accepted=base + 8 * total_rows + 8 * i,
            out_logprobs=base + 4 * total_rows + 4 * row0 if logprobs else None,
            out_top_probs=base + top_at + 4 * row0 if top_probs else None,
        )
    verifier.enqueue(table.seqs, n_seqs, first.n_vocab, first.dtype, s)
    verifier.last_error(s)
    host = np.empty(out_bytes, dtype=np.uint8)
    backend.memcpy(device, host_arrays.address(host), base, out_bytes, DEVICE_TO_HOST, s)
    tokens = host[: 4 * total_rows].view(np.int32)
    lps = host[4 * total_rows : 8 * total_rows].view(np.float32)
    n_acc = host[8 * total_rows : top_at].view(np.int64)
    tops = host[top_at : top_at + 4 * total_rows].view(np.float32)
    results = []
    for i, entry in enumerate(entries):
        row0, n = entry[-1], int(n_acc[i])
        lp = lps[row0 : row0 + n + 1].copy() if logprobs else None
        top = tops[row0 : row0 + n + 1].copy() if top_probs else None
        results.append(VerifyResult(n, tokens[row0 : row0 + n + 1].copy(), lp, top))
    del keep, uploads
    return results


def verify(
    target_logits,
    draft_tokens,
    draft_probs=None,
    params: Optional[SamplingParams] = None,
    position: int = 0,
    *,
    logprobs: bool = False,
    penalty_history=None,
    stream=None,
    top_probs: bool = False,
):
    """``pyspec.verify`` on CUDA logits (see ``verify_batch``)."""
    req = VerifyRequest(
        target_logits,
        draft_tokens,
        draft_probs,
        params if params is not None else SamplingParams(),
        position,
        penalty_history,
    )
    (result,) = verify_batch(
        [req], logprobs=logprobs, stream=stream, top_probs=top_probs, _single=True
    )
    return result


def verify_from_device_pointer(
    logits_address: int,
    n_vocab: int,
    draft_tokens_address: int,
    n_draft: int,
    *,
    out_tokens_address: int,
    out_n_accepted_address: int,
    out_logprobs_address: int = 0,
    out_top_probs_address: int = 0,
    draft_probs_address: int = 0,
    draft_probs_tokens_address: int = 0,
    draft_probs_row_stride: Optional[int] = None,
    draft_probs_per_row: int = 0,
    params: Optional[SamplingParams] = None,
    position: int = 0,
    row_stride: Optional[int] = None,
    dtype: str = "float32",
    penalty_history_address: int = 0,
    n_penalty_history: int = 0,
    device: int = 0,
    stream=None,
    synchronize: bool = True,
) -> None:
    """The raw CUDA entry point: every address is a device address on `device`.

    Enqueues one sequence's verify on `stream` and writes n_draft + 1 tokens (capacity),
    the accepted count (int64) and optionally logprobs and top probabilities (float32, n_draft
    + 1 each; ``VerifyResult``'s) into the caller's device buffers.
    With ``synchronize=False`` nothing is waited for: the outputs are ready when the stream
    is, and device-side errors surface at the next ``check_device_errors(device, stream)``.
    """
    params = checks.check_params(params if params is not None else SamplingParams())
    logits_address = checks.check_address(logits_address, "logits_address")
    n_vocab = checks.check_n_vocab(n_vocab)
    stride = checks.check_row_stride(row_stride, n_vocab)
    position = checks.check_position(position, n_draft)
    code = host_arrays.dtype_code(dtype)
    s = stream_handle(stream)
    backend.require()
    verifier = backend.verifier(device, n_vocab, 1, n_draft + 1)
    draft_rows = None
    if draft_probs_address:
        sparse = bool(draft_probs_tokens_address)
        default_stride = draft_probs_per_row if sparse else n_vocab
        draft_rows = (
            draft_probs_address,
            draft_probs_tokens_address or None,
            draft_probs_row_stride if draft_probs_row_stride is not None else default_stride,
            draft_probs_per_row,
        )
    table = SequenceTable(1)
    table.fill(
        0,
        logits=logits_address,
        row_stride=stride,
        draft_tokens=draft_tokens_address,
        n_draft=n_draft,
        position=position,
        params=params,
        history=penalty_history_address,
        n_history=n_penalty_history,
        draft_rows=draft_rows,
        out_tokens=out_tokens_address,
        out_n_accepted=out_n_accepted_address,
        out_logprobs=out_logprobs_address or None,
        out_top_probs=out_top_probs_address or None,
    )
    verifier.enqueue(table.seqs, 1, n_vocab, code, s)
    if synchronize:
        verifier.last_error(s)


def check_device_errors(device: int = 0, stream=None) -> None:
    """Waits for `stream` and raises the first device-side failure of the calls this
    thread's verifier on `device` enqueued since the last check."""
    v = backend.existing_verifier(device)
    if v is not None:
        v.last_error(stream_handle(stream))
