"""pyspec's x86 kernels for llama.cpp, the Q4_K one (``q4k_kernel.py``) and the Q6_K one
(``q6k_kernel.py``), each in an AVX-512 VNNI and an AVX2 variant, taken together: the same
build flags (AVX2, FMA, F16C) compile both in, install-llama and the benchmarks' C++ tools add
both to the sources, and their versions key the wheel, the tools and the cost cache (a build
with an older kernel is rebuilt, not reused)."""

from __future__ import annotations

from pathlib import Path

from pyspec.llama.runtime import q4k_kernel, q6k_kernel

KERNELS = {"q4k_kernel": q4k_kernel, "q6k_kernel": q6k_kernel}


def applies_to(cmake_args) -> bool:
    """Whether a build with these CMake arguments compiles the kernels in."""
    return q4k_kernel.applies_to(cmake_args)


def versions(cmake_args) -> dict:
    """{"q4k_kernel": version, "q6k_kernel": version} for a build with these arguments, or {}
    where the kernels do not apply (other architectures, x86 without AVX2: their keys stay as
    they were)."""
    if not applies_to(cmake_args):
        return {}
    return {name: kernel.KERNEL_VERSION for name, kernel in KERNELS.items()}


def apply_to_tree(source_dir: Path) -> list:
    """Adds every kernel to an unpacked llama-cpp-python sdist; returns the patched files."""
    return [kernel.apply_to_tree(source_dir) for kernel in KERNELS.values()]


def installed_versions() -> dict:
    """The kernels compiled into the installed llama-cpp-python: {name: version}, those
    present only."""
    from pyspec.llama.runtime.build_info import installed_q4k_kernel, installed_q6k_kernel

    found = {"q4k_kernel": installed_q4k_kernel(), "q6k_kernel": installed_q6k_kernel()}
    return {name: version for name, version in found.items() if version}
