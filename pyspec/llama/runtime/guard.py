"""Refuses, with the fix, a llama-cpp-python build that would crash on this CPU.

llama-cpp-python 0.3.36 built the default way (``GGML_NATIVE``) on a CPU that reports AMX
compiles ggml's AMX matrix multiply; on such a CPU the model's quantised weights are then
loaded into an AMX buffer and the first model call dies with SIGSEGV at ``ldtilecfg``
(llama.cpp issue #20824). A segfault cannot be caught, so pyspec checks before loading:
the build reports ``AMX_INT8 = 1`` among its CPU features *and* the CPU lists ``amx_int8``
and ``amx_tile``. Then ``pyspec demo``, ``pyspec generate`` and ``SpeculativeLlama`` raise
``UnsafeLlamaBuildError`` naming the problem and the fix (``python3 -m pyspec install-llama``,
which rebuilds with pyspec's fix to the AMX path), unless the build is pyspec's own AMX build:
its ggml CPU library carries the fix's marker (``llama_amx_fix.fix_version_in``).
``PYSPEC_ALLOW_AMX=1`` skips the check (for a llama.cpp that has the upstream fix).
"""

from __future__ import annotations

from pyspec.errors import LlamaNotInstalledError, UnsafeLlamaBuildError
from pyspec.llama.runtime.build_info import (
    LLAMA_ISSUE,
    build_features,
    cpu_flags,
    installed_amx_fix,
)
from pyspec.switches import switched_on

ALLOW_ENV = "PYSPEC_ALLOW_AMX"


def amx_crash_reason(system_info: str, flags: frozenset, fixed: bool = False) -> str:
    """Why this build would crash on a CPU with these flags ('' when it would not).
    ``fixed``: the build has pyspec's fix to the AMX tile setup (``install-llama`` on an AMX
    CPU)."""
    if build_features(system_info).get("AMX_INT8") != "1" or fixed:
        return ""
    if not {"amx_int8", "amx_tile"} <= set(flags):
        return ""
    return (
        f"the installed llama-cpp-python was built with ggml's AMX matrix multiply "
        f"(llama_print_system_info reports AMX_INT8 = 1) and this CPU reports AMX; "
        f"llama.cpp 0.3.36 loads quantised weights into an AMX buffer there and crashes "
        f"with a segmentation fault on the first model call ({LLAMA_ISSUE}). Fix: "
        f"`python3 -m pyspec install-llama` rebuilds llama-cpp-python with this CPU's SIMD "
        f"levels and ggml's AMX path with pyspec's fix to it (`--no-amx`: without AMX; "
        f"about 4-11 minutes on 2 cores). Set {ALLOW_ENV}=1 to skip "
        f"this check with a llama.cpp that has the upstream fix."
    )


def require_llama_cpp() -> None:
    """Raises LlamaNotInstalledError, with the command that installs it, when
    llama-cpp-python cannot be found (looked up without importing it)."""
    from importlib.util import find_spec

    if find_spec("llama_cpp") is None:
        raise LlamaNotInstalledError(
            "llama-cpp-python is not installed; `python3 -m pyspec install-llama` builds and "
            "installs it for this CPU (about 4-11 minutes on 2 cores, once)"
        )


def system_info() -> str:
    require_llama_cpp()
    import llama_cpp

    info = llama_cpp.llama_print_system_info()
    return info.decode(errors="replace") if isinstance(info, bytes) else str(info)


def check_llama_build() -> None:
    """Raises UnsafeLlamaBuildError when loading a model would crash (see the module doc)."""
    if switched_on(ALLOW_ENV):
        return
    reason = amx_crash_reason(system_info(), cpu_flags())
    # The fix's record is looked up (it hashes the cached wheels) only for an AMX build.
    if reason and installed_amx_fix() == 0:
        raise UnsafeLlamaBuildError(reason)
