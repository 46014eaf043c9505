"""pyspec's best configuration (prompt lookup with the 0.5B draft model behind it) against
llama.cpp's own C++ loop with the same draft model (``--spec-type draft-simple``), on real
chats (ShareGPT) and the code-editing workload.

Qwen2.5-Coder 1.5B target, Qwen2.5-Coder 0.5B draft, greedy, flash attention on everywhere,
the same prompt text for every mode (bench_draftless.py's rendering and timing). Per request:
plain llama-cpp-python, ``SpeculativeLlama(draft=["lookup", draft])``, and
``llama-speculative-simple --spec-type draft-simple -md draft`` at its defaults, in turn and
in the opposite order for every other request. The Python objects live through the run.

    pyspec bench draft-peer     # or: pytest benchmarks/bench_draft_peer.py (PYSPEC_BENCH_CHATS=8)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from _sharegpt import chats_asked
from bench_draftless import MAX_TOKENS, THREADS, _geo, run_requests, summarise

N_CHATS = chats_asked(8)
MODES = ("plain", "lookup + draft model", "c++ draft-simple")


def bench_draft_model_peer(benchmark, monkeypatch):
    import llama_cpp
    from _code_edits import requests as code_requests
    from _llama_cpp_tools import ensure_tools
    from _sharegpt import chat_requests

    from pyspec.llama import SpeculativeLlama
    from pyspec.testing.models import ensure_model

    monkeypatch.setenv("PYSPEC_COST_CACHE", "off")  # every run starts as a fresh machine
    tools = ensure_tools()
    target = str(ensure_model("qwen2.5-coder-1.5b"))
    draft = str(ensure_model("qwen2.5-coder-0.5b"))
    common = dict(n_ctx=4096, n_threads=THREADS, verbose=False, flash_attn=True)
    plain = llama_cpp.Llama(model_path=target, **common)
    python_modes = {
        "plain": plain,
        "lookup + draft model": SpeculativeLlama(target, draft=["lookup", draft], **common),
    }
    # The same setup asked for as many tokens as the C++ tool decoded (bench_draftless's
    # run_requests). Batch costs at every draft length, as pyspec generate/serve measure
    # them once per model and setup (not timed here).
    same_tokens = {
        "lookup + draft model": SpeculativeLlama(target, draft=["lookup", draft], **common)
    }
    for llm in (python_modes["lookup + draft model"], same_tokens["lookup + draft model"]):
        llm.calibrate(progress=print)
    workloads = [("chat", r["id"], r["messages"]) for r in chat_requests(plain, N_CHATS)]
    workloads += [("code edits", rid, messages) for rid, messages in code_requests()]
    workdir = Path(tempfile.mkdtemp(prefix="pyspec-draft-peer-"))

    def run_all():
        modes = list(MODES)
        return run_requests(
            workloads,
            modes,
            plain,
            python_modes,
            tools,
            target,
            workdir,
            ("-md", draft),
            same_tokens=same_tokens,
        )

    rows = benchmark.pedantic(run_all, rounds=1, iterations=1)
    summary = summarise(rows, MODES)
    for workload, s in summary.items():
        mine = [r for r in rows if r["workload"] == workload]
        s["pyspec_over_cpp"] = _geo(
            [r["lookup + draft model"]["rate"] / r["c++ draft-simple"]["rate"] for r in mine]
        )
        s["pyspec_over_cpp_same_tokens"] = _geo(
            [
                r["lookup + draft model"]["rate_at_cpp"]["c++ draft-simple"]
                / r["c++ draft-simple"]["rate"]
                for r in mine
                if "c++ draft-simple" in r["lookup + draft model"]["rate_at_cpp"]
            ]
        )
        s["costly_steps"] = sum(r["lookup + draft model"]["costly_steps"] for r in mine)
    python_modes["lookup + draft model"].close()
    same_tokens["lookup + draft model"].close()
    plain.close()
    benchmark.extra_info.update(
        max_tokens=MAX_TOKENS, threads=THREADS, modes=list(MODES), rows=rows, summary=summary
    )
    for workload, s in summary.items():
        print(
            f"\n{workload}: "
            + ", ".join(f"{m} {s['rate'][m]:.2f}" for m in MODES)
            + f"; pyspec / c++ per request {s['pyspec_over_cpp']:.2f}x",
            flush=True,
        )
