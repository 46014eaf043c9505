"""pyspec: fast, exact speculative decoding for llama-cpp-python.

The heart is a fused multi-output verifier (``verify``): one call over all the verify rows
of a draft applies the sampling transforms, decides acceptance by modified rejection
sampling and draws the corrective or bonus token, in one pass per vocabulary-wide row.
"""

from pyspec._native.ffi import lib as _lib
from pyspec.errors import (
    AmxFixError,
    ArgumentTypeError,
    CapacityError,
    ClosedError,
    CudaUnavailableError,
    DraftProbsError,
    GraphSamplerUnavailable,
    InvalidInputError,
    InvalidRequestError,
    LlamaBuildError,
    LlamaNotInstalledError,
    LogitsError,
    PyspecError,
    PyspecRuntimeError,
    UnsafeLlamaBuildError,
    UsageError,
    VocabularyMismatchError,
)
from pyspec.params import SamplingParams
from pyspec.request import LogitsPointer, RowLogprobs, SparseDraftProbs, VerifyRequest, VerifyResult
from pyspec.rng import Purpose, philox4x32_10, uniform
from pyspec.verifier import (
    default_threads,
    distribution,
    distribution_sparse,
    row_logprobs,
    sample,
    verify,
    verify_batch,
    verify_from_pointer,
)


def _c_string(value) -> str:
    from pyspec._native.ffi import ffi

    return ffi.string(value).decode()


__version__ = _c_string(_lib.pyspec_version())
SIMD = _c_string(_lib.pyspec_simd_name())
HAS_CUDA = bool(_lib.pyspec_has_cuda())

from pyspec import cuda  # noqa: E402  (the CUDA back end; imports no GPU library)
from pyspec.cuda import cuda_available  # noqa: E402

# Every exception class of pyspec/errors.py, so that a caller catches any of them as
# pyspec.<Name> (a closed SpeculativeLlama's ClosedError as well as a bad row's LogitsError).
__all__ = [
    "AmxFixError",
    "ArgumentTypeError",
    "CapacityError",
    "ClosedError",
    "CudaUnavailableError",
    "DraftProbsError",
    "GraphSamplerUnavailable",
    "InvalidInputError",
    "InvalidRequestError",
    "LlamaBuildError",
    "LlamaNotInstalledError",
    "LogitsError",
    "PyspecError",
    "PyspecRuntimeError",
    "UnsafeLlamaBuildError",
    "UsageError",
    "VocabularyMismatchError",
    "Purpose",
    "SamplingParams",
    "SparseDraftProbs",
    "VerifyRequest",
    "VerifyResult",
    "default_threads",
    "distribution",
    "distribution_sparse",
    "LogitsPointer",
    "philox4x32_10",
    "RowLogprobs",
    "row_logprobs",
    "sample",
    "uniform",
    "verify",
    "verify_batch",
    "verify_from_pointer",
    "SIMD",
    "HAS_CUDA",
    "cuda",
    "cuda_available",
]
