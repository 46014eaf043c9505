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

import os
import tempfile
from pathlib import Path

from bench_draftless import MAX_TOKENS, THREADS, _geo, render_chat, run_python

N_CHATS = int(os.environ.get("PYSPEC_BENCH_CHATS", "8"))
MODES = ("plain", "lookup + draft model", "c++ draft-simple")


def bench_draft_model_peer(benchmark, monkeypatch):
    import llama_cpp
    from _code_edits import requests as code_requests
    from _llama_cpp_tools import ensure_tools, run_speculative
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
    workloads = [("chat", r["id"], r["messages"]) for r in chat_requests(plain, N_CHATS)]
    workloads += [("code edits", rid, messages) for rid, messages in code_requests()]
    rows = []
    workdir = Path(tempfile.mkdtemp(prefix="pyspec-draft-peer-"))

    def run_all():
        for i, (workload, rid, messages) in enumerate(workloads):
            text = render_chat(plain, messages)
            ids = plain.tokenize(text.encode(), add_bos=True, special=True)
            row = {"workload": workload, "id": rid, "prompt_tokens": len(ids)}
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                if mode.startswith("c++ "):
                    got = run_speculative(
                        tools,
                        target,
                        text,
                        mode[4:],
                        n_predict=MAX_TOKENS,
                        threads=THREADS,
                        workdir=workdir,
                        extra=("-md", draft),
                    )
                    assert got["prompt_tokens"] == len(ids), (rid, got["prompt_tokens"], len(ids))
                    got.pop("text")
                else:
                    got = run_python(python_modes[mode], ids)
                    spec = getattr(python_modes[mode], "speculation", None)
                    if spec is not None:  # rounds whose drafts came from the draft model
                        got["costly_steps"] = spec.last.costly_steps
                row[mode] = got
            rows.append(row)
            print(
                f"\n{workload} {rid} ({len(ids)} tokens): "
                + ", ".join(f"{m} {row[m]['rate']:.1f}" for m in MODES),
                flush=True,
            )
        return rows

    benchmark.pedantic(run_all, rounds=1, iterations=1)
    summary = {}
    for workload in dict.fromkeys(w for w, _, _ in workloads):
        mine = [r for r in rows if r["workload"] == workload]
        summary[workload] = {
            "requests": len(mine),
            "rate": {m: _geo([r[m]["rate"] for r in mine]) for m in MODES},
            "seconds": {m: sum(r[m]["seconds"] for r in mine) for m in MODES},
            "acceptance": {
                m: sum(r[m].get("accepted", 0) for r in mine)
                / max(sum(r[m].get("drafted", 0) for r in mine), 1)
                for m in MODES
            },
            "pyspec_over_cpp": _geo(
                [r["lookup + draft model"]["rate"] / r["c++ draft-simple"]["rate"] for r in mine]
            ),
            "costly_steps": sum(r["lookup + draft model"].get("costly_steps", 0) for r in mine),
        }
    python_modes["lookup + draft model"].close()
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
