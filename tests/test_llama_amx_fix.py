"""pyspec's fix to ggml's AMX tile setup (pyspec/llama/runtime/amx_fix.py): the patching step, and
the replacement function compiled with the AMX flags (any x86 host) and, on a CPU with
AMX, run: the tile configuration the CPU holds afterwards, read back with
``_tile_storeconfig``, must be the one ggml's kernels expect, in every thread."""

import platform
import shutil
import subprocess

import pytest

from pyspec.llama.runtime.amx_fix import (
    FIX_VERSION,
    MARKER,
    AmxFixError,
    apply_to_tree,
    fix_version_in,
    patch_source,
    replacement,
)
from pyspec.tools.install_llama import cpu_flags

# The shape of the function the fix replaces, written here from its description (a stack
# struct filled member by member, then loaded).
VENDORED_SHAPE = """#include <immintrin.h>
struct tile_config_t { unsigned char palette_id = 0; unsigned char start_row = 0; };

inline void ggml_tile_config_init(void) {
    static thread_local bool done = false;
    if (done) { return; }
    alignas(64) tile_config_t tc = {};
    tc.palette_id = 1;
    _tile_loadconfig(&tc);
    done = true;
}

int after_it() { return 0; }
"""

HARNESS = r"""
#include <immintrin.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <unistd.h>
#include <sys/syscall.h>

namespace {
@FUNCTION@
}

static int check() {
    ggml_tile_config_init();
    alignas(64) uint8_t got[64];
    memset(got, 0xAA, sizeof(got));
    _tile_storeconfig(got);
    const uint8_t rows[8] = {8, 8, 16, 16, 16, 16, 16, 16};
    const uint16_t colsb[8] = {64, 64, 32, 32, 64, 64, 64, 64};
    int ok = got[0] == 1 && got[1] == 0;
    for (int i = 0; i < 16; i++) {
        uint16_t c = (uint16_t)(got[16 + 2 * i] | got[17 + 2 * i] << 8);
        ok &= i < 8 ? (got[48 + i] == rows[i] && c == colsb[i]) : (got[48 + i] == 0 && c == 0);
    }
    return ok;
}

int main() {
    // Linux hands out the AMX tile state only on request (ARCH_REQ_XCOMP_PERM, XTILEDATA).
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) { puts("no AMX permission"); return 2; }
    int good = check(), in_threads = 0;
    std::thread a([&] { in_threads += check(); });
    a.join();
    std::thread b([&] { in_threads += check(); });
    b.join();
    printf("main %d threads %d\n", good, in_threads);
    return good && in_threads == 2 ? 0 : 1;
}
"""

x86_only = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"), reason="AMX is x86-only"
)


def test_the_function_is_replaced_once_and_the_rest_kept():
    patched = patch_source(VENDORED_SHAPE)
    assert MARKER in patched and "_tile_loadconfig(&tc)" not in patched
    assert patched.count("inline void ggml_tile_config_init(void)") == 1
    assert "int after_it() { return 0; }" in patched and "#include <cstring>" in patched
    assert patch_source(patched) == patched  # idempotent


def test_an_unexpected_source_is_refused():
    with pytest.raises(AmxFixError, match="found 0"):
        patch_source("int main() { return 0; }\n")
    changed = VENDORED_SHAPE.replace("_tile_loadconfig(&tc)", "load_somehow(&tc)")
    with pytest.raises(AmxFixError, match="no longer loads"):
        patch_source(changed)


def test_apply_to_tree_patches_the_vendored_file(tmp_path):
    target = tmp_path / "vendor/llama.cpp/ggml/src/ggml-cpu/amx/mmq.cpp"
    with pytest.raises(AmxFixError, match="not a llama-cpp-python source tree"):
        apply_to_tree(tmp_path)
    target.parent.mkdir(parents=True)
    target.write_text(VENDORED_SHAPE)
    assert apply_to_tree(tmp_path) == target and MARKER in target.read_text()


def test_the_marker_is_read_from_a_library_file(tmp_path):
    library = tmp_path / "libggml-cpu.so"
    library.write_bytes(b"\x7fELF" + b"\0" * 40 + f"{MARKER} version 7".encode() + b"\0tail")
    assert fix_version_in(library) == 7
    library.write_bytes(b"\x7fELF" + MARKER.encode() + b" in a comment, no version\0")
    assert fix_version_in(library) == 0
    assert fix_version_in(tmp_path / "absent.so") == 0


@x86_only
def test_the_replacement_compiles_and_configures_the_tiles(tmp_path):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    source = tmp_path / "amx_config.cpp"
    source.write_text(HARNESS.replace("@FUNCTION@", replacement()))
    exe = tmp_path / "amx_config"
    for level in ("-O0", "-O2", "-O3"):  # the stores were dropped by the optimiser
        build = subprocess.run(
            [
                compiler,
                "-std=c++17",
                level,
                "-mamx-tile",
                "-mamx-int8",
                "-pthread",
                str(source),
                "-o",
                str(exe),
            ],
            capture_output=True,
            text=True,
        )
        assert build.returncode == 0, build.stderr
        # The marker the guard and doctor look for survives the optimiser and the linker.
        assert fix_version_in(exe) == FIX_VERSION, level
        if not {"amx_tile", "amx_int8"} <= cpu_flags():
            continue  # compiled: the AMX path builds on any x86 host; running needs AMX
        run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, f"{level}: {run.stdout}{run.stderr}"
