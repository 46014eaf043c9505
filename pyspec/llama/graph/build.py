"""Builds libpyspec_llama: the in-graph sampler (csrc/llama/).

Why a second library, built here rather than by pip: the sampler implements llama.cpp's
experimental backend-sampler interface, whose structs (``llama_sampler_i``,
``llama_sampler_data``) and ggml ops change between llama.cpp versions. So it is compiled
against the very headers of the llama-cpp-python that is installed, after checking that this
is the version pyspec's sampler was written for (``LLAMA_CPP_PYTHON_VERSION``), and linked to
that installation's own libllama/libggml. libpyspec itself never depends on llama.cpp: without
llama-cpp-python, or with another version, everything else works and the in-graph sampler
says why it is unavailable.

The build takes about a second (one C file) and is cached under
``~/.cache/pyspec/llama-graph/<llama-cpp-python version>-<key>/``, keyed by the sources, the
headers and the library it links, so a rebuilt llama-cpp-python gets a new build.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from pyspec.cache import cache_dir
from pyspec.errors import GraphSamplerUnavailable
from pyspec.llama.runtime.build_info import LLAMA_CPP_PYTHON_VERSION

LIBRARY_ENV = "PYSPEC_LLAMA_GRAPH_LIBRARY"  # a prebuilt libpyspec_llama (tests, CI, devices)
# PYSPEC_GRAPH_SANITIZE=1: build it with AddressSanitizer + UndefinedBehaviorSanitizer (CI;
# the process must then start with libasan preloaded).
SANITIZE_ENV = "PYSPEC_GRAPH_SANITIZE"
_SANITIZE_FLAGS = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-g",
]
_PACKAGE_DIR = Path(__file__).resolve().parents[2]  # the package directory, pyspec/
# The C sources and the headers they include: beside the package in a wheel
# (CMake installs them into pyspec/_csrc), csrc/ in a source checkout.
_SOURCE_DIRS = (_PACKAGE_DIR / "_csrc", _PACKAGE_DIR.parent / "csrc")
# What to compile: csrc/llama/graph_sources.txt, the list CMake installs from as well.
MANIFEST = "llama/graph_sources.txt"


def _manifest(directory: Path) -> list:
    """The sources the manifest in ``directory`` lists (paths relative to it)."""
    lines = (directory / MANIFEST).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


_LLAMA_HEADERS = ("llama.h", "ggml.h", "ggml-backend.h", "ggml-cpu.h")


def _source_dir() -> Path:
    for directory in _SOURCE_DIRS:
        if (directory / MANIFEST).is_file() and all(
            (directory / name).is_file() for name in _manifest(directory)
        ):
            return directory
    raise GraphSamplerUnavailable(
        "the in-graph sampler's C sources are not installed (looked in "
        + ", ".join(str(d) for d in _SOURCE_DIRS)
        + "); reinstall pyspec with `pip install .`"
    )


def _llama_install() -> tuple:
    """(version, include dir, lib dir) of the installed llama-cpp-python."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise GraphSamplerUnavailable(f"llama-cpp-python is not installed ({exc})") from None
    version = getattr(llama_cpp, "__version__", "unknown")
    if version != LLAMA_CPP_PYTHON_VERSION:
        raise GraphSamplerUnavailable(
            "the in-graph sampler is written against llama-cpp-python "
            f"{LLAMA_CPP_PYTHON_VERSION}'s "
            f"experimental backend-sampler interface; this is llama-cpp-python {version}. Install "
            f"{LLAMA_CPP_PYTHON_VERSION} (`pyspec install-llama`) or use sampling='host'"
        )
    package = Path(llama_cpp.__file__).resolve().parent
    lib_dir = package / "lib"
    includes = [
        d
        for d in (package.parent / "include", package / "include", Path(sys.prefix) / "include")
        if all((d / h).is_file() for h in _LLAMA_HEADERS)
    ]
    if not includes:
        raise GraphSamplerUnavailable(
            f"llama-cpp-python {version} is installed without llama.cpp's headers "
            f"({', '.join(_LLAMA_HEADERS)} "
            f"not found beside {package}); reinstall it from source (`pyspec install-llama`)"
        )
    if not (lib_dir / "libllama.so").is_file():
        raise GraphSamplerUnavailable(f"no libllama.so in {lib_dir}")
    return version, includes[0], lib_dir


def _key(sources: Path, include: Path, lib_dir: Path, flags: list) -> str:
    digest = hashlib.sha256(" ".join(flags).encode())
    for path in [
        *(sources / s for s in _manifest(sources)),
        *(include / h for h in _LLAMA_HEADERS),
    ]:
        digest.update(path.read_bytes())
    for name in ("libllama.so", "libggml-base.so", "libggml-cpu.so"):
        stat = (lib_dir / name).stat() if (lib_dir / name).exists() else None
        digest.update(
            f"{lib_dir / name}:{stat.st_size if stat else 0}:"
            f"{stat.st_mtime_ns if stat else 0}".encode()
        )
    return digest.hexdigest()[:16]


def _compiler() -> str:
    for candidate in (os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc", "gcc", "clang"):
        if candidate:
            exe = candidate.split()[0]
            if shutil.which(exe):
                return exe
    raise GraphSamplerUnavailable("no C compiler found (set CC) to build the in-graph sampler")


def build_graph_library(*, quiet: bool = False) -> Path:
    """The path of libpyspec_llama for the installed llama-cpp-python, compiled once."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        if not Path(override).is_file():
            raise GraphSamplerUnavailable(f"{LIBRARY_ENV}={override} does not name a file")
        return Path(override)
    version, include, lib_dir = _llama_install()
    sources = _source_dir()
    extra = _SANITIZE_FLAGS if os.environ.get(SANITIZE_ENV) == "1" else []
    out_dir = cache_dir() / "llama-graph" / f"{version}-{_key(sources, include, lib_dir, extra)}"
    library = out_dir / "libpyspec_llama.so"
    if library.is_file():
        return library
    if not quiet:
        print(
            f"pyspec: building the in-graph sampler against llama-cpp-python {version} "
            f"({include}) into {out_dir}",
            file=sys.stderr,
            flush=True,
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / f"libpyspec_llama.so.{os.getpid()}.tmp"
    cmd = [
        _compiler(),
        "-O2",
        "-std=c11",
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
        "-ffp-contract=off",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        *extra,
        "-DPYSPEC_SHARED",
        "-DPYSPEC_BUILD",
        f'-DPYSPEC_LLAMA_VERSION="{version}"',
        f"-I{sources}",
        f"-I{include}",
        *(str(sources / c) for c in _manifest(sources) if c.endswith(".c")),
        f"-L{lib_dir}",
        "-lllama",
        "-lggml-base",
        "-lggml",
        "-lggml-cpu",
        f"-Wl,-rpath,{lib_dir}",
        "-lm",
        "-Wl,--no-undefined",
        "-o",
        str(partial),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise GraphSamplerUnavailable(
            "compiling the in-graph sampler failed:\n  "
            + " ".join(cmd)
            + "\n"
            + (proc.stderr or proc.stdout)[-3000:]
        )
    os.replace(partial, library)  # atomic: a concurrent build never loads half a file
    return library
