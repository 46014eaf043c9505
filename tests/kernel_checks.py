"""Shared steps of the tests of pyspec's kernels for llama.cpp (test_q4k_kernel.py,
test_q6k_kernel.py): a file of the vendored llama.cpp as pyspec builds it, and a C/C++
harness compiled against the installed library and run."""

from __future__ import annotations

import platform
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from pyspec.llama.runtime.build_info import installed_cpu_libraries
from pyspec.tools.install_llama import cpu_flags

# Each variant of the kernels: what the CPU must have to run it, and the compiler flags that
# select it (the headers choose the VNNI variant where the compiler targets AVX-512 VNNI).
VARIANTS = {
    "vnni": (
        {"avx512f", "avx512bw", "avx512_vnni", "avx2", "fma", "f16c"},
        ["-mavx512f", "-mavx512bw", "-mavx512vnni", "-mavx2", "-mfma", "-mf16c"],
    ),
    "avx2": ({"avx2", "fma", "f16c"}, ["-mavx2", "-mfma", "-mf16c"]),
}


def vendored_source(relative: Path) -> str:
    """A file of llama.cpp from the llama-cpp-python sdist pyspec builds (downloaded once into
    pyspec's cache, as install-llama does)."""
    from pyspec.cache import cache_dir
    from pyspec.tools.install_llama import download_sdist, sdist_dir

    sdist = download_sdist(sdist_dir(cache_dir() / "llama-build"))
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/" + str(relative)))
        return tar.extractfile(member).read().decode()


def run_against_installed_library(
    harness: str, header_dir: Path, tmp_path: Path, *, cpp: bool, variant: str
) -> str:
    """Compiles the harness (at -O2 and -O3) with the flags of the kernel's variant (a key of
    VARIANTS), linked to the installed libggml-cpu, runs it and returns what it printed; skips
    where the CPU, a compiler or llama-cpp-python is missing, fails where it does not build or
    exits non-zero. (ggml's references, the Q6_K dot and the Q4_K GEMV, are AVX2 code in
    every x86 build, so either variant is checked against any installed build.)"""
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("an x86 kernel")
    needed, flags = VARIANTS[variant]
    missing = needed - cpu_flags()
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(sorted(missing))}: no {variant} variant for it")
    compiler = (
        (shutil.which("g++") or shutil.which("c++"))
        if cpp
        else (shutil.which("gcc") or shutil.which("cc"))
    )
    if compiler is None:
        pytest.skip("no C/C++ compiler")
    libraries = installed_cpu_libraries()
    if not libraries:
        pytest.skip("llama-cpp-python is not installed")
    lib_dir = libraries[0].parent
    source = tmp_path / ("check.cpp" if cpp else "check.c")
    source.write_text(harness)
    exe = tmp_path / "check"
    printed = ""
    for level in ("-O2", "-O3"):
        build = subprocess.run(
            [
                compiler,
                level,
                *(["-std=c++17"] if cpp else ["-std=gnu11"]),
                *flags,
                f"-I{header_dir}",
                str(source),
                "-o",
                str(exe),
                f"-L{lib_dir}",
                "-l:libggml-cpu.so",
                "-l:libggml-base.so",
                f"-Wl,-rpath,{lib_dir}",
                "-lm",
            ],
            capture_output=True,
            text=True,
        )
        assert build.returncode == 0, build.stderr[-3000:]
        run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        printed += run.stdout
    return printed
