"""What the installed llama-cpp-python is: its version, its build's CPU features, pyspec's AMX
fix compiled into it. Read by the library at run time (the guard, the in-graph sampler's
build) and by the installer, which plans builds from the same facts; so these live on the
library side and the installer imports them, never the other way round.
"""

from __future__ import annotations

from pathlib import Path

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
LLAMA_ISSUE = "llama.cpp issue #20824"


def build_features(system_info: str) -> dict:
    """``llama_print_system_info()`` parsed: {"AVX2": "1", "AMX_INT8": "1", ...}."""
    features = {}
    for part in system_info.replace("\n", "|").split("|"):
        if "=" in part:
            name, _, value = part.rpartition("=")
            name = name.split(":")[-1].strip()
            if name:
                features[name] = value.strip()
    return features


# (llama.cpp's feature, the /proc/cpuinfo flag behind it, its name), highest first: the x86
# SIMD levels whose kernels change what a batch costs (docs/installing-llama.md).
SIMD_LEVELS = (
    ("AMX_INT8", "amx_int8", "AMX"),
    ("AVX512", "avx512f", "AVX-512"),
    ("AVX2", "avx2", "AVX2"),
)


def levels_left_out(features: dict, flags) -> list:
    """The SIMD levels this CPU has (``flags``) that the build (``build_features``) leaves
    out, highest first: a ``--no-amx`` or ``--simd`` build, or one made for another CPU."""
    return [
        name
        for feature, flag, name in SIMD_LEVELS
        if flag in flags and features.get(feature) != "1"
    ]


def cpu_flags(cpuinfo: str | None = None) -> frozenset:
    """The CPU's feature flags as the kernel lists them (empty where there is no cpuinfo)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def installed_cpu_libraries() -> list:
    """The installed llama-cpp-python's ggml CPU back-end library files (found without
    importing llama_cpp, which would load them)."""
    from importlib.util import find_spec

    spec = find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return []
    found = []
    for package in spec.submodule_search_locations:
        found += sorted(Path(package).glob("lib/libggml-cpu*.so*"))
    return [path for path in found if path.is_file() and not path.is_symlink()]


def _installed_version(version_in) -> int:
    # The wheel carries the same library under several names (.so, .so.0, .so.0.x.y): the
    # first that has the marker answers, so a marked build is read once, not three times.
    return next((v for v in map(version_in, installed_cpu_libraries()) if v), 0)


def installed_amx_fix() -> int:
    """The version of pyspec's AMX fix compiled into the installed llama-cpp-python (0:
    none). Read from the library itself, so it holds whatever cache the wheel came from."""
    from pyspec.llama.runtime.amx_fix import fix_version_in

    return _installed_version(fix_version_in)


def installed_q4k_kernel() -> int:
    """The version of pyspec's Q4_K kernel compiled into the installed llama-cpp-python (0:
    none: a build without AVX2, FMA and F16C, or one not made by ``pyspec install-llama``),
    read from its library."""
    from pyspec.llama.runtime.q4k_kernel import kernel_version_in

    return _installed_version(kernel_version_in)


def installed_q6k_kernel() -> int:
    """The version of pyspec's Q6_K kernel compiled into the installed llama-cpp-python (0:
    none), read from its library."""
    from pyspec.llama.runtime.q6k_kernel import kernel_version_in

    return _installed_version(kernel_version_in)
