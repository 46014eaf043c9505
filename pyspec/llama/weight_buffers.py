"""Where llama.cpp keeps a model's weights: ggml's extra buffer types, on or off.

On a CPU, llama.cpp 0.3.36 loads quantised weights into an "extra" buffer type when one
takes them: the AMX buffer (tiles packed for ``tdpbssd``, AMX builds only) or the CPU
repack buffer (rows interleaved for the AVX2/AVX-512 GEMM kernels). With
``use_extra_bufts`` off, the weights stay as the file has them and every matrix multiply
goes through ggml's generic vec-dot kernels: slower, but a reference computed without AMX
and without repacking, in the same build.

llama-cpp-python's ``Llama`` has no argument for that field of ``llama_model_params``; it
fills the struct from ``llama_model_default_params()`` inside ``__init__``. So
``model_params(use_extra_bufts=False)`` wraps that function for the duration of a
construction (under a lock: the wrapped function is a module attribute).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from pyspec.errors import InvalidInputError

_LOCK = threading.Lock()


@contextmanager
def model_params(**fields):
    """Llamas constructed inside get these ``llama_model_params`` fields set."""
    import llama_cpp.llama_cpp as low

    known = {name for name, _ in low.llama_model_params._fields_}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise InvalidInputError(
            f"llama_model_params has no field {', '.join(unknown)} in this "
            f"llama-cpp-python (fields: {', '.join(sorted(known))})"
        )
    with _LOCK:
        original = low.llama_model_default_params

        def with_fields():
            params = original()
            for name, value in fields.items():
                setattr(params, name, value)
            return params

        low.llama_model_default_params = with_fields
        try:
            yield
        finally:
            low.llama_model_default_params = original
