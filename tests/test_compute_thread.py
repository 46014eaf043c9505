"""pyspec serve's compute thread: every load and decode on one thread, so that llama.cpp's
OpenMP build keeps one team of threads (pyspec/serve/compute_thread.py)."""

from __future__ import annotations

import os
import threading

import pytest

pytest.importorskip("fastapi", reason="pyspec serve needs the [server] packages")

from pyspec.serve import compute_thread


def test_run_executes_on_one_thread_and_raises_there_errors_here():
    seen = set()

    def where():
        seen.add(threading.get_ident())
        return compute_thread.on_compute_thread()

    callers = [threading.Thread(target=lambda: compute_thread.run(where)) for _ in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert compute_thread.run(where) is True and len(seen) == 1
    assert threading.get_ident() not in seen and not compute_thread.on_compute_thread()
    assert compute_thread.run(compute_thread.run, where) is True  # nested: no deadlock
    with pytest.raises(ZeroDivisionError):
        compute_thread.run(lambda: 1 / 0)


def test_pinned_iterates_on_the_compute_thread_and_closes_there():
    threads, closed_on = [], []

    def numbers():
        try:
            for i in range(5):
                threads.append(threading.get_ident())
                yield i
        finally:
            closed_on.append(compute_thread.on_compute_thread())

    assert list(compute_thread.pinned(numbers())) == [0, 1, 2, 3, 4]
    assert len(set(threads)) == 1 and threading.get_ident() not in threads
    partial = compute_thread.pinned(numbers())
    assert next(partial) == 0
    partial.close()  # a client that went away mid-answer
    assert closed_on == [True, True]


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.model
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_a_served_model_decodes_on_one_team_of_threads_whoever_asks(gemma_path):
    """A thread that decodes with llama.cpp gets an OpenMP team of its own (a worker thread
    per thread beyond the first), as the control shows; through the served model's entry
    points, request threads add no team: only the compute thread's decodes."""
    from pyspec.serve.app import SpeculativeLlamaProxy
    from pyspec.serve.settings import SpeculativeModelSettings

    settings = SpeculativeModelSettings(
        model=gemma_path, n_ctx=512, n_threads=2, verbose=False, calibrate=False
    )
    llama = SpeculativeLlamaProxy.load_llama_from_model_settings(settings)
    raw = type(llama).create_completion  # the unpinned method, for the control

    def teams_added(complete) -> int:
        """OS threads left by 3 request threads that each stream an answer and stay alive
        (a team lives as long as the thread that owns it), beyond the 3 themselves."""
        release, done = threading.Event(), []
        one_at_a_time = threading.Lock()  # as llama_cpp.server serves a model

        def request():
            with one_at_a_time:
                out = complete(prompt="def add(a, b):", max_tokens=4, temperature=0.0, stream=True)
                done.append("".join(c["choices"][0]["text"] for c in out))
            release.wait()

        before = _os_threads()
        callers = [threading.Thread(target=request) for _ in range(3)]
        for t in callers:
            t.start()
        while len(done) < 3 and all(t.is_alive() for t in callers):
            threading.Event().wait(0.05)
        added = _os_threads() - before - len(callers)
        release.set()
        for t in callers:
            t.join()
        assert len(done) == 3
        return added

    try:
        assert teams_added(llama.create_completion) == 0
        control = teams_added(lambda **kw: raw(llama, **kw))
    finally:
        llama.close()
    if control == 0:
        pytest.skip("this llama.cpp build gives a calling thread no OpenMP team")
    assert control >= 3  # one worker thread per request thread, unpinned
