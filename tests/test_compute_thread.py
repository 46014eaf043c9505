"""pyspec serve's compute thread: every load and decode on one thread, so that llama.cpp's
OpenMP build keeps one team of threads (pyspec/llama/compute_thread.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from pyspec.llama import compute_thread


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
    partial.close()  # a client that went away mid-answer: its close is queued, not awaited
    compute_thread.run(lambda: None)  # (the queue keeps the order)
    assert closed_on == [True, True]


def test_a_job_done_keeps_nothing_it_was_given_alive():
    import gc
    import weakref

    class Model:
        pass

    model = Model()
    gone = weakref.ref(model)
    compute_thread.run(lambda m: None, model)
    del model
    gc.collect()
    assert gone() is None  # (a model the last job held would outlive its last user)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_a_compute_thread_of_its_own():
    compute_thread.run(lambda: None)  # the parent's thread exists
    pid = os.fork()
    if pid == 0:  # the child: its parent's thread is not there; a job must not wait for it
        code = 1
        try:
            done = threading.Event()
            threading.Thread(
                target=lambda: (compute_thread.run(lambda: None), done.set()), daemon=True
            ).start()
            code = 0 if done.wait(10) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_embeddings_from_a_second_thread_are_said_once_too(caplog):
    from pyspec.llama.compute_thread import DecodingThreads
    from pyspec.llama.model import SpeculativeMethods

    class Llama:  # (a stand-in for llama_cpp.Llama's embed: no model needed)
        def embed(self, text):
            return [float(len(text))]

    class Speculative(SpeculativeMethods, Llama):
        pass

    model = Speculative()
    # (as many threads as make two teams outnumber any machine's CPUs)
    model.decoding_threads = DecodingThreads(openmp=True, threads=10**6)
    assert model.embed("abc") == [3.0]  # the loading thread: nothing said
    for _ in range(2):
        t = threading.Thread(target=lambda: model.embed("x"))
        t.start()
        t.join()
    said = [r for r in caplog.records if "a thread other than the one" in r.getMessage()]
    assert len(said) == 1


def test_compute_thread_must_be_a_bool_and_is_checked_before_the_model_loads():
    from pyspec.errors import ArgumentTypeError
    from pyspec.llama import SpeculativeLlama

    with pytest.raises(ArgumentTypeError, match="compute_thread must be True or False"):
        SpeculativeLlama("no-such-file.gguf", compute_thread="yes")


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _settled_os_threads() -> int:
    """The thread count once it has stopped moving (the OpenMP team of a thread that just
    ended takes a moment to go), or after 5 s."""
    last, same = _os_threads(), 0
    for _ in range(50):
        threading.Event().wait(0.1)
        now = _os_threads()
        same = same + 1 if now == last else 0
        if same == 3:
            break
        last = now
    return last


def _threads_added(call, answers: list) -> int:
    """OS threads left by 3 threads that each append ``call()`` to ``answers`` and stay alive
    (a team lives as long as the thread that owns it), beyond the 3 themselves. The calls
    take turns, as llama_cpp.server serves a model and as streams of one model must."""
    release = threading.Event()
    one_at_a_time = threading.Lock()

    def caller():
        with one_at_a_time:
            answers.append(call())
        release.wait()

    before = _settled_os_threads()
    callers = [threading.Thread(target=caller) for _ in range(3)]
    for t in callers:
        t.start()
    while len(answers) < 3 and all(t.is_alive() for t in callers):
        threading.Event().wait(0.05)
    added = _os_threads() - before - len(callers)
    release.set()
    for t in callers:
        t.join()
    assert len(answers) == 3
    return added


def _scenario(name: str, gemma_path: str) -> dict:
    """The dict this module's function ``name`` returns, run in a Python process of its own
    (a test process must not keep the teams it starts)."""
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        f"from test_compute_thread import {name}; "
        f"print(json.dumps({name}(sys.argv[2])))"
    )
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        [sys.executable, "-c", script, here, gemma_path],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def served_model_teams(gemma_path: str) -> dict:
    """OS threads added by request threads that decode through the served model's methods
    (completions, and chats as llama_cpp.server streams them), and, as the control, through
    the same object without the routing. Run in a process of its own: the compute thread's team
    stays for the life of the process, and a test process's later decodes on its main
    thread would then run with two teams, slower."""
    import llama_cpp

    from pyspec.serve.app import SpeculativeLlamaProxy
    from pyspec.serve.settings import SpeculativeModelSettings

    settings = SpeculativeModelSettings(
        model=gemma_path, n_ctx=512, n_threads=2, verbose=False, calibrate=False
    )
    from pyspec.llama import compute_thread
    from pyspec.llama.model import routed_class_base

    llama = SpeculativeLlamaProxy.load_llama_from_model_settings(settings)
    own = routed_class_base(type(llama))  # the class whose methods the routing calls
    assert own is not type(llama)
    # where each decoding loop runs (every completion's tokens come from generate)
    generate, places = own.generate, []

    def watched_generate(self, *args, **kwargs):
        places.append(compute_thread.on_compute_thread())
        yield from generate(self, *args, **kwargs)

    own.generate = watched_generate
    # the compute thread's own team, where loading the model did not start one already
    llama.create_completion(prompt="x", max_tokens=1)

    def teams_added(complete) -> int:
        def request():
            out = complete(prompt="def add(a, b):", max_tokens=4, temperature=0.0, stream=True)
            return "".join(c["choices"][0]["text"] for c in out)

        return _threads_added(request, [])

    def chat_as_the_server_streams_it(prompt, **kw):
        # llama_cpp.server calls the class's create_chat_completion on the instance; its
        # handler calls the instance's (routed) create_completion. Chunks as completions'.
        messages = [{"role": "user", "content": prompt}]
        for chunk in llama_cpp.Llama.create_chat_completion(llama, messages=messages, **kw):
            yield {"choices": [{"text": chunk["choices"][0]["delta"].get("content") or ""}]}

    try:
        out = {
            "completion": teams_added(llama.create_completion),
            "chat": teams_added(chat_as_the_server_streams_it),
        }
        out["loops_on_the_compute_thread"] = sum(places)
        out["loops"] = len(places)
        routed = type(llama)
        llama.__class__ = own  # the control: the same object, without the routing
        try:
            out["control"] = teams_added(llama.create_completion)
        finally:
            llama.__class__ = routed
        return out
    finally:
        own.generate = generate
        llama.close()


@pytest.mark.model
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_a_served_model_decodes_on_one_team_of_threads_whoever_asks(gemma_path):
    """A thread that decodes with llama.cpp gets an OpenMP team of its own (a worker thread
    per thread beyond the first), as the control shows; through the served model's entry
    points, request threads add no team: only the compute thread decodes."""
    pytest.importorskip("fastapi", reason="pyspec serve needs the [server] packages")
    added = _scenario("served_model_teams", gemma_path)
    # (a thread of the process's own may come or go meanwhile: one either way is allowed;
    # a team per request thread adds three)
    assert added["completion"] <= 1 and added["chat"] <= 1, added
    # the warm-up, 3 completions and 3 chats: every decoding loop on the compute thread
    assert added["loops_on_the_compute_thread"] == added["loops"] == 7, added
    if added["control"] == 0:
        pytest.skip("this llama.cpp build gives a calling thread no OpenMP team")
    assert added["control"] >= 3, added  # one worker thread per request thread, unpinned


def switched_models(gemma_path: str) -> dict:
    """pyspec serve's model proxy with two models (the same file under two aliases, one
    drafting, one not), asked for one, the other, then the first again, as requests naming
    them switch it: where each close ran, and each model's greedy answer. Run in a process
    of its own."""
    from pyspec.llama import compute_thread
    from pyspec.llama.model import routed_class_base
    from pyspec.serve.app import SpeculativeLlamaProxy
    from pyspec.serve.settings import SpeculativeModelSettings

    def settings(alias, draft):
        return SpeculativeModelSettings(
            model=gemma_path, model_alias=alias, draft=draft, n_ctx=512, n_threads=2,
            verbose=False, calibrate=False,
        )  # fmt: skip

    proxy = SpeculativeLlamaProxy([settings("lookup", "lookup"), settings("plain", "none")])
    own = routed_class_base(type(proxy("lookup")))
    close, closes = own.close, []

    def watched_close(self):
        closes.append(compute_thread.on_compute_thread())
        close(self)

    def answer(alias):
        out = proxy(alias).create_completion(prompt="def add(a, b):", max_tokens=6, temperature=0)
        return out["choices"][0]["text"]

    own.close = watched_close
    try:
        answers = [answer("lookup"), answer("plain"), answer("lookup")]
        proxy.free()
    finally:
        own.close = close
    return {"answers": answers, "closes_on_the_compute_thread": closes}


@pytest.mark.model
def test_a_served_model_switch_closes_on_the_compute_thread_and_loads_the_next(gemma_path):
    """A request naming another model closes the current one (on the compute thread, where
    its context lives) and loads the next; each answers, and the first, loaded again,
    answers as before."""
    pytest.importorskip("fastapi", reason="pyspec serve needs the [server] packages")
    got = _scenario("switched_models", gemma_path)
    # (two switches and the proxy's free; a dropped model the garbage collector finds may
    # close once more, queued on the thread too)
    closes = got["closes_on_the_compute_thread"]
    assert len(closes) >= 3 and all(closes), got
    assert len(got["answers"]) == 3 and got["answers"][0] == got["answers"][2], got
    assert all(got["answers"]), got


def library_model_threads(gemma_path: str) -> dict:
    """An application's threads calling a ``SpeculativeLlama(..., compute_thread=True)``: OS
    threads they add (none: only the compute thread decodes), where each decoding loop ran,
    the answers against the same calls made on the calling thread (the control, which adds
    a team per thread), ClosedError after close; and the warning a model without the
    compute thread logs when a second thread decodes. Run in a process of its own."""
    import logging

    from pyspec.llama import ClosedError, SpeculativeLlama
    from pyspec.llama.model import SpeculativeLlamaOnComputeThread

    # (reproducible, no memory: a prompt's greedy text repeats whatever was asked before)
    setup = dict(n_ctx=512, n_threads=2, verbose=False, reproducible=True, memory=False)
    llm = SpeculativeLlama(gemma_path, compute_thread=True, **setup)
    spec_generate, places = llm.speculation.generate, []

    def watched_generate(*args, **kwargs):
        places.append(compute_thread.on_compute_thread())
        return spec_generate(*args, **kwargs)

    llm.speculation.generate = watched_generate
    llm.create_completion(prompt="x", max_tokens=1)  # (the compute thread's own team)

    def streamed(create):
        out = create(prompt="def add(a, b):", max_tokens=6, temperature=0.0, stream=True)
        return "".join(c["choices"][0]["text"] for c in out)

    def chat():
        messages = [{"role": "user", "content": "Say hi."}]
        out = llm.create_chat_completion(messages=messages, max_tokens=6, temperature=0.0)
        return out["choices"][0]["message"]["content"]

    pinned, chats, control = [], [], []
    out = {
        "completion": _threads_added(lambda: streamed(llm.create_completion), pinned),
        "chat": _threads_added(chat, chats),
    }
    out["loops_on_the_compute_thread"], out["loops"] = sum(places), len(places)
    # whole answers asked from several threads at once, no lock: queued on the thread
    at_once, started = [], threading.Barrier(3)

    def whole():
        started.wait()
        out = llm.create_completion(prompt="def add(a, b):", max_tokens=6, temperature=0.0)
        at_once.append(out["choices"][0]["text"])

    callers = [threading.Thread(target=whole) for _ in range(3)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    # a stream with logprobs (the request's options travel with it to the compute thread)
    chunks = list(
        llm.create_completion(
            prompt="def add(a, b):", max_tokens=6, temperature=0.0, stream=True, logprobs=2
        )
    )
    out["streamed_logprobs"] = all(
        c["choices"][0]["logprobs"]["top_logprobs"][0] for c in chunks if c["choices"][0]["text"]
    )
    llm.__class__ = SpeculativeLlama  # the control: the same object, without the thread
    out["control"] = _threads_added(lambda: streamed(llm.create_completion), control)
    llm.__class__ = SpeculativeLlamaOnComputeThread
    out["same_answers"] = len(set(pinned + control + at_once)) == 1 and len(set(chats)) == 1
    out["at_once"] = len(at_once)
    llm.close()
    try:
        llm.create_completion(prompt="x", max_tokens=1)
        out["closed_raises"] = False
    except ClosedError:
        out["closed_raises"] = True

    warnings = []

    class Keep(logging.Handler):
        def emit(self, record):
            if "a thread other than the one" in record.getMessage():
                warnings.append(record.getMessage())

    logging.getLogger("pyspec").addHandler(Keep())
    plain = SpeculativeLlama(gemma_path, **setup)
    plain.create_completion(prompt="x", max_tokens=1)  # on the thread that loaded it
    out["warnings_on_the_loading_thread"] = len(warnings)
    for _ in range(2):  # two other threads: one warning in all
        t = threading.Thread(target=lambda: plain.create_completion(prompt="x", max_tokens=1))
        t.start()
        t.join()
    out["warnings"] = warnings
    plain.close()
    return out


@pytest.mark.model
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_an_application_calling_from_several_threads_decodes_on_one_team(gemma_path):
    """``SpeculativeLlama(..., compute_thread=True)`` from three application threads: no team
    added, every loop on the compute thread, the same answers as calls made on the calling
    threads; ClosedError after close. Without it, a second decoding thread is said once."""
    got = _scenario("library_model_threads", gemma_path)
    assert got["completion"] <= 1 and got["chat"] <= 1, got
    # the warm-up, 3 streamed completions and 3 chats
    assert got["loops_on_the_compute_thread"] == got["loops"] == 7, got
    assert got["same_answers"] and got["closed_raises"], got
    assert got["warnings_on_the_loading_thread"] == 0, got
    from pyspec.llama.runtime.build_info import build_features
    from pyspec.llama.runtime.guard import system_info

    openmp = build_features(system_info()).get("OPENMP") == "1"
    # (said where two teams of the model's 2 threads outnumber the CPUs it may use)
    said = openmp and 2 * 2 > len(os.sched_getaffinity(0))
    assert len(got["warnings"]) == (1 if said else 0), got
    assert got["at_once"] == 3 and got["streamed_logprobs"], got
    if got["control"] == 0:
        pytest.skip("this llama.cpp build gives a calling thread no OpenMP team")
    assert got["control"] >= 3, got  # one worker thread per calling thread, unpinned
