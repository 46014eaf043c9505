"""The in-graph sampler from Python: verify rows sampled inside llama.cpp's graph.

``GraphSampler`` attaches libpyspec_llama's sampler to sequence 0 of a llama.cpp context.
From then on every ``llama_decode`` samples its output rows in the graph, on the device that
runs the model, and llama.cpp no longer copies those rows' logits to the host: a round reads
one token per row. Point-mass verification needs nothing more: row i emits its plain sample
at position ``position + i`` (the host verifier's uniform), and the round ends at the first
row whose sample differs from its draft.

With ``n_top`` set, each row also computes in the graph what ``pyspec.row_logprobs`` does on
the host (the sampled token's raw log-probability and the ``n_top`` most likely tokens'):
what a completion's logprobs report, for 1 + 2 n_top numbers per row instead of the row.

While attached, the context has no host logits for sequence 0: whatever needs a logits row
(llama-cpp-python's own loop, its logprobs, grammars, the host verifier) must detach first.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import Optional

import numpy as np

from pyspec._native.ffi import ffi
from pyspec.errors import InvalidInputError, raise_for_status
from pyspec.llama.graph.build import GraphSamplerUnavailable, build_graph_library
from pyspec.params import SamplingParams
from pyspec.request import RowLogprobs

_LOCK = threading.Lock()
_SEQUENCE = 0  # the speculative loop decodes into sequence 0 (BatchDecoder)


@functools.lru_cache(maxsize=1)
def graph_library():
    """libpyspec_llama, built on first use; GraphSamplerUnavailable says why it cannot be."""
    with _LOCK:
        path = build_graph_library()
        try:
            glib = ffi.dlopen(str(path))
        except OSError as exc:
            raise GraphSamplerUnavailable(f"cannot load {path}: {exc}") from None
        import llama_cpp

        built_for = ffi.string(glib.pyspec_graph_llama_version()).decode()
        if built_for != llama_cpp.__version__:
            raise GraphSamplerUnavailable(
                f"{path} was compiled against llama-cpp-python {built_for}; the installed one is "
                f"{llama_cpp.__version__} (remove it to rebuild)"
            )
        return glib


def graph_unavailable_reason() -> str:
    """'' when the in-graph sampler can be loaded, else why not."""
    try:
        graph_library()
    except GraphSamplerUnavailable as exc:
        return str(exc)
    return ""


class GraphSampler:
    """One in-graph sampler attached to sequence 0 of ``ctx`` (a llama_context_p) for
    ``params``. ``detach()`` (or ``close()``) gives the context its host logits back."""

    def __init__(self, ctx, params: SamplingParams, max_rows: int, n_top: Optional[int] = None):
        self._lib = graph_library()
        self.params = params
        self._err = ffi.new("pyspec_error *")
        handle = ffi.new("pyspec_graph_sampler **")
        address = ctypes.cast(ctx, ctypes.c_void_p).value
        c_params = ffi.new("pyspec_sampling_params *")
        params.fill(c_params)
        self._check(
            self._lib.pyspec_graph_sampler_attach(
                ffi.cast("void *", address),
                _SEQUENCE,
                c_params,
                -1 if n_top is None else n_top,
                handle,
                self._err,
            )
        )
        self._handle: Optional[object] = handle[0]
        self._tokens = ffi.new("int32_t[]", max_rows)
        self._max_rows = max_rows
        self.n_top = n_top
        self._logprobs: list = []  # the last read's rows, when n_top is set

    def _check(self, status: int) -> None:
        if status:
            raise_for_status(status, "in-graph sampler: " + ffi.string(self._err.message).decode())

    @property
    def attached(self) -> bool:
        return self._handle is not None

    def set_position(self, position: int) -> None:
        """The absolute position decided by the first output row of the next decode."""
        self._check(self._lib.pyspec_graph_sampler_set_position(self._handle, position, self._err))

    def set_history(self, history, drafts) -> None:
        """With penalties on: what the next decode's rows look back on (row r: history, then
        drafts[:r]); ``len(drafts) + 1`` rows. Call before each decode."""
        history = np.ascontiguousarray(history, dtype=np.int32)
        drafts = np.ascontiguousarray(drafts, dtype=np.int32)
        self._check(
            self._lib.pyspec_graph_sampler_set_history(
                self._handle,
                ffi.cast("const int32_t *", history.ctypes.data),
                history.size,
                ffi.cast("const int32_t *", drafts.ctypes.data),
                drafts.size + 1,
                self._err,
            )
        )

    def read(self, first_output: int, n_rows: int) -> np.ndarray:
        """The tokens sampled for outputs ``first_output ...`` of the last decode."""
        if not 1 <= n_rows <= self._max_rows:
            raise InvalidInputError(f"n_rows {n_rows} outside [1, {self._max_rows}]")
        self._check(
            self._lib.pyspec_graph_sampler_read(
                self._handle, first_output, n_rows, self._tokens, self._err
            )
        )
        tokens = np.frombuffer(ffi.buffer(self._tokens, 4 * n_rows), dtype=np.int32).copy()
        if self.n_top is not None:
            self._logprobs = self._read_logprobs(first_output, n_rows)
        return tokens

    def logprobs(self, row: int) -> RowLogprobs:
        """Row ``row`` of the last ``read`` (n_top set at attach): its sampled token's raw
        log-probability and its n_top most likely tokens, most likely first."""
        return self._logprobs[row]

    def _read_logprobs(self, first_output: int, n_rows: int) -> list:
        k = self.n_top
        token_lp = np.empty(n_rows, dtype=np.float32)
        ids = np.empty((n_rows, k), dtype=np.int32)
        lps = np.empty((n_rows, k), dtype=np.float32)
        self._check(
            self._lib.pyspec_graph_sampler_read_logprobs(
                self._handle,
                first_output,
                n_rows,
                ffi.cast("float *", token_lp.ctypes.data),
                ffi.cast("int32_t *", ids.ctypes.data),
                ffi.cast("float *", lps.ctypes.data),
                self._err,
            )
        )
        rows = []
        for i in range(n_rows):  # ggml_top_k keeps no order: most likely first, then lower id
            order = np.lexsort((ids[i], -lps[i]))
            rows.append(RowLogprobs(float(token_lp[i]), ids[i][order], lps[i][order]))
        return rows

    def detach(self) -> None:
        if self._handle is not None:
            self._lib.pyspec_graph_sampler_detach(self._handle)
            self._handle = None

    close = detach


def point_mass_result(sampled: np.ndarray, drafts: list) -> tuple:
    """(n_accepted, tokens) of a point-mass round from the rows' own samples: drafts are
    accepted while each equals its row's sample; the first row that differs (or the bonus
    row) emits its sample. The host verifier's rule for point-mass drafts."""
    n = 0
    while n < len(drafts) and int(sampled[n]) == drafts[n]:
        n += 1
    return n, [*drafts[:n], int(sampled[n])]


def sample_in_ggml(
    row, params: SamplingParams, positions, n_threads: int = 1, history=()
) -> np.ndarray:
    """The in-graph sampler's ops run by ggml's CPU back end on one host row of logits (no
    model): one draw per position, with that position's uniform (and with penalties on, the
    window of ``history``). The tokens a decode with the sampler attached would emit for
    this row at those positions; what the statistical tests draw thousands of samples with."""
    glib = graph_library()
    row = np.ascontiguousarray(row, dtype=np.float32)
    if row.ndim != 1 or not row.size:
        raise InvalidInputError(f"row must be one non-empty row of logits, got shape {row.shape}")
    positions = np.ascontiguousarray(positions, dtype=np.int64)
    if positions.ndim != 1:
        raise InvalidInputError(f"positions must be 1-D, got shape {positions.shape}")
    out = np.empty(positions.size, dtype=np.int32)
    c_params = ffi.new("pyspec_sampling_params *")
    params.fill(c_params)
    err = ffi.new("pyspec_error *")
    history = np.ascontiguousarray(history, dtype=np.int32)
    status = glib.pyspec_graph_sample_rows(
        ffi.cast("const float *", row.ctypes.data),
        row.size,
        c_params,
        ffi.cast("const int32_t *", history.ctypes.data),
        history.size,
        ffi.cast("const int64_t *", positions.ctypes.data),
        positions.size,
        n_threads,
        ffi.cast("int32_t *", out.ctypes.data),
        err,
    )
    if status:
        raise_for_status(status, "in-graph sampler: " + ffi.string(err.message).decode())
    return out
