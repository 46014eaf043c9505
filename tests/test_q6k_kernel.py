"""pyspec's Q6_K kernel for x86 builds (pyspec/llama/runtime/q6k_kernel.py and
pyspec_q6k_kernel.h): the patching step on llama.cpp's real ggml-cpu.c, its refusals, the build's
marker, and the kernel itself (both variants), compiled and run against the installed library's own
``ggml_vec_dot_q6_K_q8_K`` on random blocks: every (weight row, token) result must be bitwise
the dot product's, for 1 to 7 tokens (the kernel takes them 4 at a time), row ranges that do
not fill its blocks of 16, and three row lengths."""

import pytest
from kernel_checks import run_against_installed_library, vendored_source

from pyspec.llama.runtime import q6k_kernel
from pyspec.tools.install_llama import LlamaBuildError

HARNESS = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pyspec_q6k_kernel.h"

void ggml_vec_dot_q6_K_q8_K(int n, float * s, size_t bs, const void * vx, size_t bx,
                            const void * vy, size_t by, int nrc);
void quantize_row_q8_K(const float * x, void * y, int64_t k);
void ggml_cpu_init(void);

int main(void) {
    ggml_cpu_init();
    srand(11);
    const int lengths[] = {256, 1536, 8960};
    const int rows = 37, tokens = 7;
    int bad = 0, checked = 0;
    for (int s = 0; s < 3; s++) {
        const int n = lengths[s], nb = n / 256;
        pyspec_q6k_block * w = malloc(sizeof(pyspec_q6k_block) * nb * rows);
        for (int i = 0; i < nb * rows; i++) {
            for (int j = 0; j < 128; j++) w[i].ql[j] = (uint8_t) rand();
            for (int j = 0; j < 64; j++) w[i].qh[j] = (uint8_t) rand();
            for (int j = 0; j < 16; j++) w[i].scales[j] = (int8_t) rand();  // -128..127
            w[i].d = _cvtss_sh(1e-4f + 0.02f * rand() / RAND_MAX, 0);
        }
        float * x = malloc(sizeof(float) * n * tokens);
        for (int i = 0; i < n * tokens; i++) x[i] = (float) rand() / RAND_MAX * 8 - 4;
        x[5] = 1000.0f;  // a token with one large activation
        pyspec_q6k_q8k_block * a = malloc(sizeof(pyspec_q6k_q8k_block) * nb * tokens);
        for (int t = 0; t < tokens; t++) quantize_row_q8_K(x + t * n, a + t * nb, n);
        const size_t y_stride = sizeof(pyspec_q6k_q8k_block) * nb;
        const size_t w_stride = sizeof(pyspec_q6k_block) * nb;
        for (int ntok = 1; ntok <= tokens; ntok++) {
            for (int start = 0; start <= 5; start += 5) {  // row ranges [0, 37) and [5, 37)
                const size_t dst_stride = sizeof(float) * (rows + 3);
                float * got = malloc(dst_stride * ntok);
                for (int i = 0; i < (rows + 3) * ntok; i++) got[i] = NAN;
                pyspec_q6k_mul_mat(n, (const char *) w, w_stride, start, rows, (const char *) a,
                                   y_stride, ntok, (char *) got, dst_stride);
                for (int t = 0; t < ntok; t++) {
                    const float * column = (const float *) ((const char *) got + t * dst_stride);
                    for (int r = 0; r < rows + 3; r++) {
                        float ref = NAN;  // (rows outside the range must stay untouched)
                        if (r >= start && r < rows)
                            ggml_vec_dot_q6_K_q8_K(n, &ref, 0, w + (size_t) r * nb, 0,
                                                   a + t * nb, 0, 1);
                        checked++;
                        const int same = memcmp(&ref, &column[r], sizeof(float)) == 0 ||
                                         (isnan(ref) && isnan(column[r]));
                        if (!same && bad++ < 5)
                            printf("n=%d tokens=%d row %d token %d: %.9g against %.9g\n", n,
                                   ntok, r, t, column[r], ref);
                    }
                }
                free(got);
            }
        }
        free(w); free(x); free(a);
    }
    printf("%d of %d results differ\n", bad, checked);
    return bad != 0;
}
"""

# The parts of ggml-cpu.c the patch anchors on, in their shape.
SOURCE_SHAPE = """#include "tiled/tiled.h"
static void ggml_compute_forward_mul_mat_one_chunk(void) {
    float tmp[32];

    for (int64_t iir1 = ir1_start; iir1 < ir1_end; iir1 += blck_1) {
    }
}
void ggml_compute_forward_mul_mat(void) {
    // If tiled is supported, it will execute the full op here and we return
    if (ggml_compute_forward_mul_mat_tiled(params, dst)) {
    }
    // We need to step up the size if it's small
    if (nr0 == 1 || nr1 == 1) {
        chunk_size = 64;
    }
}
"""


def test_the_kernel_is_wired_into_the_vendored_ggml_cpu_c():
    source = vendored_source(q6k_kernel.SOURCE_PATH)
    patched = q6k_kernel.patch_source(source)
    assert q6k_kernel.MARKER in patched and patched.count("pyspec_q6k_mul_mat(") == 1
    assert patched.count("chunk_size = 64;  // pyspec") == 1
    assert "if (!pyspec_q6k && ggml_compute_forward_mul_mat_tiled(params, dst)) {" in patched
    assert q6k_kernel.patch_source(patched) == patched  # idempotent
    # everything else is left as it was
    assert len(patched.splitlines()) - len(source.splitlines()) < 55


def test_a_source_it_was_not_written_for_is_refused_untouched(tmp_path):
    assert q6k_kernel.MARKER in q6k_kernel.patch_source(SOURCE_SHAPE)
    for anchor in ('"tiled/tiled.h"', "float tmp[32];", "step up the size", "full op here"):
        with pytest.raises(LlamaBuildError, match="not the one the kernel is for"):
            q6k_kernel.patch_source(SOURCE_SHAPE.replace(anchor, "something else"))
    target = tmp_path / q6k_kernel.SOURCE_PATH
    with pytest.raises(LlamaBuildError, match="not a llama-cpp-python source tree"):
        q6k_kernel.apply_to_tree(tmp_path)
    target.parent.mkdir(parents=True)
    target.write_text(SOURCE_SHAPE)
    with pytest.raises(LlamaBuildError, match="no x86 sources"):
        q6k_kernel.apply_to_tree(tmp_path)
    (target.parent / "arch" / "x86").mkdir(parents=True)
    target.write_text(SOURCE_SHAPE.replace("float tmp[32];", "float tmp[64];"))
    with pytest.raises(LlamaBuildError):
        q6k_kernel.apply_to_tree(tmp_path)
    assert q6k_kernel.MARKER not in target.read_text()
    assert not (tmp_path / q6k_kernel.HEADER_DEST).exists()
    target.write_text(SOURCE_SHAPE)
    assert q6k_kernel.apply_to_tree(tmp_path) == target
    assert (tmp_path / q6k_kernel.HEADER_DEST).read_text() == q6k_kernel.HEADER.read_text()


def test_the_marker_is_read_from_a_library_file(tmp_path):
    library = tmp_path / "libggml-cpu.so"
    library.write_bytes(b"\x7fELF" + f"{q6k_kernel.MARKER} version 4".encode() + b"\0tail")
    assert q6k_kernel.kernel_version_in(library) == 4
    library.write_bytes(b"\x7fELF pyspec Q4_K kernel version 2\0")
    assert q6k_kernel.kernel_version_in(library) == 0
    assert q6k_kernel.kernel_version_in(tmp_path / "absent.so") == 0


@pytest.mark.parametrize("variant", ["vnni", "avx2"])
def test_the_kernel_gives_ggml_dot_products_bit_for_bit(tmp_path, variant):
    printed = run_against_installed_library(
        HARNESS, q6k_kernel.HEADER.parent, tmp_path, cpp=False, variant=variant
    )
    assert all(line.startswith("0 of ") for line in printed.splitlines()), printed
