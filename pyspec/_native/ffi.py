"""Loads libpyspec with cffi in ABI mode.

Why ABI mode: the library is plain C with no Python in it, so one build serves every
CPython (the wheel is tagged ``py3``) and ``import pyspec`` needs no compiler. The usual
weakness of ABI mode, a hand-copied ``cdef`` that drifts from the real header, does not
apply: the declarations are read at import time from ``pyspec.h`` itself, the header the
library was compiled against (installed beside it), between its PYSPEC_CDEF markers.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import cffi

# The package directory (pyspec/), where CMake installs the library and its header.
_PACKAGE_DIR = Path(__file__).resolve().parent.parent
_LIB_NAMES = {"linux": "libpyspec.so", "darwin": "libpyspec.dylib", "win32": "pyspec.dll"}
LIBRARY_ENV = "PYSPEC_LIBRARY"


def _library_name() -> str:
    return _LIB_NAMES.get(sys.platform, "libpyspec.so")


def _header_path(lib_path: Path) -> Path:
    for candidate in (
        lib_path.parent / "pyspec.h",
        _PACKAGE_DIR / "pyspec.h",
        _PACKAGE_DIR.parent / "csrc" / "pyspec.h",
    ):
        if candidate.is_file():
            return candidate
    raise ImportError(f"pyspec: cannot find pyspec.h beside {lib_path} or in {_PACKAGE_DIR}")


def _cdef_from_header(header: Path) -> str:
    text = header.read_text()
    match = re.search(r"/\* PYSPEC_CDEF_BEGIN \*/(.*)/\* PYSPEC_CDEF_END \*/", text, re.S)
    if not match:
        raise ImportError(f"pyspec: {header} has no PYSPEC_CDEF_BEGIN/END block")
    return match.group(1).replace("PYSPEC_API ", "")


def _find_library() -> Path:
    override = os.environ.get(LIBRARY_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise ImportError(f"pyspec: {LIBRARY_ENV}={override} does not name a file")
        return path
    searched = []
    # Beside the package first; then every other directory of the package (an editable
    # install keeps the compiled library in site-packages and the sources elsewhere).
    package = sys.modules.get("pyspec")  # being imported: its __path__ is already set
    for directory in [_PACKAGE_DIR, *map(Path, getattr(package, "__path__", []))]:
        path = directory / _library_name()
        if str(path) not in searched:
            searched.append(str(path))
        if path.is_file():
            return path
    hint = ""
    if (_PACKAGE_DIR.parent / "CMakeLists.txt").is_file():  # imported from a source checkout
        hint = (
            f" This is the source tree ({_PACKAGE_DIR.parent}): Python imported pyspec from it "
            "instead of the installed package; run from another directory (cd ~) after "
            "`pip install .`, or set " + LIBRARY_ENV + " to a library built with CMake."
        )
    raise ImportError(
        "pyspec: the compiled library was not found (looked in: "
        + ", ".join(searched)
        + f"). Install the package with `pip install .`, or point {LIBRARY_ENV} at a built "
        "libpyspec." + hint
    )


def _load():
    path = _find_library()
    ffi = cffi.FFI()
    ffi.cdef(_cdef_from_header(_header_path(path)))
    try:
        lib = ffi.dlopen(str(path))
    except OSError as exc:  # pragma: no cover - depends on the machine
        raise ImportError(f"pyspec: cannot load {path}: {exc}") from exc
    return ffi, lib, path


ffi, lib, library_path = _load()
