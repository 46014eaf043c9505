"""llama.cpp's own C++ tools (``llama-speculative-simple``, ``llama-bench``, and
``llama-server`` for the server benchmark), the fair peer.

Built from the llama.cpp sources vendored in the llama-cpp-python sdist the installed wheel
was built from, with the very CMake arguments ``pyspec install-llama`` gave that wheel (and
pyspec's AMX fix when the build has AMX): the same kernels as the Python side, so a speed
difference is the loops', not the builds'. Cached under ``~/.cache/pyspec/llama-tools/<key>``.

    python benchmarks/_llama_cpp_tools.py   # builds (about 6 minutes on 2 cores), prints the path
    python benchmarks/_llama_cpp_tools.py llama-server   # the server, in a directory of its own
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from _cpp_request_time import request_seconds

from pyspec.cache import cache_dir as cache_root
from pyspec.llama.runtime import x86_kernels
from pyspec.tools import install_llama as llama_build

TARGETS = ("llama-speculative-simple", "llama-bench")
# Built apart, so that the tools' cached build (keyed by its targets) stays valid.
SERVER_TARGETS = ("llama-server",)


class ToolsUnavailable(RuntimeError):
    pass


def _cmake_args() -> list:
    build = llama_build.installed_build()
    if build is None:
        raise ToolsUnavailable(
            "the installed llama-cpp-python was not built by `pyspec install-llama`: "
            "its CMake arguments are unknown, so the C++ peer could not match them"
        )
    return list(build["cmake_args"])


def tools_dir(cmake_args: list, targets: tuple = TARGETS) -> Path:
    key = hashlib.sha256(
        json.dumps(
            {
                "args": cmake_args,
                "version": llama_build.LLAMA_CPP_PYTHON_VERSION,
                "targets": targets,
                # (present only where it applies: other builds keep their directories)
                **x86_kernels.versions(cmake_args),
            }
        ).encode()
    ).hexdigest()[:16]
    return cache_root() / "llama-tools" / f"llama.cpp-{llama_build.LLAMA_CPP_PYTHON_VERSION}-{key}"


def binary(directory: Path, name: str) -> Path:
    return directory / "build" / "bin" / name


def _log(message: str) -> None:
    print(f"llama-tools: {message}", file=sys.stderr, flush=True)


def _source(directory: Path, amx: bool, kernel: bool) -> Path:
    # The sdist install-llama keeps (an AMX build downloads it; a build from pip does not,
    # so it is downloaded here the first time, into the same place).
    sdist = llama_build.download_sdist(llama_build.sdist_dir(cache_root() / "llama-build"))
    tree = llama_build.unpack_sdist(sdist, directory, amx_fix=amx, kernels=kernel)
    return tree / "vendor" / "llama.cpp"


def ensure_tools(targets: tuple = TARGETS, *, quiet: bool = False) -> Path:
    """The directory holding the built ``targets``; builds them the first time."""
    cmake_args = _cmake_args()
    directory = tools_dir(cmake_args, targets)
    if all(binary(directory, t).exists() for t in targets):
        return directory
    if shutil.which("cmake") is None:
        raise ToolsUnavailable("cmake is not on PATH")
    directory.mkdir(parents=True, exist_ok=True)
    amx = llama_build.amx_enabled(cmake_args)
    # The same patches as the wheel's: the C++ peer must be the same build.
    kernel = x86_kernels.applies_to(cmake_args)
    tree = _source(directory, amx, kernel)
    build = directory / "build"
    configure = [
        "cmake",
        "-S",
        str(tree),
        "-B",
        str(build),
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=ON",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=ON",
        "-DLLAMA_BUILD_TOOLS=ON",
        f"-DLLAMA_BUILD_SERVER={'ON' if 'llama-server' in targets else 'OFF'}",
        # the server's web page is fetched from a model hub, which these machines cannot
        # reach: llama-server is built without it (its API is what is measured)
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        *cmake_args,
    ]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    _log(f"building {', '.join(targets)} from the vendored sources with {' '.join(cmake_args)}")
    for cmd in (
        configure,
        ["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2), "--target", *targets],
    ):
        done = subprocess.run(
            cmd, stdout=subprocess.DEVNULL if quiet else sys.stderr, stderr=subprocess.STDOUT
        )
        if done.returncode != 0:
            raise ToolsUnavailable(f"failed ({done.returncode}): {' '.join(cmd)}")
    (directory / "tools.json").write_text(
        json.dumps(
            {"cmake_args": cmake_args, "amx_fix": amx, **x86_kernels.versions(cmake_args)},
            indent=1,
        )
    )
    shutil.rmtree(directory / "src", ignore_errors=True)
    return directory


_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_COUNT = re.compile(r"\b(n_drafted|n_accept|n_predict)\s*=\s*(\d+)")  # lines carry a log prefix


def run_speculative(
    tools: Path,
    model: str,
    prompt_text: str,
    spec_type: str,
    *,
    n_predict: int,
    threads: int,
    n_ctx: int = 4096,
    extra=(),
    workdir: Path,
) -> dict:
    """One greedy generation by llama-speculative-simple: decode tokens/s (its own count:
    every generated token over the loop's time), prompt tokens and time, drafted and
    accepted tokens, and the text. Flash attention on (what its default, auto, picks on
    a CPU). ``prompt_text`` is written to a file with one more
    newline than it ends with: the tool's -f drops one."""
    prompt_file = workdir / "prompt.txt"
    prompt_file.write_text(prompt_text + "\n")
    cmd = [
        str(binary(tools, "llama-speculative-simple")),
        "-m",
        model,
        "-f",
        str(prompt_file),
        "-n",
        str(n_predict),
        "-c",
        str(n_ctx),
        "-t",
        str(threads),
        "-tb",
        str(threads),
        "--temp",
        "0",
        "-s",
        "0",
        "-fa",
        "on",
        "--spec-type",
        spec_type,
        *extra,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    log = done.stdout + done.stderr
    decoded, encoded = _DECODED.search(log), _ENCODED.search(log)
    if done.returncode != 0 or decoded is None or encoded is None:
        raise ToolsUnavailable(f"{' '.join(cmd)} failed ({done.returncode}):\n{log[-2000:]}")
    counts = {k: int(v) for k, v in _COUNT.findall(log)}
    n, seconds = int(decoded.group(1)), float(decoded.group(2))
    rate = n / seconds if seconds else 0.0
    prompt_seconds = float(encoded.group(2))
    return {
        "rate": rate,
        "tokens": n,
        "decode_seconds": seconds,
        "prompt_tokens": int(encoded.group(1)),
        "prompt_seconds": prompt_seconds,
        "seconds": request_seconds(prompt_seconds, n, rate, n_predict),
        "drafted": counts.get("n_drafted", 0),
        "accepted": counts.get("n_accept", 0),
        "text": done.stdout,
    }


def bench_tg(
    tools: Path, model: str, *, n_gen: int, threads: int, repetitions: int = 3, depth: int = 0
) -> float:
    """llama-bench's text-generation rate (tokens/s, its mean over ``repetitions``), after a
    context of ``depth`` tokens (``-d``: a decode's cost grows with what it attends to)."""
    cmd = [
        str(binary(tools, "llama-bench")),
        "-m",
        model,
        "-p",
        "0",
        "-n",
        str(n_gen),
        "-t",
        str(threads),
        "-r",
        str(repetitions),
        "-fa",
        "on",
        "-d",
        str(depth),
        "-o",
        "json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise ToolsUnavailable(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-1500:]}")
    rows = json.loads(done.stdout)
    return float(rows[0]["avg_ts"])


if __name__ == "__main__":
    print(ensure_tools(tuple(sys.argv[1:]) or TARGETS))
