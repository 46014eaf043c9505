"""pyspec's Q4_K kernel for x86 builds (pyspec/llama/runtime/q4k_kernel.py and
pyspec_q4k_kernel.h): the patching step on llama.cpp's real repack.cpp, its refusals, the
build's marker, and the kernel itself (both variants), compiled and run against the installed
library's own Q4_K GEMV on random blocks: every row's result must be bitwise the GEMV's, for 1
to 9 token rows (the kernel takes them 4 at a time) and for matrices of several shapes."""

import pytest
from kernel_checks import run_against_installed_library, vendored_source

from pyspec.llama.runtime import q4k_kernel
from pyspec.tools.install_llama import LlamaBuildError, derived_cmake_args

HARNESS = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "pyspec_q4k_kernel.h"

extern "C" {
void ggml_gemv_q4_K_8x8_q8_K(int n, float * s, size_t bs, const void * vx, const void * vy,
                             int nr, int nc);
void quantize_row_q8_K(const float * x, void * y, int64_t k);
void ggml_cpu_init(void);
}

int main() {
    ggml_cpu_init();
    srand(7);
    const int shapes[][2] = {{256, 8}, {1536, 64}, {8960, 24}, {2048, 40}};
    int bad = 0, checked = 0;
    for (auto & shape : shapes) {
        const int n = shape[0], nc = shape[1], nb = n / 256;
        std::vector<pyspec_q4kx8> w((size_t) nc / 8 * nb);
        for (auto & b : w) {
            for (int j = 0; j < 8; j++) {
                b.d[j] = _cvtss_sh(1e-4f + 0.02f * rand() / RAND_MAX, 0);
                b.dmin[j] = _cvtss_sh(1e-4f + 0.02f * rand() / RAND_MAX, 0);
            }
            for (auto & v : b.scales) v = (uint8_t) rand();  // every 6-bit scale and min
            for (auto & v : b.qs) v = (uint8_t) rand();
        }
        const int rows = 9;
        std::vector<float> x((size_t) n * rows);
        for (size_t i = 0; i < x.size(); i++) x[i] = (float) rand() / RAND_MAX * 8 - 4;
        x[3] = 1000.0f;  // a row with one large activation: its scale, and bsums near the limit
        std::vector<pyspec_q8k> a((size_t) nb * rows);
        for (int r = 0; r < rows; r++)
            quantize_row_q8_K(x.data() + (size_t) r * n, a.data() + (size_t) r * nb, n);
        for (int nr = 1; nr <= rows; nr++) {
            std::vector<float> ref((size_t) nr * nc), got((size_t) nr * nc, NAN);
            for (int r = 0; r < nr; r++)
                ggml_gemv_q4_K_8x8_q8_K(n, ref.data() + (size_t) r * nc, nc, w.data(),
                                        a.data() + (size_t) r * nb, 1, nc);
            pyspec_q4kx8_gemv(n, got.data(), nc, w.data(), a.data(), nr, nc);
            for (size_t i = 0; i < ref.size(); i++, checked++)
                if (memcmp(&ref[i], &got[i], sizeof(float)) != 0) {
                    if (bad++ < 5)
                        printf("n=%d nc=%d rows=%d [%zu]: %.9g against %.9g\n", n, nc, nr, i,
                               got[i], ref[i]);
                }
        }
    }
    printf("%d of %d results differ\n", bad, checked);
    return bad != 0;
}
"""

REPACK_SHAPE = (
    (
        '#include "arch-fallback.h"\n'
        "template <typename BLOC_TYPE, int64_t INTER_SIZE, int64_t NB_COLS, ggml_type PARAM_TYPE> "
        "class tensor_traits : public tensor_traits_base {\n"
    )
    + """    void chunk() {
        // If there are more than three rows in src1, use gemm; otherwise, use gemv.
        if (nrows > 3) {
        }
    }
    void quantize() {
            for (int64_t i11 = ith * 4; i11 < ne11 - ne11 % 4; i11 += nth * 4) {
            }
            const int64_t i11_processed = ne11 - ne11 % 4;
    }
};
"""
)


def test_the_kernel_is_wired_into_the_vendored_repack_cpp():
    source = vendored_source(q4k_kernel.REPACK_PATH)
    patched = q4k_kernel.patch_source(source)
    assert q4k_kernel.MARKER in patched and patched.count("pyspec_q4kx8_gemv(") == 1
    assert "const int64_t grouped = pyspec_rows ? 0 : ne11 - ne11 % 4;" in patched
    assert patched.count("static constexpr bool pyspec_rows") == 2  # (with the kernel, without)
    assert q4k_kernel.patch_source(patched) == patched  # idempotent
    # everything else is left as it was
    assert len(patched.splitlines()) - len(source.splitlines()) < 40


def test_a_source_it_was_not_written_for_is_refused_untouched(tmp_path):
    assert q4k_kernel.MARKER in q4k_kernel.patch_source(REPACK_SHAPE)
    for anchor in ("use gemm; otherwise", "i11_processed = ne11", "class tensor_traits"):
        changed = REPACK_SHAPE.replace(anchor, "something else")
        with pytest.raises(LlamaBuildError, match="not the one the kernel is for"):
            q4k_kernel.patch_source(changed)
    target = tmp_path / q4k_kernel.REPACK_PATH
    with pytest.raises(LlamaBuildError, match="not a llama-cpp-python source tree"):
        q4k_kernel.apply_to_tree(tmp_path)
    target.parent.mkdir(parents=True)
    (target.parent / "arch" / "x86").mkdir(parents=True)
    target.write_text(REPACK_SHAPE.replace("class tensor_traits", "class other"))
    with pytest.raises(LlamaBuildError):
        q4k_kernel.apply_to_tree(tmp_path)
    assert "class other" in target.read_text() and q4k_kernel.MARKER not in target.read_text()
    assert not (tmp_path / q4k_kernel.HEADER_DEST).exists()
    target.write_text(REPACK_SHAPE)
    assert q4k_kernel.apply_to_tree(tmp_path) == target
    assert (tmp_path / q4k_kernel.HEADER_DEST).read_text() == q4k_kernel.HEADER.read_text()


def test_it_applies_to_x86_builds_with_avx2_fma_and_f16c():
    zen5 = frozenset(
        {
            "avx2",
            "fma",
            "f16c",
            "bmi2",
            "avx512f",
            "avx512cd",
            "avx512vl",
            "avx512dq",
            "avx512bw",
            "avx512_vnni",
            "avx512_bf16",
            "avx512vbmi",
        }
    )
    zen3 = frozenset({"avx2", "fma", "f16c", "bmi2"})
    sandy_bridge = frozenset({"sse4_2", "avx"})
    assert q4k_kernel.applies_to(derived_cmake_args(zen5, "x86_64"))
    assert q4k_kernel.applies_to(derived_cmake_args(zen3, "x86_64"))
    assert q4k_kernel.applies_to(derived_cmake_args(zen5, "x86_64", simd="avx2"))
    assert not q4k_kernel.applies_to(derived_cmake_args(zen3 - {"fma"}, "x86_64"))
    assert not q4k_kernel.applies_to(derived_cmake_args(sandy_bridge, "x86_64"))
    assert not q4k_kernel.applies_to(derived_cmake_args(zen5, "aarch64"))


def test_the_marker_is_read_from_a_library_file(tmp_path):
    library = tmp_path / "libggml-cpu.so"
    library.write_bytes(b"\x7fELF" + f"{q4k_kernel.MARKER} version 3".encode() + b"\0tail")
    assert q4k_kernel.kernel_version_in(library) == 3
    library.write_bytes(b"\x7fELF" + q4k_kernel.MARKER.encode() + b" without a version\0")
    assert q4k_kernel.kernel_version_in(library) == 0
    assert q4k_kernel.kernel_version_in(tmp_path / "absent.so") == 0


@pytest.mark.parametrize("variant", ["vnni", "avx2"])
def test_the_kernel_gives_ggml_gemvs_results_bit_for_bit(tmp_path, variant):
    printed = run_against_installed_library(
        HARNESS, q4k_kernel.HEADER.parent, tmp_path, cpp=True, variant=variant
    )
    assert all(line.startswith("0 of ") for line in printed.splitlines()), printed
