"""The pytest-benchmark JSON files behind the README's figures: finding one suite's file,
its benchmarks by name, and the line that says when and on what machine it was measured.

Standard library only: ``readme_tables.py`` must run (and ``--check`` must pass) on a
machine without pyspec's library, models or pytest-benchmark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "docs" / "results"


class MissingResults(Exception):
    """A benchmark a section needs is not in its file: the README cannot claim it."""


@dataclass
class Run:
    """One suite's JSON file, as ``pyspec bench`` (``--benchmark-json``) wrote it."""

    suite: str
    path: Path
    data: dict

    @property
    def benchmarks(self) -> list:
        return self.data.get("benchmarks", [])

    def named(self, function: str) -> list:
        """The benchmarks of one test function (``bench_x`` matches ``bench_x[...]``)."""
        return [b for b in self.benchmarks if b["name"].split("[")[0] == function]

    def one(self, name: str) -> dict:
        for b in self.benchmarks:
            if b["name"] == name:
                return b
        raise MissingResults(f"{self.path}: no benchmark {name!r}")

    @property
    def where(self) -> str:
        """The file's path as the docs name it: from the repository root where it lies there."""
        path = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path
        return path.as_posix()

    def measured_line(self) -> str:
        """When, on what, and how quiet: the README says this above every generated table,
        so a figure is never read without its machine and date."""
        line = f"*Measured {self.data.get('datetime', '?')[:10]} on {machine(self.data)}"
        line += kernels(self.data) + huge_pages_setting(self.data)
        load = self.data.get("other_processes_load")
        if load is not None:
            # conftest.py records it: a busy machine stalls default-thread timings.
            line += f"; other processes kept {100 * load:.0f}% of the CPUs busy"
        return line + f" (`{self.where}`).*"


def machine(data: dict) -> str:
    """'AMD EPYC (family 25, model 17), 2 CPUs, AVX-512': the SIMD level decides verify's
    speed, and the brand alone does not say it; nor which generation a virtual machine's
    bare 'AMD EPYC' is (family 25 and 26 batch the same model at different costs)."""
    cpu = data.get("machine_info", {}).get("cpu", {})
    brand = cpu.get("brand_raw", "an unknown CPU")
    if "family" in cpu and "model" in cpu:
        brand += f" (family {cpu['family']}, model {cpu['model']})"
    text = f"{brand}, {cpu.get('count', '?')} CPUs"
    flags = set(cpu.get("flags", ()))
    if "avx512f" in flags:
        text += ", AVX-512" + (", AMX" if {"amx_tile", "amx_int8"} <= flags else "")
    elif "avx2" in flags:
        text += ", AVX2, no AVX-512"
    return text


def kernels(data: dict) -> str:
    """'; llama.cpp built for AVX2 only': the SIMD level of the llama.cpp build the run
    used (``llama_cpp_features``, recorded by benchmarks/conftest.py), where it is not all
    the CPU has. The batch curve, and so every speculative figure, follows the build's
    kernels, not the CPU's flags: an AVX2-only build on an AMX Xeon batches like an AVX2
    CPU. Empty for files recorded before the field, and where the build uses every level.
    "; with pyspec's Q4_K kernel" (or "Q4_K and Q6_K kernels") where the run's build had them
    (``q4k_kernel``, recorded since session 51, ``q6k_kernel`` since session 52: pyspec
    install-llama's x86 kernels, docs/llama-build.md).
    (The levels are those of pyspec.llama.runtime.build_info.SIMD_LEVELS, which `pyspec
    doctor` names the same way; this module runs without pyspec's library, so it cannot
    import them.)"""
    names = [
        name for name, field in (("Q4_K", "q4k_kernel"), ("Q6_K", "q6k_kernel")) if data.get(field)
    ]
    kernel = (
        f"; with pyspec's {' and '.join(names)} kernel{'s' if len(names) > 1 else ''}"
        if names
        else ""
    )
    return _levels_left_out(data) + kernel


def _levels_left_out(data: dict) -> str:
    features = set(data.get("llama_cpp_features") or ())
    if not features:
        return ""
    flags = set(data.get("machine_info", {}).get("cpu", {}).get("flags", ()))
    levels = (  # (llama.cpp's feature, the CPU flag behind it, its name), highest first
        ("AMX_INT8", "amx_int8", "AMX"),
        ("AVX512", "avx512f", "AVX-512"),
        ("AVX2", "avx2", "AVX2"),
    )
    built = next((name for feature, _, name in levels if feature in features), None)
    missing = [name for feature, flag, name in levels if flag in flags and feature not in features]
    if not missing:
        return ""
    if built is None:
        return f"; llama.cpp built without {', '.join(missing)}"
    return f"; llama.cpp built for {built} only (without {', '.join(missing)})"


def huge_pages_setting(data: dict) -> str:
    """'; transparent huge pages always (...)': where the machine gave every program's
    anonymous memory 2 MB pages during the run (``transparent_huge_pages``, recorded by
    benchmarks/conftest.py), llama.cpp's weights had them as pyspec's do, so pyspec's lead
    from them is not in the figures. Empty at the usual setting (madvise: only pyspec asks),
    and for files recorded before the field."""
    if data.get("transparent_huge_pages") != "always":
        return ""
    return "; transparent huge pages always (llama.cpp's own weights in 2 MB pages too)"


def load(suite: str, results_dir: Path = RESULTS_DIR) -> Run:
    path = Path(results_dir) / f"{suite}.json"
    if not path.is_file():
        raise MissingResults(
            f"{path}: no such file (run `python3 -m pyspec bench {suite}` and "
            "take its JSON, see benchmarks/README.md)"
        )
    return Run(suite, path, json.loads(path.read_text()))


def load_first(suites, results_dir: Path = RESULTS_DIR):
    """The first of ``suites`` that has a file (``verify-all`` holds what ``verify`` does),
    or None when none has."""
    for suite in suites:
        if (Path(results_dir) / f"{suite}.json").is_file():
            return load(suite, results_dir)
    return None


def not_measured(suites, results_dir: Path = RESULTS_DIR) -> list:
    """What a section says while no file backs it: that nothing is measured, and how to
    measure it, rather than a table nobody can trace."""
    where = Path(results_dir)
    where = where.relative_to(REPO) if where.is_relative_to(REPO) else where
    # The missing file is named unquoted: tests/test_readme.py holds every `path` to exist.
    return [
        f"*Not measured: `{where.as_posix()}/` holds no {suites[0]}.json. "
        f"`(cd benchmarks && python3 -m pyspec bench {suites[0]} --out ../bench-results)`, then "
        "`python3 benchmarks/readme_tables.py --take bench-results`, fills this in.*"
    ]


def stripped(data: dict) -> dict:
    """The JSON without each benchmark's raw timings (``stats.data``, megabytes for the verify
    suites): the README needs the statistics and ``extra_info`` only."""
    out = dict(data, benchmarks=[])
    for b in data.get("benchmarks", []):
        stats = {k: v for k, v in (b.get("stats") or {}).items() if k != "data"}
        out["benchmarks"].append(dict(b, stats=stats))
    return out
