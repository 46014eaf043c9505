"""Session fixtures (inputs built once, models loaded once) and the end-of-session table."""
from __future__ import annotations

import pytest

import pyspec

from _results import Results
from _workloads import Workloads

_RESULTS = pytest.StashKey[Results]()


@pytest.fixture(scope="session")
def workloads() -> Workloads:
    return Workloads()


@pytest.fixture(scope="session")
def results(pytestconfig) -> Results:
    # Kept on the config so pytest_terminal_summary can reach it after the session.
    return pytestconfig.stash.setdefault(_RESULTS, Results())


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    results = config.stash.get(_RESULTS, None)
    if results is None or not results.verify:
        return
    write = terminalreporter.write_line
    terminalreporter.write_sep("=", "pyspec verify vs baselines")
    write(f"medians in µs; verify uses pyspec.default_threads() = {pyspec.default_threads()} "
          f"threads, 'verify 1T' one thread; SIMD {pyspec.SIMD}")
    write("read = np.max(logits, axis=1) (float16: over an int16 view); chain = llama.cpp's "
          "sampler chain per row; '+q' = with draft probabilities")
    for line in results.table_lines():
        write(line)
    noisy = results.noisy()
    if noisy:
        write(f"warning: {noisy} benchmark(s) have an IQR above half their median; another "
              "process was probably busy (default-thread verify suffers most)", yellow=True)
