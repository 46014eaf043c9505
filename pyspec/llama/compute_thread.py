"""One thread for every llama.cpp computation of the process.

llama.cpp's CPU back end (built with OpenMP, as llama-cpp-python builds it) runs a graph
on a team of threads that belongs to the thread that called it: each new calling thread
gets a team of its own, and the teams stay. Once the process holds more OpenMP threads than
the machine has CPUs, libgomp stops spinning between a graph's operations and sleeps
instead, and every decode pays the wake-ups. llama_cpp.server loads a model on the main
thread and answers each request (each streamed token) on whichever worker thread of its
pool is free, so the second thread that decodes slows every decode after it; so does an
application that calls a model from its own worker threads (a web framework's pool, say).
Measured on the 2-core AMX Xeon (family 6, model 167), Qwen2.5-Coder 1.5B, 2 threads, a
streamed chat answer of 96 tokens: 12.4-13.2 tok/s where one thread loads and decodes;
9.2-9.7 once a second thread has decoded (or loaded the model), the first one included;
9.3-9.6 with ``OMP_WAIT_POLICY=passive`` (libgomp's sleeping on purpose), 6.1 with
``active`` (the idle team spins on a CPU the working one needs). llama.cpp's own server
decodes on one thread.

pyspec serve therefore loads its models, calibrates them and runs every completion on one
thread of its own, alive as long as the process (``run``, ``pinned``): the request threads
only wait for it. llama_cpp.server already answers one request at a time, so nothing runs
less in parallel. ``SpeculativeLlama(..., compute_thread=True)`` does the same for an
application; without it, ``DecodingThreads`` has the log say when a second thread decodes.
Both put a model's methods on the thread with ``move_to_compute_thread``
(``pyspec/llama/model.py``).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future

_log = logging.getLogger("pyspec")
_lock = threading.Lock()
_jobs: "queue.SimpleQueue | None" = None
_thread_ident = None


def _work(jobs: queue.SimpleQueue, ready: threading.Event) -> None:
    global _thread_ident
    _thread_ident = threading.get_ident()
    ready.set()
    while True:
        fn, args, kwargs, future = jobs.get()
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # (KeyboardInterrupt arrives on the main thread)
                future.set_exception(exc)
        # (not kept until the next job: a model the job held would outlive its last user)
        del fn, args, kwargs, future


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads: it starts a compute thread of its
    own on its first job, instead of queueing jobs for one that does not exist."""
    global _jobs, _thread_ident, _lock
    _jobs, _thread_ident, _lock = None, None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _submit(fn, *args, **kwargs) -> Future:
    global _jobs
    with _lock:
        if _jobs is None:
            _jobs = queue.SimpleQueue()
            # A daemon: a load or calibration under way does not hold the process at exit
            # (Ctrl-C during start-up stops it at once). It lives as long as the process,
            # and its OpenMP team with it.
            ready = threading.Event()
            threading.Thread(
                target=_work, args=(_jobs, ready), name="pyspec-compute", daemon=True
            ).start()
            ready.wait()
    future: Future = Future()
    _jobs.put((fn, args, kwargs, future))
    return future


class DecodingThreads:
    """The threads that have loaded or decoded with one model: ``note`` returns a warning, once,
    when a second one decodes in a build whose CPU back end uses OpenMP (llama.cpp's default),
    since from then on the process holds a team of threads per such thread."""

    def __init__(self, openmp: bool, threads: int = 1):
        # (two teams of ``threads`` that fit in the CPUs this process may use slow nothing)
        self.matters = openmp and 2 * threads > _usable_cpus()
        self.first = threading.get_ident()
        self.warned = False

    def note(self) -> str | None:
        me = threading.get_ident()
        if self.warned or not self.matters or me == self.first:
            return None
        self.warned = True
        return (
            "pyspec: this model decodes on a thread other than the one that loaded it: "
            "llama.cpp's OpenMP build gives every thread that computes a team of its own, and "
            "once the process holds more of them than the machine has CPUs every decode "
            "slows (by a quarter to a third, measured on 2 cores). Decode from one thread, or "
            "create the model with SpeculativeLlama(..., compute_thread=True), which loads it and "
            "runs every decode on one thread of pyspec's (said once per model)"
        )


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not Linux)
        return os.cpu_count() or 1


def on_compute_thread() -> bool:
    return _thread_ident is not None and threading.get_ident() == _thread_ident


def run(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` on the compute thread (directly where already on it): its
    result, or its exception raised here."""
    if on_compute_thread():
        return fn(*args, **kwargs)
    return _submit(fn, *args, **kwargs).result()


_DONE = object()


def later(fn) -> None:
    """Queues ``fn`` on the compute thread without waiting for it (errors are logged). The
    queue keeps the order: what is queued after it runs after it."""

    def said(future: Future) -> None:
        if future.exception() is not None:
            _log.warning("%s on the compute thread failed: %r", fn, future.exception())

    _submit(fn).add_done_callback(said)


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
            if on_compute_thread():
                close()
            else:  # an answer abandoned by its client is often let go on the server's
                # event-loop thread, which must not wait for a completion under way (the
                # model closes an open stream itself before its next one)
                later(close)
