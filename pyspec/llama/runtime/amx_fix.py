"""pyspec's fix to ggml's AMX tile setup, applied to llama-cpp-python's vendored llama.cpp.

The fault (llama.cpp issue #20824; SIGILL or SIGSEGV at ``ldtilecfg`` on the first AMX
matrix multiply): ``ggml_tile_config_init`` in ``ggml/src/ggml-cpu/amx/mmq.cpp`` fills a
64-byte tile configuration on its stack, member by member, and hands its address to
``_tile_loadconfig``. In an optimised build the compiler does not see the intrinsic read
that memory, drops the stores, and the tiles are configured from whatever the stack held.

The replacement below keeps the configuration in static read-only memory, built once by
the compiler as a byte image, copies it into a per-thread 64-byte aligned buffer and puts
a compiler barrier (an empty asm that "reads" the buffer and clobbers memory) between the
copy and ``_tile_loadconfig``, so the bytes are in memory when the instruction reads them.
Each thread still configures its tiles once (OpenMP teams may change: the flag is
thread_local, as before). Nothing else in ggml changes.

``FIX_VERSION`` goes into the build key and the build record, and into the built library
itself: the replacement carries a marker string (``pyspec AMX tile-config fix version N``)
that its code references, so it survives optimisation and linking. ``fix_version_in``
reads it back from a library file, which is how ``pyspec doctor`` and the build guard
tell a fixed AMX build from an unfixed one wherever the wheel came from (version 1 had
no marker and counts as unfixed).
"""

from __future__ import annotations

import re
from pathlib import Path

from pyspec.errors import AmxFixError
from pyspec.llama.runtime.markers import marker_version_in

FIX_VERSION = 2
MMQ_PATH = Path("vendor/llama.cpp/ggml/src/ggml-cpu/amx/mmq.cpp")
MARKER = "pyspec AMX tile-config fix"
_BUILT_MARKER = re.compile(rb"pyspec AMX tile-config fix version (\d+)\0")

# The tile layout ggml's kernels use (its comment "2-2-4 pattern"): B in TMM0-1 (8 rows of
# 64 bytes), A in TMM2-3 (16 x 32), C in TMM4-7 (16 x 64). Byte image of the 64-byte
# configuration: palette, start row, 14 reserved, 16 little-endian colsb, 16 rows.
_ROWS = (8, 8, 16, 16, 16, 16, 16, 16)
_COLSB = (64, 64, 32, 32, 64, 64, 64, 64)

_FUNCTION = re.compile(r"inline void ggml_tile_config_init\(void\) \{\n.*?\n\}\n", re.S)


def _config_bytes() -> list:
    image = [1, 0] + [0] * 14
    for i in range(16):
        colsb = _COLSB[i] if i < len(_COLSB) else 0
        image += [colsb & 0xFF, colsb >> 8]
    image += [_ROWS[i] if i < len(_ROWS) else 0 for i in range(16)]
    assert len(image) == 64
    return image


def replacement() -> str:
    rows = []
    image = _config_bytes()
    for start in range(0, 64, 16):
        rows.append("    " + ", ".join(str(b) for b in image[start : start + 16]) + ",")
    table = "\n".join(rows)
    return f"""// {MARKER} (version {FIX_VERSION}): the configuration is a static byte image,
// copied into an aligned per-thread buffer; the barrier keeps the compiler from dropping
// the copy before _tile_loadconfig reads it (llama.cpp issue #20824).
alignas(64) static const uint8_t pyspec_amx_tile_config[64] = {{
{table}
}};
// Found by pyspec in the built library (llama_amx_fix.fix_version_in); referenced below.
__attribute__((used)) static const char pyspec_amx_fix_marker[] = "{MARKER} version {FIX_VERSION}";

inline void ggml_tile_config_init(void) {{
    static thread_local bool done = false;
    alignas(64) static thread_local uint8_t config[64];

    if (done) {{
        return;
    }}

    memcpy(config, pyspec_amx_tile_config, sizeof(config));
    __asm__ __volatile__("" : : "r"(config), "r"(pyspec_amx_fix_marker) : "memory");
    _tile_loadconfig(config);
    done = true;
}}
"""


def fix_version_in(library: Path) -> int:
    """The version of the fix compiled into this library file (0: none)."""
    return marker_version_in(library, _BUILT_MARKER)


def patch_source(text: str) -> str:
    """mmq.cpp's text with ggml_tile_config_init replaced (idempotent)."""
    if MARKER in text:
        return text
    found = _FUNCTION.findall(text)
    if len(found) != 1:
        raise AmxFixError(
            f"expected one definition of ggml_tile_config_init in mmq.cpp, "
            f"found {len(found)}: this llama.cpp is not the one the fix is for"
        )
    if "_tile_loadconfig(&tc)" not in found[0]:
        raise AmxFixError(
            "ggml_tile_config_init no longer loads a stack tile_config_t: "
            "this llama.cpp is not the one the fix is for"
        )
    if "#include <cstring>" not in text and "#include <string.h>" not in text:
        text = "#include <cstring>\n" + text
    return _FUNCTION.sub(lambda _: replacement(), text, count=1)


def apply_to_tree(source_dir: Path) -> Path:
    """Patches an unpacked llama-cpp-python sdist in place; returns the patched file."""
    path = Path(source_dir) / MMQ_PATH
    if not path.is_file():
        raise AmxFixError(f"{path} not found: not a llama-cpp-python source tree")
    path.write_text(patch_source(path.read_text()))
    return path
