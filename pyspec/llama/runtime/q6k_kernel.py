"""pyspec's Q6_K kernel for x86 builds with AVX2 (AVX-512 VNNI where built for it), added to
llama-cpp-python's vendored llama.cpp.

Why: after the Q4_K kernel (``q4k_kernel.py``), the Q6_K matrices of a Q4_K_M model (the
output matrix, and some layers' attention values and feed-forward down projections) are the
next cost of a verify pass: llama.cpp has no repacked Q6_K layout on x86, so ``mul_mat``
calls ``ggml_vec_dot_q6_K_q8_K`` once per (weight row, token) pair, unpacking every 6-bit
weight again for each token (34% of a 2-token pass on the Zen 5, docs/llama-build.md).
``pyspec_q6k_kernel.h`` (next to this file) unpacks each weight block once for up to 4 tokens
and sums with AVX-512 VNNI where the build targets it, with AVX2 otherwise; every token's
result is formed as the AVX2 dot forms it, so it is bitwise the same whatever the batch and
the variant (``tests/test_q6k_kernel.py`` checks both against the installed library's own dot
product).

What changes in ``ggml/src/ggml-cpu/ggml-cpu.c`` (exact text replacements; a source that does
not match is refused, not half patched): the header is included where the compiler targets
AVX2, FMA and F16C; a ``mul_mat`` chunk over a Q6_K matrix with more than one
token goes through ``pyspec_q6k_mul_mat``, and Q6_K matrices are cut into chunks of 64 rows
(ggml's size for one token) rather than 16. One token keeps ggml's loop (a one-token pass
waits on memory, not on the unpacking: the kernel timed the same there), and from 33 tokens
on ggml's own tiled path keeps the matrix (it takes them from 8 tokens on otherwise).
``KERNEL_VERSION`` goes into the build key and the build record; the built library carries a
marker string (``kernel_version_in`` reads it back).
"""

from __future__ import annotations

import re
from pathlib import Path

from pyspec.llama.runtime.markers import marker_version_in

# The Q4_K kernel's condition: the same flags (AVX2, FMA and F16C) compile both in.
from pyspec.llama.runtime.q4k_kernel import applies_to  # noqa: F401
from pyspec.llama.runtime.source_patch import patch_tree, replace_once

KERNEL_VERSION = 3  # 3: an AVX2 variant; 2: also 8-32 tokens (1 left them to the tiled path)
HEADER = Path(__file__).with_name("pyspec_q6k_kernel.h")
SOURCE_PATH = Path("vendor/llama.cpp/ggml/src/ggml-cpu/ggml-cpu.c")
HEADER_DEST = Path("vendor/llama.cpp/ggml/src/ggml-cpu/arch/x86/pyspec_q6k_kernel.h")
MARKER = "pyspec Q6_K kernel"
_BUILT_MARKER = re.compile(rb"pyspec Q6_K kernel version (\d+)\0")

_INCLUDE_AFTER = '#include "tiled/tiled.h"\n'
_INCLUDE = f"""
// {MARKER} (version {KERNEL_VERSION}): added by pyspec install-llama
// (pyspec/llama/runtime/q6k_kernel.py).
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define PYSPEC_Q6K_KERNEL 1
#include "arch/x86/pyspec_q6k_kernel.h"
__attribute__((used)) static const char pyspec_q6k_marker[] =
    "{MARKER} version {KERNEL_VERSION}";
#endif
"""
_CHUNK_OLD = """    float tmp[32];

    for (int64_t iir1 = ir1_start; iir1 < ir1_end; iir1 += blck_1) {"""
_CHUNK_NEW = """    float tmp[32];

#ifdef PYSPEC_Q6K_KERNEL
    // pyspec: the tokens of a Q6_K matrix's chunk through pyspec's kernel, each weight row
    // unpacked once for up to 4 of them (every result bitwise the loop's below).
    if (type == GGML_TYPE_Q6_K && num_rows_per_vec_dot == 1 && ir1_end - ir1_start > 1 &&
        (src1_cont || src1->type != vec_dot_type)) {
        __asm__ __volatile__("" : : "r"(pyspec_q6k_marker));
        for (int64_t ir1 = ir1_start; ir1 < ir1_end; ) {
            const int64_t i13 = ir1 / (ne12 * ne1);
            const int64_t i12 = (ir1 - i13 * ne12 * ne1) / ne1;
            const int64_t i11 = ir1 - i13 * ne12 * ne1 - i12 * ne1;
            // the chunk's tokens that share this src0 matrix
            const int64_t ncols = MIN(ir1_end - ir1, ne1 - i11);
            const char * weights =
                (const char *) src0->data + (i12 / r2) * nb02 + (i13 / r3) * nb03;
            const char * tokens =
                (const char *) wdata + (i11 + i12 * ne11 + i13 * ne12 * ne11) * row_size;
            char * out = (char *) dst->data + i11 * nb1 + i12 * nb2 + i13 * nb3;
            pyspec_q6k_mul_mat((int) ne00, weights, nb01, ir0_start, ir0_end, tokens, row_size,
                               (int) ncols, out, nb1);
            ir1 += ncols;
        }
        return;
    }
#endif

    for (int64_t iir1 = ir1_start; iir1 < ir1_end; iir1 += blck_1) {"""

# Chunks of 64 weight rows (ggml's size for one token) rather than 16: each thread then reads
# 80 KB runs of the file mapping, not 20 KB ones (2 tokens: 31.5 -> 28 ms on the Zen 5).
_SIZE_OLD = """    // We need to step up the size if it's small
    if (nr0 == 1 || nr1 == 1) {
        chunk_size = 64;
    }"""
_SIZE_NEW = """    // We need to step up the size if it's small
    if (nr0 == 1 || nr1 == 1) {
        chunk_size = 64;
    }
#ifdef PYSPEC_Q6K_KERNEL
    if (src0->type == GGML_TYPE_Q6_K) {
        chunk_size = 64;  // pyspec: longer runs of the weights per thread
    }
#endif"""

# ggml's tiled path takes a Q6_K matrix from 8 tokens on; pyspec's kernel is faster up to 32
# (Zen 5, ms per pass: 8 tokens 80 -> 51.5, 16: 107 -> 93, 24: 145 -> 130; 33: 185-195 either
# way; 64: 316 against 340), so the tiled path keeps only the longer batches (prompts).
_TILED_OLD = """    // If tiled is supported, it will execute the full op here and we return
    if (ggml_compute_forward_mul_mat_tiled(params, dst)) {"""
_TILED_NEW = """    // If tiled is supported, it will execute the full op here and we return
#ifdef PYSPEC_Q6K_KERNEL
    // pyspec: a Q6_K matrix times up to PYSPEC_Q6K_MAX_TOKENS tokens goes to pyspec's kernel
    const bool pyspec_q6k = src0->type == GGML_TYPE_Q6_K && src1->ne[1] <= PYSPEC_Q6K_MAX_TOKENS;
#else
    const bool pyspec_q6k = false;
#endif
    if (!pyspec_q6k && ggml_compute_forward_mul_mat_tiled(params, dst)) {"""


def kernel_version_in(library: Path) -> int:
    """The version of the kernel compiled into this library file (0: none)."""
    return marker_version_in(library, _BUILT_MARKER)


def _replace_once(text: str, old: str, new: str, what: str) -> str:
    return replace_once(text, old, new, what=what, kernel="Q6_K kernel", file="ggml-cpu.c")


def patch_source(text: str) -> str:
    """ggml-cpu.c's text with the kernel wired in (idempotent)."""
    if MARKER in text:
        return text
    text = _replace_once(text, _INCLUDE_AFTER, _INCLUDE_AFTER + _INCLUDE, "the tiled include")
    text = _replace_once(text, _CHUNK_OLD, _CHUNK_NEW, "mul_mat's chunk loop")
    text = _replace_once(text, _TILED_OLD, _TILED_NEW, "mul_mat's tiled path")
    return _replace_once(text, _SIZE_OLD, _SIZE_NEW, "mul_mat's chunk size")


def apply_to_tree(source_dir: Path) -> Path:
    """Adds the kernel to an unpacked llama-cpp-python sdist in place; returns ggml-cpu.c."""
    return patch_tree(source_dir, SOURCE_PATH, HEADER, HEADER_DEST, patch_source)
