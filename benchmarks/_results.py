"""Timing, the session's collected medians, the ratios derived from them, and the table.

Every ratio is a ratio of medians taken in the same session on the same array. Ratios are
reported (in ``benchmark.extra_info`` and the end-of-session table), never asserted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from _workloads import Case

import pyspec

THREAD_CHOICES = (None, 1)  # None: pyspec.default_threads()


def measure(
    benchmark,
    case: Case,
    fn: Callable,
    *,
    budget_s: float = 0.4,
    min_rounds: int = 15,
    max_rounds: int = 2000,
):
    """Times ``fn`` (one call per round) for about ``budget_s``, returns its last result.

    Rounds are sized from the fastest of three warm calls rather than left to
    pytest-benchmark's calibration: that keeps the suite's length predictable (the llama.cpp
    chain is 10-70x slower than verify) while fast calls get enough rounds for a stable
    median.
    """
    benchmark.group = case.group
    fn()  # the first call pays for page faults and pyspec's scratch
    once = min(_seconds(fn) for _ in range(3))  # min: one preempted call must not set it
    rounds = int(min(max_rounds, max(min_rounds, budget_s / max(once, 1e-7))))
    return benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)


def _seconds(fn: Callable) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _case_info(case: Case, logits_bytes: int) -> dict:
    return {
        "input": case.source,
        "dtype": case.dtype,
        "vocab": case.vocab,
        "k": case.k,
        "params": case.params_label,
        "logits_bytes": logits_bytes,
    }


@dataclass
class _Timing:
    median_s: float
    extra_info: dict  # the benchmark's own dict: later updates still reach its JSON


class Results:
    """The medians of this session's benchmarks, keyed so baselines can be shared."""

    def __init__(self):
        self.verify = {}  # (Case, n_threads) -> _Timing
        self.read_pass = {}  # Case.array_key -> _Timing
        self.chain = {}  # Case.chain_key -> _Timing

    @staticmethod
    def _record(table: dict, key, benchmark, info: dict) -> None:
        benchmark.extra_info.update(info)
        if not benchmark.stats:  # --benchmark-disable: ran once, nothing timed
            return
        median = benchmark.stats.stats.median
        benchmark.extra_info["median_us"] = median * 1e6
        benchmark.extra_info["read_gb_per_s"] = info["logits_bytes"] / median / 1e9
        table[key] = _Timing(median, benchmark.extra_info)

    def add_verify(
        self, case: Case, n_threads: Optional[int], benchmark, logits_bytes: int, n_accepted: int
    ) -> None:
        threads = pyspec.default_threads() if n_threads is None else n_threads
        info = dict(_case_info(case, logits_bytes), n_threads=threads, n_accepted=n_accepted)
        self._record(self.verify, (case, n_threads), benchmark, info)
        self._update_ratios()

    def add_read_pass(self, case: Case, benchmark, logits_bytes: int) -> None:
        info = dict(_case_info(case, logits_bytes), params=None)
        self._record(self.read_pass, case.array_key, benchmark, info)
        self._update_ratios()

    def add_chain(self, case: Case, benchmark, logits_bytes: int) -> None:
        self._record(self.chain, case.chain_key, benchmark, _case_info(case, logits_bytes))
        self._update_ratios()

    def _update_ratios(self) -> None:
        # Benchmarks may run in any order (or only some of them): fill in whatever is known.
        for (case, _), timing in self.verify.items():
            read = self.read_pass.get(case.array_key)
            chain = self.chain.get(case.chain_key)
            if read:
                timing.extra_info["verify_over_read_pass"] = timing.median_s / read.median_s
            if chain:
                timing.extra_info["chain_over_verify"] = chain.median_s / timing.median_s

    def _median(self, table: dict, key) -> Optional[float]:
        timing = table.get(key)
        return None if timing is None else timing.median_s

    def table_lines(self) -> list:
        """One row per verify configuration: medians in µs and the ratios between them."""
        cases = sorted(
            {case for case, _ in self.verify},
            key=lambda c: (
                c.source,
                c.vocab,
                c.k,
                c.dtype != "float32",
                ("greedy", "default", "default+q").index(c.params_label),
            ),
        )
        header = (
            "input",
            "V",
            "k",
            "params",
            "accepted",
            "verify",
            "verify 1T",
            "read",
            "chain",
            "verify/read",
            "1T/read",
            "chain/verify",
        )
        rows = []
        for case in cases:
            verify = self._median(self.verify, (case, None))
            verify_1t = self._median(self.verify, (case, 1))
            read = self._median(self.read_pass, case.array_key)
            chain = self._median(self.chain, case.chain_key)
            accepted = self.verify.get((case, None)) or self.verify.get((case, 1))
            accepted = str(accepted.extra_info["n_accepted"]) if accepted else "-"
            rows.append(
                (
                    case.input_label,
                    str(case.vocab),
                    str(case.k),
                    case.params_label,
                    accepted,
                    _us(verify),
                    _us(verify_1t),
                    _us(read),
                    _us(chain),
                    _ratio(verify, read),
                    _ratio(verify_1t, read),
                    _ratio(chain, verify),
                )
            )
        widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
        fmt = lambda row: "  ".join(  # noqa: E731 - text left, numbers right
            cell.ljust(w) if i in (0, 3) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths))
        )
        return [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]


def _us(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    us = seconds * 1e6
    return f"{us:.1f}" if us < 1000 else f"{us:.0f}"


def _ratio(numerator: Optional[float], denominator: Optional[float]) -> str:
    if numerator is None or denominator is None:
        return "-"
    return f"{numerator / denominator:.2f}"
