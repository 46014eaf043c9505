"""pyspec's Q4_K kernel for x86 builds with AVX2 (AVX-512 VNNI where built for it), added to
llama-cpp-python's vendored llama.cpp.

Why: on the AMD EPYCs (Zen 4, Zen 5: AVX-512 with VNNI, no AMX) a verify pass over 2 tokens
cost 1.64x one token and over 4 tokens 2.6x (docs/drafting.md, "Where a Zen 5's verify pass
goes"). One token's pass waits on memory; every further token is arithmetic in llama.cpp's
AVX2 kernels for the repacked Q4_K weights (``ggml_gemv_q4_K_8x8_q8_K`` once per token for
the 1-3 tokens past a multiple of 4, ``ggml_gemm_q4_K_8x8_q8_K`` for groups of 4, which costs
2.95x one GEMV). ``pyspec_q4k_kernel.h`` (next to this file) multiplies the same repacked
blocks by 1-4 token rows at once, loading and unpacking each block once for all of them: with
AVX-512 VNNI where the build targets it, with AVX2 otherwise (an AVX2 CPU such as AMD's Zen 3,
``--simd avx2``); its integer sums are exact and its float steps the GEMV's, so each token's
result is bitwise the GEMV's, whatever the batch and the variant (``tests/test_q4k_kernel.py``
checks both against the installed library's own GEMV).

What changes in ``ggml/src/ggml-cpu/repack.cpp`` (exact text replacements; a source that
does not match is refused, not half patched): the header is included where the compiler
targets AVX2, FMA and F16C; for the Q4_K 8x8 layout with Q8_K activations the
activations are quantized row by row (not in ggml's interleaved groups of 4) and every
chunk with more than one token goes through ``pyspec_q4kx8_gemv``. Other types, and builds
without those flags, are untouched. ``KERNEL_VERSION`` goes into the build key and the build
record; the built library carries a marker string (``kernel_version_in`` reads it back).
"""

from __future__ import annotations

import re
from pathlib import Path

from pyspec.llama.runtime.markers import marker_version_in
from pyspec.llama.runtime.source_patch import patch_tree, replace_once

KERNEL_VERSION = 3  # 3: an AVX2 variant; 2: the mins read with unaligned loads
HEADER = Path(__file__).with_name("pyspec_q4k_kernel.h")
REPACK_PATH = Path("vendor/llama.cpp/ggml/src/ggml-cpu/repack.cpp")
HEADER_DEST = Path("vendor/llama.cpp/ggml/src/ggml-cpu/arch/x86/pyspec_q4k_kernel.h")
MARKER = "pyspec Q4_K kernel"
_BUILT_MARKER = re.compile(rb"pyspec Q4_K kernel version (\d+)\0")
# The CMake flags under which the compiler targets what the kernel needs (pyspec's builds pass
# every SIMD level explicitly; AVX-512 VNNI on top selects the 512-bit variant).
NEEDED_FLAGS = ("-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON")

_INCLUDE_AFTER = '#include "arch-fallback.h"\n'
_INCLUDE = f"""
// {MARKER} (version {KERNEL_VERSION}): added by pyspec install-llama
// (pyspec/llama/runtime/q4k_kernel.py).
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define PYSPEC_Q4K_KERNEL 1
#include "arch/x86/pyspec_q4k_kernel.h"
#include <type_traits>
__attribute__((used)) static const char pyspec_q4k_marker[] =
    "{MARKER} version {KERNEL_VERSION}";
#endif
"""
# tensor_traits' members: whether this instance's rows go through pyspec's kernel.
_CLASS_HEAD = (
    "template <typename BLOC_TYPE, int64_t INTER_SIZE, int64_t NB_COLS, ggml_type PARAM_TYPE> "
    "class tensor_traits : public tensor_traits_base {\n"
)
_CLASS_MEMBER = """#ifdef PYSPEC_Q4K_KERNEL
    static constexpr bool pyspec_rows = std::is_same<BLOC_TYPE, block_q4_K>::value &&
                                        INTER_SIZE == 8 && NB_COLS == 8 &&
                                        PARAM_TYPE == GGML_TYPE_Q8_K;
#else
    static constexpr bool pyspec_rows = false;
#endif
"""
_CHUNK_OLD = """        // If there are more than three rows in src1, use gemm; otherwise, use gemv.
        if (nrows > 3) {"""
_CHUNK_NEW = """#ifdef PYSPEC_Q4K_KERNEL
        if constexpr (pyspec_rows) {
            if (nrows > 1) {  // (one row: ggml's GEMV, which streams the weights faster alone)
                __asm__ __volatile__("" : : "r"(pyspec_q4k_marker));
                pyspec_q4kx8_gemv((int) ne00, (float *) dst_ptr + src0_start, nb1 / nb0,
                                  src0_ptr + src0_start * nb01, src1_ptr, (int) nrows, (int) ncols);
                return;
            }
        }
#endif
        // If there are more than three rows in src1, use gemm; otherwise, use gemv.
        if (nrows > 3) {"""
_QUANT_OLD = """            for (int64_t i11 = ith * 4; i11 < ne11 - ne11 % 4; i11 += nth * 4) {"""
_QUANT_NEW = """            // (pyspec's kernel reads plain Q8_K rows, none in 4s)
            const int64_t grouped = pyspec_rows ? 0 : ne11 - ne11 % 4;
            for (int64_t i11 = ith * 4; i11 < grouped; i11 += nth * 4) {"""
_PROCESSED_OLD = """            const int64_t i11_processed = ne11 - ne11 % 4;"""
_PROCESSED_NEW = """            const int64_t i11_processed = grouped;"""


def applies_to(cmake_args) -> bool:
    """Whether a build with these CMake arguments compiles the kernel in."""
    return all(flag in cmake_args for flag in NEEDED_FLAGS)


def kernel_version_in(library: Path) -> int:
    """The version of the kernel compiled into this library file (0: none)."""
    return marker_version_in(library, _BUILT_MARKER)


def _replace_once(text: str, old: str, new: str, what: str) -> str:
    return replace_once(text, old, new, what=what, kernel="Q4_K kernel", file="repack.cpp")


def patch_source(text: str) -> str:
    """repack.cpp's text with the kernel wired in (idempotent)."""
    if MARKER in text:
        return text
    text = _replace_once(
        text, _INCLUDE_AFTER, _INCLUDE_AFTER + _INCLUDE, "the arch-fallback include"
    )
    text = _replace_once(text, _CLASS_HEAD, _CLASS_HEAD + _CLASS_MEMBER, "tensor_traits")
    text = _replace_once(text, _CHUNK_OLD, _CHUNK_NEW, "the chunk's gemm/gemv choice")
    text = _replace_once(text, _QUANT_OLD, _QUANT_NEW, "the grouped quantization")
    return _replace_once(text, _PROCESSED_OLD, _PROCESSED_NEW, "the rows left over")


def apply_to_tree(source_dir: Path) -> Path:
    """Adds the kernel to an unpacked llama-cpp-python sdist in place; returns repack.cpp."""
    return patch_tree(source_dir, REPACK_PATH, HEADER, HEADER_DEST, patch_source)
