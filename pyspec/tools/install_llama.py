"""Install llama-cpp-python built so that it runs on the machine it is built on.

Why not plain ``pip install llama-cpp-python``: the package builds llama.cpp from source with
``GGML_NATIVE=ON`` (``-march=native``). On a CPU that reports AMX, that compiles ggml's AMX
matrix multiply, which crashes at ``ldtilecfg`` in ``ggml_backend_amx_mul_mat`` on the first
model call (llama.cpp issue #20824, fixed upstream after the llama.cpp that 0.3.36 vendors).
So this module:

1. derives the x86 instruction-set options from the CPU's own flags (``/proc/cpuinfo``) and
   passes them explicitly with ``GGML_NATIVE=OFF``: every SIMD level the CPU has and nothing
   it lacks (with ``GGML_NATIVE=OFF`` ggml would otherwise switch AVX2, FMA, F16C and BMI2 on
   by default); on other architectures llama.cpp's own defaults are kept (AMX is x86-only);
2. on a CPU with AMX (``default_amx``; ``--no-amx`` says no, ``--amx`` insists) the AMX
   options are on, and the build is made from the sdist with pyspec's fix to ggml's tile
   setup applied (``pyspec/llama/runtime/amx_fix.py``), keyed with the fix's version;
   elsewhere the three ``GGML_AMX_*`` options are off; an x86 build with AVX2, FMA and F16C
   gets pyspec's Q4_K and Q6_K kernels (their AVX-512 VNNI variant where the flags include it:
   the EPYC Zen 4 and Zen 5), which make a verify pass over 2-32 tokens cheaper
   (``pyspec/llama/runtime/x86_kernels.py``), keyed with their versions;
3. appends the user's ``CMAKE_ARGS`` (``-DGGML_CUDA=on`` and the like), refusing those that
   bring the crash back without the fix (``GGML_NATIVE=ON``, ``GGML_AMX_*=ON``);
4. builds the wheel with pip's cache off, into ``~/.cache/pyspec/llama-build/<key>/``, where the
   key hashes the version, the final CMake arguments, the Python tag and the machine: pip's
   own wheel cache keys a wheel by name and version only, so a wheel built earlier with other
   flags (a native one) would be reused silently;
5. installs that wheel over whatever llama-cpp-python was there (not with ``--build-only``),
   and checks the result by asking the installed library for its features (``AMX_INT8 = 1``
   exactly when AMX was asked for).

Run it as ``python3 -m pyspec install-llama`` (``--dry-run`` prints the plan).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from pyspec.errors import LlamaBuildError
from pyspec.llama.runtime import x86_kernels
from pyspec.llama.runtime.amx_fix import FIX_VERSION as AMX_FIX_VERSION
from pyspec.llama.runtime.build_info import (  # noqa: F401 (part of the installer's interface)
    LLAMA_CPP_PYTHON_VERSION,
    LLAMA_ISSUE,
    build_features,
    cpu_flags,
    installed_amx_fix,
    installed_cpu_libraries,
    installed_q4k_kernel,
    installed_q6k_kernel,
)

# Bumped when the recipe below changes, so that wheels built by an older recipe are not reused.
RECIPE_VERSION = 1

# ggml option -> every /proc/cpuinfo flag it needs (ggml-cpu's CMakeLists, GCC branch:
# GGML_AVX512 compiles with -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw).
X86_OPTIONS = (
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("GGML_AVX512_VBMI", ("avx512f", "avx512vbmi")),
    ("GGML_AVX512_VNNI", ("avx512f", "avx512_vnni")),
    ("GGML_AVX512_BF16", ("avx512f", "avx512_bf16")),
)
AMX_OPTIONS = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
# ``--simd``: the most a build may use, below what the CPU has (x86). "avx2" is x86-64-v3,
# the kernels of an AVX2-only CPU (AMD Zen 3, Intel's client cores): built on a newer CPU, it
# batches as such a machine does, which is how this project measures AVX2 kernels when no
# AVX2 machine is at hand (docs/draftless-runs.md). "avx512": everything but AMX (as --no-amx).
SIMD_CEILINGS = {
    "avx2": ("GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_BMI2", "GGML_FMA", "GGML_F16C"),
    "avx512": tuple(option for option, _ in X86_OPTIONS),
}


def _log(message: str) -> None:
    print(f"pyspec: {message}", file=sys.stderr, flush=True)


def is_x86(machine: str | None = None) -> bool:
    return (machine or platform.machine()).lower() in ("x86_64", "amd64", "i686", "i386")


def amx_capable(flags: frozenset, machine: str | None = None) -> bool:
    """Whether ggml's AMX matrix multiply can run on a CPU with these flags."""
    return is_x86(machine) and {"amx_tile", "amx_int8"} <= set(flags)


def derived_cmake_args(
    flags: frozenset, machine: str | None = None, amx: bool = False, simd: str | None = None
) -> list:
    """CMake arguments that make ggml use exactly the SIMD levels ``flags`` name, at most
    those of ``simd`` (a key of SIMD_CEILINGS; None: no ceiling); AMX only with ``amx`` (the
    build then gets pyspec's fix, pyspec/llama/runtime/amx_fix.py)."""
    if not is_x86(machine):
        return []
    allowed = SIMD_CEILINGS[simd] if simd else tuple(option for option, _ in X86_OPTIONS)
    args = ["-DGGML_NATIVE=OFF"]
    for option, needs in X86_OPTIONS:
        on = option in allowed and all(f in flags for f in needs)
        args.append(f"-D{option}={'ON' if on else 'OFF'}")
    if amx:
        args += [
            "-DGGML_AMX_TILE=ON",
            "-DGGML_AMX_INT8=ON",
            f"-DGGML_AMX_BF16={'ON' if 'amx_bf16' in flags else 'OFF'}",
        ]
    else:
        args += [f"-D{option}=OFF" for option in AMX_OPTIONS]
    return args


def amx_enabled(cmake_args: list) -> bool:
    """Whether these final CMake arguments build ggml's AMX matrix multiply."""
    return _user_defines(cmake_args).get("GGML_AMX_INT8", "").strip().lower() in _TRUE


_DEFINE = re.compile(r"^-D([A-Za-z0-9_]+)(?::[A-Za-z]+)?=(.*)$")
_TRUE = {"on", "1", "yes", "true", "y"}


def _user_defines(user_args: list) -> dict:
    defines = {}
    for arg in user_args:
        m = _DEFINE.match(arg)
        if m:
            defines[m.group(1).upper()] = m.group(2)
    return defines


def plan_cmake_args(
    user_cmake_args: str = "",
    flags: frozenset | None = None,
    machine: str | None = None,
    amx: bool = False,
    simd: str | None = None,
) -> list:
    """The final CMake arguments: the derived ones, then the user's (later ones win in CMake).

    Raises LlamaBuildError for user arguments that would build the AMX path back in without
    the fix, for ``amx`` on a CPU that has no AMX, and for a ``simd`` ceiling that is not
    one, that leaves AMX out while ``amx`` asks for it, or on another architecture."""
    user = shlex.split(user_cmake_args or "")
    defines = _user_defines(user)
    flags = cpu_flags() if flags is None else flags
    if simd is not None:
        if simd not in SIMD_CEILINGS:
            raise LlamaBuildError(
                f"--simd {simd}: not a SIMD ceiling; choose one of {', '.join(SIMD_CEILINGS)}"
            )
        if not is_x86(machine):
            raise LlamaBuildError(
                f"--simd {simd}: SIMD ceilings are x86 levels; this machine is "
                f"{machine or platform.machine()}, where llama.cpp's own defaults apply"
            )
        if amx:
            raise LlamaBuildError(f"--simd {simd} leaves AMX out; drop --amx, or --simd")
    if amx and not amx_capable(flags, machine):
        raise LlamaBuildError(
            "--amx: this CPU reports no AMX (amx_tile and amx_int8 in "
            "/proc/cpuinfo); ggml's AMX path would never run here"
        )
    if is_x86(machine) and not amx:
        bad = [
            f"-D{k}={v}"
            for k, v in defines.items()
            if (k == "GGML_NATIVE" or k in AMX_OPTIONS) and v.strip().lower() in _TRUE
        ]
        if bad:
            raise LlamaBuildError(
                f"CMAKE_ARGS asks for {' '.join(bad)}: that builds ggml's AMX matrix multiply, "
                f"which crashes llama.cpp 0.3.36's CPU back end on CPUs that report AMX "
                f"({LLAMA_ISSUE}). Remove it from CMAKE_ARGS (the SIMD levels this CPU has are "
                f"switched on explicitly instead), or use `pyspec install-llama --amx`, which "
                f"builds the AMX path with pyspec's fix to it."
            )
    if amx and defines.get("GGML_NATIVE", "").strip().lower() in _TRUE:
        raise LlamaBuildError(
            "CMAKE_ARGS asks for -DGGML_NATIVE=ON: pyspec passes this CPU's "
            "SIMD levels explicitly; remove it"
        )
    return derived_cmake_args(flags, machine, amx=amx, simd=simd) + user


def wheel_key(cmake_args: list, version: str = LLAMA_CPP_PYTHON_VERSION) -> str:
    ident = {
        "version": version,
        "recipe": RECIPE_VERSION,
        "cmake_args": cmake_args,
        "python": f"{sys.implementation.name}{sys.version_info[0]}{sys.version_info[1]}",
        "machine": platform.machine(),
        "platform": sys.platform,
    }
    if amx_enabled(cmake_args):  # (absent otherwise: the keys of earlier builds stay valid)
        ident["amx_fix"] = AMX_FIX_VERSION
    ident.update(x86_kernels.versions(cmake_args))  # (likewise: builds without them keep theirs)
    blob = json.dumps(ident, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def wheel_dir(cmake_args: list, cache_root: Path | None = None) -> Path:
    from pyspec.cache import cache_dir

    root = cache_root or cache_dir() / "llama-build"
    return root / f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}-{wheel_key(cmake_args)}"


def _find_wheel(directory: Path) -> Path | None:
    wheels = sorted(directory.glob("llama_cpp_python-*.whl"))
    return wheels[-1] if wheels else None


def cached_wheel(amx: bool, user_cmake_args: str | None = None) -> Path | None:
    """The wheel ``install-llama`` built for this CPU with (or without) the AMX path, if it
    is in the build cache (``user_cmake_args``: as for ``install``, $CMAKE_ARGS by default)."""
    if user_cmake_args is None:
        user_cmake_args = os.environ.get("CMAKE_ARGS", "")
    return _find_wheel(wheel_dir(plan_cmake_args(user_cmake_args, amx=amx)))


def installed_from(wheel: Path) -> bool:
    """Whether the installed llama-cpp-python was installed from exactly this wheel file."""
    from importlib import metadata

    try:
        dist = metadata.distribution("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return False
    direct = dist.read_text("direct_url.json")
    if not direct:
        return False
    try:
        recorded = json.loads(direct).get("archive_info", {}).get("hashes", {}).get("sha256")
    except (ValueError, AttributeError):
        return False
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return recorded == digest and dist.version == LLAMA_CPP_PYTHON_VERSION


def installed_build() -> dict | None:
    """The build.json of the pyspec-built wheel the installed llama-cpp-python came from
    (its CMake arguments), or None when it was installed some other way."""
    root = wheel_dir([]).parent
    for build in sorted(root.glob("*/build.json")):
        wheel = _find_wheel(build.parent)
        if wheel is not None and installed_from(wheel):
            try:
                return dict(json.loads(build.read_text()), wheel=str(wheel))
            except ValueError:
                return None
    return None


_NINJA_STEP = re.compile(r"\[(\d+)/(\d+)\]")


def sdist_dir(build_root: Path) -> Path:
    """Where the llama-cpp-python sdist is kept: one download for every build of this
    version under build_root (``~/.cache/pyspec/llama-build``)."""
    return build_root / f"sdist-{LLAMA_CPP_PYTHON_VERSION}"


DOWNLOAD_ERROR_LINES = 12  # of pip's output, in the error when the download fails


def download_sdist(directory: Path) -> Path:
    """The llama-cpp-python sdist in directory, downloaded with pip the first time."""
    sdists = sorted(directory.glob("llama_cpp_python-*.tar.gz"))
    if not sdists:
        _log(f"downloading the llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sources (76 MB)")
        # pip reads the sdist's metadata, which takes its build backend (scikit-build-core):
        # in pip's own isolated environment, as wheels. Why: with the build isolation off, a
        # fresh virtual environment has no backend and the download failed (session 48's
        # walk on a fresh clone); with every package held to its sources (":all:"), pip
        # built the backend itself, 43 s against 5 s.
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            "llama-cpp-python",
            "-d",
            str(directory),
            f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            said = (done.stderr or done.stdout or "").strip().splitlines()[-DOWNLOAD_ERROR_LINES:]
            raise LlamaBuildError(
                f"could not download the llama-cpp-python sources (pip exit "
                f"{done.returncode}): {' '.join(cmd)}"
                + ("; pip said:\n" + "\n".join(said) if said else "")
            )
        sdists = sorted(directory.glob("llama_cpp_python-*.tar.gz"))
        if not sdists:
            raise LlamaBuildError(f"pip download left no sdist in {directory}")
    return sdists[-1]


def unpack_sdist(sdist: Path, dest: Path, *, amx_fix: bool, kernels: bool = False) -> Path:
    """The sdist unpacked under dest/src (emptied first, so no file of an earlier unpacking
    is left), with pyspec's AMX fix applied when ``amx_fix`` and its x86 kernels added when
    ``kernels``: its top directory. Used by install-llama's patched builds and by the
    benchmarks' llama.cpp tools (the same sources)."""
    import shutil
    import tarfile

    src = dest / "src"
    if src.exists():
        shutil.rmtree(src)
    with tarfile.open(sdist) as tar:
        tar.extractall(src, filter="data")
    tops = list(src.iterdir())
    if len(tops) != 1 or not tops[0].is_dir():
        raise LlamaBuildError(f"{sdist} does not hold one source directory")
    tree = tops[0]
    if amx_fix:
        from pyspec.llama.runtime.amx_fix import apply_to_tree

        patched = apply_to_tree(tree)
        _log(f"applied pyspec's AMX tile-config fix to {patched.relative_to(src)}")
    if kernels:
        for patched in x86_kernels.apply_to_tree(tree):
            _log(f"added pyspec's kernel to {patched.relative_to(src)}")
    return tree


def _patched_source(out_dir: Path, *, amx: bool, kernels: bool) -> Path:
    """llama-cpp-python's sdist, unpacked under out_dir/src with pyspec's AMX fix and x86
    kernels applied as asked."""
    # One download for every patched build of this version (the patches' versions change
    # the key).
    sdist = download_sdist(sdist_dir(out_dir.parent))
    return unpack_sdist(sdist, out_dir, amx_fix=amx, kernels=kernels)


def _build_wheel(cmake_args: list, out_dir: Path) -> Path:
    """pip wheel with the cache off, streaming a progress line every 10% of the compile. An
    AMX build is made from the sdist with pyspec's fix applied (pyspec/llama/runtime/amx_fix.py)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "build.log"
    env = dict(os.environ)
    env["CMAKE_ARGS"] = " ".join(shlex.quote(a) for a in cmake_args)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
    env["FORCE_CMAKE"] = "1"
    amx = amx_enabled(cmake_args)
    kernel = x86_kernels.applies_to(cmake_args)
    what = (
        str(_patched_source(out_dir, amx=amx, kernels=kernel))
        if amx or kernel
        else f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"
    )
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-v",
        "--no-deps",
        "--no-cache-dir",
        "--no-binary",
        "llama-cpp-python",
        "-w",
        str(out_dir),
        what,
    ]
    _log(
        f"building llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} from source (about 4-11 "
        f"minutes on 2 cores; full log: {log_path})"
    )
    _log(f"CMAKE_ARGS={env['CMAKE_ARGS']}")
    start = time.monotonic()
    last_decile = -1
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
            errors="replace",
        )
        assert proc.stdout is not None
        tail: list = []
        for line in proc.stdout:
            log.write(line)
            tail = (tail + [line.rstrip()])[-40:]
            m = _NINJA_STEP.search(line)
            if m and int(m.group(2)) > 20:
                done, total = int(m.group(1)), int(m.group(2))
                decile = done * 10 // total
                if decile > last_decile:
                    last_decile = decile
                    _log(
                        f"  compiling llama.cpp: {done}/{total} steps, "
                        f"{time.monotonic() - start:.0f} s"
                    )
        rc = proc.wait()
    if rc != 0:
        raise LlamaBuildError(
            "building llama-cpp-python failed (pip exit {}); last lines of {}:\n{}".format(
                rc, log_path, "\n".join(tail)
            )
        )
    wheel = _find_wheel(out_dir)
    if wheel is None:
        raise LlamaBuildError(f"pip reported success but left no wheel in {out_dir}")
    if amx or kernel:  # the unpacked tree (hundreds of MB) is not needed once the wheel exists
        import shutil

        shutil.rmtree(out_dir / "src", ignore_errors=True)
    from pyspec.tools.machine import machine_info, now_iso

    # datetime and machine_info: benchmarks/readme_tables.py --take-build shows the build
    # time in the README with when and where it was measured.
    (out_dir / "build.json").write_text(
        json.dumps(
            {
                "cmake_args": cmake_args,
                "version": LLAMA_CPP_PYTHON_VERSION,
                "amx_fix": AMX_FIX_VERSION if amx else 0,
                **{name: 0 for name in x86_kernels.KERNELS},
                **x86_kernels.versions(cmake_args),
                "seconds": round(time.monotonic() - start, 1),
                "datetime": now_iso(),
                "machine_info": machine_info(),
            },
            indent=1,
        )
    )
    _log(f"built {wheel.name} in {time.monotonic() - start:.0f} s")
    return wheel


def _pip_install(args: list) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--no-cache-dir", *args]
    rc = subprocess.run(cmd).returncode
    if rc != 0:
        raise LlamaBuildError(f"pip install failed (exit {rc}): {' '.join(cmd)}")


def probe_installed() -> tuple:
    """(version, llama_print_system_info()) of the installed llama-cpp-python, asked in a new
    process (a broken or crashing build must not take the caller down with it)."""
    code = (
        "import llama_cpp; print(llama_cpp.__version__); "
        "print(llama_cpp.llama_print_system_info().decode())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise LlamaBuildError(f"llama-cpp-python does not import ({last})")
    version, _, info = out.stdout.partition("\n")
    return version.strip(), info.strip()


def _check_installed(amx: bool) -> str:
    """The freshly installed library's features, checked: right version, AMX as asked."""
    version, info = probe_installed()
    if version != LLAMA_CPP_PYTHON_VERSION:
        raise LlamaBuildError(
            f"expected llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}, found {version}"
        )
    has_amx = build_features(info).get("AMX_INT8") == "1"
    if has_amx != amx:
        raise LlamaBuildError(
            f"the installed llama-cpp-python {'has' if has_amx else 'lacks'} "
            f"AMX, which was {'not ' if not amx else ''}asked for: {info}"
        )
    return info


def default_amx(flags: frozenset | None = None, machine: str | None = None) -> bool:
    """Whether ``install-llama`` builds the AMX path when not told: on every CPU that can run
    it (with pyspec's fix, batched passes cost far less there: docs/installing-llama.md)."""
    return amx_capable(cpu_flags() if flags is None else flags, machine)


def install(
    user_cmake_args: str | None = None,
    *,
    force: bool = False,
    dry_run: bool = False,
    amx: bool | None = None,
    build_only: bool = False,
    simd: str | None = None,
) -> Path:
    """Build (once per set of flags) and install llama-cpp-python; returns the wheel's path.
    ``amx``: ggml's AMX path on, with pyspec's fix applied to the sources first; None (the
    default) decides by the CPU (``default_amx``), and is off under a ``simd`` ceiling
    (SIMD_CEILINGS: "avx2" builds the kernels of an AVX2-only CPU)."""
    if user_cmake_args is None:
        user_cmake_args = os.environ.get("CMAKE_ARGS", "")
    chosen = amx is not None
    if amx is None:
        amx = default_amx() and simd is None
    cmake_args = plan_cmake_args(user_cmake_args, amx=amx, simd=simd)
    out_dir = wheel_dir(cmake_args)
    wheel = _find_wheel(out_dir)
    why = (
        "as asked"
        if chosen
        else (
            "this CPU reports amx_tile and amx_int8; --no-amx keeps it off"
            if amx
            else f"--simd {simd} leaves it out"
            if simd is not None
            else "this CPU reports no AMX"
        )
    )
    _log(f"AMX: {'on' if amx else 'off'} ({why})")
    if simd is not None:
        _log(f"SIMD: at most {simd}, whatever this CPU has above it left out (--simd)")
    if dry_run:
        _log(f"CMAKE_ARGS={' '.join(cmake_args)}")
        if amx_enabled(cmake_args):
            _log(
                f"AMX: pyspec's tile-config fix (version {AMX_FIX_VERSION}) will be applied "
                f"to the sources before the build"
            )
        _log(f"wheel: {wheel or out_dir / '(not built yet)'}")
        return wheel or out_dir
    if wheel is None or force:
        for old in out_dir.glob("*.whl"):
            old.unlink()
        wheel = _build_wheel(cmake_args, out_dir)
    else:
        _log(f"using {wheel} (built earlier with the same flags)")
    if build_only:
        _log(f"built and cached, not installed: {wheel}")
        return wheel
    if installed_from(wheel) and not force:
        _log("llama-cpp-python is already installed from this wheel")
    else:
        # --force-reinstall --no-deps replaces a llama-cpp-python of the same version built
        # with other flags (pip would otherwise call it satisfied); the second call brings
        # its dependencies.
        _pip_install(["--force-reinstall", "--no-deps", str(wheel)])
        _pip_install([str(wheel)])
    info = _check_installed(amx_enabled(cmake_args))
    _log(f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} installed; features: {info}")
    return wheel


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="pyspec install-llama",
        description="Build and install llama-cpp-python with this CPU's SIMD levels; on CPUs "
        "with AMX, with ggml's AMX path and pyspec's fix to it (unfixed, it crashes: "
        "llama.cpp #20824). Your CMAKE_ARGS (e.g. -DGGML_CUDA=on) are appended.",
    )
    parser.add_argument(
        "--force", action="store_true", help="rebuild even if a wheel with the same flags is cached"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan only")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument(
        "--amx",
        dest="amx",
        action="store_const",
        const=True,
        default=None,
        help="require ggml's AMX matrix multiply, with pyspec's fix to its tile "
        "setup (the default on CPUs with amx_tile and amx_int8)",
    )
    choice.add_argument(
        "--no-amx",
        dest="amx",
        action="store_const",
        const=False,
        help="build without the AMX path, as on CPUs without AMX",
    )
    parser.add_argument(
        "--build-only",
        action="store_true",
        help="build and cache the wheel "
        "without installing it (tests compare the AMX build with the other one)",
    )
    parser.add_argument(
        "--simd",
        choices=sorted(SIMD_CEILINGS),
        default=None,
        help="build for at most this SIMD level, leaving out what this CPU has above it "
        "(and AMX): 'avx2' gives the kernels of an AVX2-only CPU such as AMD's Zen 3 "
        "(x86-64-v3), 'avx512' everything but AMX; the default is all this CPU has",
    )
    args = parser.parse_args(argv)
    try:
        install(
            force=args.force,
            dry_run=args.dry_run,
            amx=args.amx,
            build_only=args.build_only,
            simd=args.simd,
        )
    except LlamaBuildError as exc:
        _log(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
