"""A model's weights moved into 2 MB pages after it loads (Linux), for faster decoding.

A decode reads every weight once, about a gigabyte for a 1.5B model in Q4_K, and with 4 KB
pages that is a quarter of a million page translations per token, more than the CPU's TLB
holds. llama.cpp repacks the weights into buffers of its own (the AMX buffer on CPUs with
AMX, the repacked Q4_K buffer on other x86 CPUs), plain anonymous memory, and most Linux
machines give anonymous memory huge pages only where the program asks for them
(``/sys/kernel/mm/transparent_hugepage/enabled`` = madvise, the common default), which
llama.cpp does not. Measured on an Intel Xeon with AMX (family 6, model 167, 2 cores,
Qwen2.5-Coder 1.5B, docs/generation.md): one token 14.5 tok/s with the buffer in 4 KB
pages, 17.2-17.9 after moving it into 2 MB pages, 2.5 s for its 950 MB at load.

``into_huge_pages`` wraps a model load: the anonymous memory that appeared during it, in
runs of at least ``MIN_REGION`` whose every page is present (the weights the load wrote;
not the KV cache, which fills as requests run, nor reserved space, which may share one
mapping with a buffer), is marked ``MADV_HUGEPAGE`` and collapsed into huge pages at once
with ``MADV_COLLAPSE`` (Linux 6.1+). Nothing changes what
the memory holds. Where it cannot be done (another OS, huge pages off, an older kernel) the
report says why and the model runs as llama.cpp left it.

The weights llama.cpp does not repack (on x86 the Q6_K matrices of a Q4_K_M model, a third
of it, and the embeddings) stay in the model file's mapping, whose 4 KB pages of the file
cache no madvise turns into 2 MB ones. So where the weights can go into huge pages
(``read_weights_in``) pyspec loads the model with ``use_mmap=False`` unless its caller chose:
llama.cpp then reads the file into anonymous memory, which is collapsed with the rest. Measured
on an AMD EPYC Zen 5 (family 26, model 2; THP madvise; Qwen2.5-Coder 1.5B, 2 threads, pyspec's
Q4_K and Q6_K kernels): a one-token pass 22.3-23.2 ms against 25.5-25.9 with the file mapped,
2 tokens 26.4-27.3 against 28.4-29.0; the cost is a private copy of the file's weights (the
file cache's copy can be dropped) and the read at load (1.1 GB, about a second).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import mmap
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pyspec.switches import switched_off

MADV_HUGEPAGE = 14  # linux/mman.h
MADV_COLLAPSE = 25  # linux/mman.h, since Linux 6.1
HUGE_PAGE = 2 << 20
MIN_REGION = 64 << 20  # smaller runs of filled memory are not a model's weights
_MADVISE_HINTS = {  # what a refusal of MADV_HUGEPAGE or MADV_COLLAPSE means, by errno
    errno.EINVAL: " (MADV_COLLAPSE needs Linux 6.1 or later)",
    errno.EAGAIN: " (no free 2 MB block at the moment: free memory too fragmented)",
    errno.ENOMEM: " (no free 2 MB block at the moment: free memory too fragmented)",
}
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def enabled_by_env() -> bool:
    """False when ``PYSPEC_HUGE_PAGES`` is off (0, off, no, false)."""
    return not switched_off("PYSPEC_HUGE_PAGES")


@dataclass
class HugePages:
    """What ``into_huge_pages`` did: bytes moved into huge pages, in how many regions, how
    long it took, and why not (or not all), '' when nothing stood in the way."""

    bytes: int = 0
    regions: int = 0
    seconds: float = 0.0
    why_not: str = ""
    asked: bool = True  # False: turned off by the caller or PYSPEC_HUGE_PAGES

    def describe(self) -> str:
        if self.bytes:
            done = (
                f"model weights in 2 MB pages: {self.bytes >> 20} MiB in {self.regions} "
                f"region(s), {self.seconds:.1f} s"
            )
            return done + (f" ({self.why_not})" if self.why_not else "")
        return f"model weights left in the pages llama.cpp gave them: {self.why_not}"

    __str__ = describe  # print(llm.huge_pages) gives the sentence; repr() the fields


def anonymous_regions() -> list:
    """(start, end) of this process's private writable anonymous mappings."""
    regions = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            # start-end perms offset dev inode [path]: anonymous ones have inode 0, no path
            if len(fields) == 5 and fields[1].startswith("rw") and fields[4] == "0":
                start, end = (int(x, 16) for x in fields[0].split("-"))
                regions.append((start, end))
    return regions


def new_intervals(before: list, after: list) -> list:
    """The parts of ``after``'s intervals that no interval of ``before`` covers (a mapping
    that grew, or merged with a neighbour, contributes only what it added)."""
    before = sorted(before)
    out = []
    for start, end in sorted(after):
        pieces = [(start, end)]
        for b_start, b_end in before:
            if b_start >= end:
                break
            if b_end <= start:
                continue
            cut = []
            for p_start, p_end in pieces:
                if b_end <= p_start or b_start >= p_end:
                    cut.append((p_start, p_end))
                    continue
                if p_start < b_start:
                    cut.append((p_start, b_start))
                if b_end < p_end:
                    cut.append((b_end, p_end))
            pieces = cut
        out += pieces
    return out


def _libc():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return libc


def present_runs(libc, start: int, length: int) -> list:
    """(start, end) of the runs of whole huge pages in [start, start + length) (both
    HUGE_PAGE-aligned) whose every page is in memory (mincore): a buffer the load filled,
    not the reserved space that may sit in the same mapping beside it."""
    pages = length // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    if libc.mincore(start, length, vec) != 0:
        return []
    per_huge = HUGE_PAGE // mmap.PAGESIZE
    present = bytes(vec)
    runs, run_start = [], None
    for i in range(0, pages, per_huge):
        full = all(b & 1 for b in present[i : i + per_huge])
        at = start + i * mmap.PAGESIZE
        if full and run_start is None:
            run_start = at
        elif not full and run_start is not None:
            runs.append((run_start, at))
            run_start = None
    if run_start is not None:
        runs.append((run_start, start + length))
    return runs


def thp_mode() -> str:
    """The kernel's transparent huge pages setting for anonymous memory ('always', 'madvise',
    'never'), or '' where it cannot be read."""
    try:
        text = THP_SETTING.read_text()
    except OSError:
        return ""
    return text[text.find("[") + 1 : text.find("]")] if "[" in text else text.strip()


def collapse(intervals: list, report: Optional[HugePages] = None) -> HugePages:
    """Moves the nearly full regions of at least MIN_REGION among ``intervals`` into huge
    pages (their 2 MB-aligned parts); fills and returns ``report`` (a new one by default)."""
    report = HugePages() if report is None else report
    if thp_mode() == "never":
        report.why_not = f"transparent huge pages are off on this machine ({THP_SETTING}: never)"
        return report
    libc = _libc()
    start_time = time.perf_counter()
    failures = []
    for start, end in intervals:
        lo = -(-start // HUGE_PAGE) * HUGE_PAGE
        hi = end // HUGE_PAGE * HUGE_PAGE
        if hi - lo < MIN_REGION:
            continue
        for run_lo, run_hi in present_runs(libc, lo, hi - lo):
            if run_hi - run_lo < MIN_REGION:
                continue
            if libc.madvise(run_lo, run_hi - run_lo, MADV_HUGEPAGE) != 0 or (
                libc.madvise(run_lo, run_hi - run_lo, MADV_COLLAPSE) != 0
            ):
                failures.append(ctypes.get_errno())
                continue
            report.bytes += run_hi - run_lo
            report.regions += 1
    report.seconds = time.perf_counter() - start_time
    if failures:
        report.why_not = (
            f"madvise refused {len(failures)} region(s): {os.strerror(failures[0])}"
            + _MADVISE_HINTS.get(failures[0], "")
        )
    elif not report.bytes:
        report.why_not = "no region of the model's weights was found in anonymous memory"
    return report


def read_weights_in(enabled: bool = True) -> bool:
    """Whether pyspec loads a model's weights into memory (``use_mmap=False``) rather than
    mapping the file: where they will be moved into huge pages (on, Linux, transparent huge
    pages not off). See the module's docstring."""
    if not enabled or not enabled_by_env() or not sys.platform.startswith("linux"):
        return False
    return thp_mode() in ("always", "madvise")


def why_not_here() -> str:
    """'' where this machine moves a filled anonymous buffer of a model's size into 2 MB
    pages, as ``into_huge_pages`` does after a load, else why not (a trial on 68 MB of
    private anonymous memory, as malloc gives llama.cpp; ``pyspec doctor``)."""
    if not sys.platform.startswith("linux"):
        return f"only on Linux, not {sys.platform}"
    # (mmap's default is shared memory, whose huge pages another setting governs)
    buffer = mmap.mmap(-1, MIN_REGION + 2 * HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        buffer.write(b"\x01" * len(buffer))
        view = ctypes.c_char.from_buffer(buffer)
        start = ctypes.addressof(view)
        del view  # (an exported buffer cannot be closed)
        report = collapse([(start, start + len(buffer))])
        return "" if report.bytes else report.why_not
    finally:
        buffer.close()


@contextlib.contextmanager
def into_huge_pages(enabled: bool = True):
    """Wraps a model load; the report it yields is filled when the block ends (see the
    module's docstring)."""
    report = HugePages()
    if not enabled or not enabled_by_env():
        report.asked = False
        report.why_not = "turned off (huge_pages=False or PYSPEC_HUGE_PAGES=off)"
        yield report
        return
    if not sys.platform.startswith("linux"):
        report.why_not = f"only on Linux, not {sys.platform}"
        yield report
        return
    before = anonymous_regions()
    yield report
    collapse(new_intervals(before, anonymous_regions()), report)
