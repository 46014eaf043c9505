"""Model weights moved into 2 MB pages after the load (pyspec/llama/huge_pages.py)."""

import ctypes
import mmap
import sys

import pytest

from pyspec.llama import huge_pages
from pyspec.llama.huge_pages import HUGE_PAGE, MIN_REGION, collapse, into_huge_pages, new_intervals

MB = 1 << 20

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def test_new_intervals_are_what_no_earlier_mapping_covered():
    before = [(100, 200), (300, 400)]
    # a new mapping, one that grew at its end, one merged with two old ones across a gap
    after = [(0, 50), (300, 450), (90, 260)]
    assert new_intervals(before, after) == [(0, 50), (90, 100), (200, 260), (400, 450)]
    assert new_intervals([], [(5, 9)]) == [(5, 9)]
    assert new_intervals([(0, 10)], [(0, 10)]) == []


def anon_huge_kb(address: int) -> int:
    """AnonHugePages of the mapping that holds ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return 0


def private_buffer(size: int) -> mmap.mmap:
    """Private anonymous memory, as malloc gives llama.cpp (mmap's default is shared memory,
    whose huge pages the shmem setting governs instead)."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


@linux_only
def test_a_filled_buffer_is_collapsed_and_reserved_space_beside_it_is_not():
    why = huge_pages.why_not_here()
    if why:
        pytest.skip(f"huge pages cannot be made here: {why}")
    size = 2 * MIN_REGION + 4 * HUGE_PAGE
    buffer = private_buffer(size)
    try:
        start = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
        filled = MIN_REGION + 2 * HUGE_PAGE  # the weights; the rest stays unfaulted
        buffer[:filled] = bytes(range(256)) * (filled // 256)
        report = collapse([(start, start + size)])
        lo = -(-start // HUGE_PAGE) * HUGE_PAGE
        # Every whole huge page of the filled part, nothing of the reserved part.
        assert report.regions == 1 and report.why_not == ""
        assert (start + filled) // HUGE_PAGE * HUGE_PAGE - lo == report.bytes
        assert anon_huge_kb(start) * 1024 >= report.bytes
        assert buffer[:filled] == bytes(range(256)) * (filled // 256)  # unchanged
        assert buffer[filled:].count(0) == size - filled  # and still nothing written there
        # A run of filled memory shorter than a model's weights is left alone.
        small = collapse([(start + filled, start + filled + 8 * MB)])
        assert small.bytes == 0 and "no region" in small.why_not
    finally:
        buffer.close()


def test_turned_off_by_the_argument_or_the_environment(monkeypatch):
    with into_huge_pages(False) as report:
        pass
    assert not report.asked and report.bytes == 0 and "turned off" in report.describe()
    assert str(report) == report.describe()  # print() gives the sentence, as the docs show
    monkeypatch.setenv("PYSPEC_HUGE_PAGES", "off")
    with into_huge_pages(True) as report:
        pass
    assert not report.asked and "PYSPEC_HUGE_PAGES" in report.why_not


def test_where_transparent_huge_pages_are_off_the_report_says_so(monkeypatch, tmp_path):
    setting = tmp_path / "enabled"
    setting.write_text("always madvise [never]\n")
    monkeypatch.setattr(huge_pages, "THP_SETTING", setting)
    report = collapse([(0, 4 * MIN_REGION)])
    assert report.bytes == 0 and "never" in report.why_not


def test_weights_are_read_in_only_where_they_will_reach_huge_pages(monkeypatch, tmp_path):
    setting = tmp_path / "enabled"
    monkeypatch.setattr(huge_pages, "THP_SETTING", setting)
    linux = sys.platform.startswith("linux")
    for mode, expected in (("[always] madvise never", linux), ("always [madvise] never", linux)):
        setting.write_text(mode + "\n")
        assert huge_pages.read_weights_in() is expected
        assert huge_pages.read_weights_in(False) is False
    setting.write_text("always madvise [never]\n")
    assert huge_pages.read_weights_in() is False
    setting.unlink()  # unreadable: the mapping stays
    assert huge_pages.read_weights_in() is False
    setting.write_text("[always] madvise never\n")
    monkeypatch.setenv("PYSPEC_HUGE_PAGES", "off")
    assert huge_pages.read_weights_in() is False


def test_a_refused_collapse_says_why_by_its_error(monkeypatch):
    """An old kernel (EINVAL) and a moment without free 2 MB blocks (EAGAIN) read apart."""
    import errno

    class Refusing:  # every page present, every madvise refused with ``err``
        def __init__(self, err):
            self.err = err

        def mincore(self, start, length, vec):
            ctypes.memset(vec, 1, length // mmap.PAGESIZE)
            return 0

        def madvise(self, start, length, advice):
            ctypes.set_errno(self.err)
            return -1

    monkeypatch.setattr(huge_pages, "thp_mode", lambda: "madvise")
    for err, words in ((errno.EINVAL, "needs Linux 6.1"), (errno.EAGAIN, "too fragmented")):
        monkeypatch.setattr(huge_pages, "_libc", lambda err=err: Refusing(err))
        report = collapse([(0, 2 * MIN_REGION)])
        assert report.bytes == 0 and words in report.why_not, report.why_not


@linux_only
def test_the_doctor_says_whether_a_models_weights_get_2_mb_pages(monkeypatch, tmp_path):
    from pyspec.tools.doctor import OK, WARN, Report, check_huge_pages

    def said():
        report = Report()
        check_huge_pages(report)
        return report.lines[-1]

    level, _, detail = said()
    assert (level == OK) == (huge_pages.why_not_here() == ""), detail
    setting = tmp_path / "enabled"
    setting.write_text("always madvise [never]\n")
    monkeypatch.setattr(huge_pages, "THP_SETTING", setting)
    level, _, detail = said()
    assert level == WARN and "never" in detail and "4 KB pages" in detail
    monkeypatch.setenv("PYSPEC_HUGE_PAGES", "off")
    level, _, detail = said()
    assert level == WARN and "turned off" in detail


@linux_only
def test_a_real_model_decodes_the_same_from_huge_pages(qwen_path):
    # Qwen2.5-Coder 1.5B: its repacked weights fill hundreds of MiB on every x86 build (the
    # AMX buffer, or the repacked Q4_K one); a 270M model's may not reach MIN_REGION there.
    import llama_cpp

    from pyspec.llama import SpeculativeLlama

    kw = dict(n_ctx=512, n_threads=2, verbose=False)
    prompt = "def fibonacci(n):\n"
    texts, reports = [], []
    for on in (True, False):
        # No drafts: every round one token, so both decode the very same batches and any
        # difference would be the weights' bytes, not a near-tie of batch shapes.
        llm = SpeculativeLlama(qwen_path, draft_max=0, huge_pages=on, **kw)
        reports.append(llm.huge_pages)
        # read from the file (not mapped) exactly where the weights go to huge pages
        assert mapped(llm) is not (on and huge_pages.read_weights_in())
        if on and llm.huge_pages.bytes:  # the kernel holds them in huge pages now
            assert sum_anon_huge_kb() * 1024 >= llm.huge_pages.bytes
        texts.append(llm.create_completion(prompt, max_tokens=24, temperature=0.0))
        llm.close()
    on, off = reports
    assert not off.asked and off.bytes == 0
    info = llama_cpp.llama_print_system_info().decode()
    repacked = "AMX_INT8 = 1" in info or "REPACK = 1" in info  # weights in llama.cpp's buffers
    if repacked and not huge_pages.why_not_here():
        assert on.bytes >= MIN_REGION and on.seconds > 0, on
    assert texts[0]["choices"][0]["text"] == texts[1]["choices"][0]["text"]
    if huge_pages.read_weights_in():  # a caller's use_mmap is kept
        llm = SpeculativeLlama(qwen_path, draft_max=0, use_mmap=True, **kw)
        assert mapped(llm)
        llm.close()


def mapped(llm) -> bool:
    """Whether llama.cpp mapped the model's file (use_mmap) rather than reading it in."""
    import llama_cpp

    return llm.model_params.load_mode in (
        llama_cpp.LLAMA_LOAD_MODE_MMAP,
        llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK,
    )


def sum_anon_huge_kb() -> int:
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return 0
