"""Session fixtures (inputs built once, models loaded once) and the end-of-session table."""

from __future__ import annotations

import os
import sys
import time

import pytest
from _results import Results
from _workloads import Workloads

import pyspec
from pyspec.llama.huge_pages import thp_mode

_RESULTS = pytest.StashKey[Results]()
_CPU_AT_START = pytest.StashKey[tuple]()


@pytest.fixture(scope="session")
def workloads() -> Workloads:
    return Workloads()


@pytest.fixture(scope="session")
def results(pytestconfig) -> Results:
    # Kept on the config so pytest_terminal_summary can reach it after the session.
    return pytestconfig.stash.setdefault(_RESULTS, Results())


def _cpu_snapshot():
    """(wall s, whole machine's busy CPU s, this process's and its children's CPU s), or
    None off Linux."""
    try:
        with open("/proc/stat") as f:
            jiffies = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = jiffies[3] + jiffies[4]  # idle + iowait
    busy_s = (sum(jiffies[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    own = os.times()
    # Children count as the run's own: the servers of bench_server, the processes of
    # bench_generation's memory benchmark and the CPU hogs are the benchmarks' load, not
    # another process's (counted once they have exited and been waited for, as all are).
    own_s = own.user + own.system + own.children_user + own.children_system
    return time.monotonic(), busy_s, own_s


def _other_processes_load(start, end) -> float:
    """Fraction of the machine's CPUs that other processes kept busy between two snapshots."""
    wall = end[0] - start[0]
    others = (end[1] - start[1]) - (end[2] - start[2])
    return max(0.0, others) / (wall * (os.cpu_count() or 1)) if wall > 0 else 0.0


def pytest_sessionstart(session):
    snapshot = _cpu_snapshot()
    if snapshot:
        session.config.stash[_CPU_AT_START] = snapshot


GENERATION_ROWS = pytest.StashKey[list]()


@pytest.fixture(scope="session")
def generation_rows(pytestconfig) -> list:
    """Rows of the speculative-generation table (bench_generation.py)."""
    return pytestconfig.stash.setdefault(GENERATION_ROWS, [])


def pytest_benchmark_update_json(config, benchmarks, output_json):
    """Records in the JSON how busy other processes kept the machine, so that the README's
    tables (benchmarks/readme_tables.py) can say whether a run was measured on a quiet one."""
    start, end = config.stash.get(_CPU_AT_START, None), _cpu_snapshot()
    if start and end:
        output_json["other_processes_load"] = round(_other_processes_load(start, end), 4)
    if "llama_cpp" in sys.modules:  # (a suite that never loaded it says nothing of it)
        # The SIMD levels of the llama.cpp build that ran: a build can leave out what the CPU
        # has (`pyspec install-llama --no-amx`, CMAKE_ARGS), and the tables must say so.
        from pyspec.llama.runtime.guard import build_features, system_info

        features = build_features(system_info())
        output_json["llama_cpp_features"] = sorted(k for k, v in features.items() if v == "1")
        # pyspec's Q4_K and Q6_K kernels (pyspec install-llama, x86 builds with AVX2) change
        # the batch curve without changing the features above.
        from pyspec.llama.runtime.build_info import installed_q4k_kernel, installed_q6k_kernel

        output_json["q4k_kernel"] = installed_q4k_kernel()
        output_json["q6k_kernel"] = installed_q6k_kernel()
    # The machine's transparent huge pages: at "always" llama.cpp's own weights (plain
    # llama-cpp-python's, the C++ tools') get 2 MB pages too, as pyspec's always do
    # (pyspec/llama/huge_pages.py), and a comparison between them is another one.
    thp = thp_mode()
    if thp:
        output_json["transparent_huge_pages"] = thp


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rows = config.stash.get(GENERATION_ROWS, None)
    if rows:
        terminalreporter.write_sep("=", "speculative generation vs plain llama-cpp-python")
        for line in rows:
            terminalreporter.write_line(line)
    results = config.stash.get(_RESULTS, None)
    if results is None or not results.verify:
        return
    write = terminalreporter.write_line
    terminalreporter.write_sep("=", "pyspec verify vs baselines")
    write(
        f"medians in µs; verify uses pyspec.default_threads() = {pyspec.default_threads()} "
        f"threads, 'verify 1T' one thread; SIMD {pyspec.SIMD}"
    )
    write(
        "read = np.max(logits, axis=1) (float16: over an int16 view); chain = llama.cpp's "
        "sampler chain per row; '+q' = with draft probabilities"
    )
    for line in results.table_lines():
        write(line)
    start, end = config.stash.get(_CPU_AT_START, None), _cpu_snapshot()
    if start and end:
        # Another busy process stalls default-thread verify by a scheduler slice (~8 ms).
        load = _other_processes_load(start, end)
        message = (
            f"other processes kept {100 * load:.0f}% of the {os.cpu_count()} CPUs "
            "busy during the run"
        )
        if load > 0.05:
            write(
                f"warning: {message}; the timings (default-thread verify most) are not "
                "trustworthy: rerun on an idle machine",
                yellow=True,
            )
        else:
            write(message)
