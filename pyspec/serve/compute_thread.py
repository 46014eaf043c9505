"""One thread for every llama.cpp computation of the server process.

llama.cpp's CPU back end (built with OpenMP, as llama-cpp-python builds it) runs a graph
on a team of threads that belongs to the thread that called it: each new calling thread
gets a team of its own, and the teams stay. Once the process holds more OpenMP threads than
the machine has CPUs, libgomp stops spinning between a graph's operations and sleeps
instead, and every decode pays the wake-ups. llama_cpp.server loads a model on the main
thread and answers each request (each streamed token) on whichever worker thread of its
pool is free, so the second thread that decodes slows every decode after it. Measured on the
2-core AMX Xeon (family 6, model 167), Qwen2.5-Coder 1.5B, 2 threads, a streamed chat
answer of 96 tokens: 12.4-13.2 tok/s where one thread loads and decodes; 9.2-9.7 once a
second thread has decoded (or loaded the model), the first one included; 9.3-9.6 with
``OMP_WAIT_POLICY=passive`` (libgomp's sleeping on purpose), 6.1 with ``active`` (the idle
team spins on a CPU the working one needs). llama.cpp's own server decodes on one thread.

pyspec serve therefore loads its models, calibrates them and runs every completion on one
long-lived thread of its own (``run``, ``pinned``): the request threads only wait for it.
llama_cpp.server already answers one request at a time, so nothing runs less in parallel.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

_lock = threading.Lock()
_executor = None
_thread_ident = None


def _compute_executor() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            # one worker, kept for the life of the process (an idle ThreadPoolExecutor
            # worker waits for work; it never exits and takes its OpenMP team with it)
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyspec-compute")
            _executor.submit(_remember_thread).result()
        return _executor


def _remember_thread() -> None:
    global _thread_ident
    _thread_ident = threading.get_ident()


def on_compute_thread() -> bool:
    return _thread_ident is not None and threading.get_ident() == _thread_ident


def run(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` on the compute thread (directly where already on it): its
    result, or its exception raised here."""
    if on_compute_thread():
        return fn(*args, **kwargs)
    try:
        future = _compute_executor().submit(fn, *args, **kwargs)
    except RuntimeError:  # the interpreter is exiting and the thread takes no more work:
        return fn(*args, **kwargs)  # (a stream closed at exit) done here, nothing to gain
    return future.result()


_DONE = object()


def pinned(iterator: Iterator) -> Iterator:
    """``iterator``'s items, each computed on the compute thread; closing this generator
    closes ``iterator`` there too (a client that goes away mid-answer)."""
    try:
        while True:
            item = run(next, iterator, _DONE)
            if item is _DONE:
                return
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            run(close)


ENTRY_POINTS = ("create_completion", "create_chat_completion", "create_embedding", "embed")


def pin_entry_points(llama, names=ENTRY_POINTS) -> None:
    """Makes ``llama``'s methods that decode run on the compute thread (streamed answers
    item by item). ``llama(...)``, the chat handlers and ``create_embedding`` call these
    through the instance, so they are covered too."""
    for name in names:
        method = getattr(llama, name)

        @functools.wraps(method)
        def on_thread(*args, _method=method, **kwargs):
            result = run(_method, *args, **kwargs)
            if isinstance(result, Iterator):
                return pinned(result)
            return result

        setattr(llama, name, on_thread)
