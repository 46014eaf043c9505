"""The 0.5B draft model and prompt lookup against plain llama-cpp-python, on the demo's request
and real ShareGPT chats (benchmarks/_sharegpt.py), Qwen2.5-Coder 1.5B, greedy, 96 tokens.

What it checks (reported, not asserted): that a request with a costly drafter is never
slower than plain decoding by more than the loss budget allows
(pyspec/llama/drafting/loss_budget.py: 0.97x), and what lookup and the draft model gain
where they gain. Each request runs plain, draft model and lookup in turn, then again in the
opposite order (A B C C B A, twice), so
drifting load hits all three; rates are decode tokens per second after the first token (the prompt
left out, as ``pyspec demo --compare`` counts), and the whole-request time is reported too.
The speculative objects live through the whole run (as in a server): the budget carries
from request to request; the cost cache is off, so the run starts as a fresh machine does.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

N_CHATS = 4
MAX_TOKENS = 96
CYCLES = 2  # A B C C B A, twice: four runs of each mode per request


def _timed(llm, messages=None, prompt=None):
    stamps = []
    inner = llm.generate
    # pyspec's speculative generate is an attribute of the object: it must come back after.
    own = llm.__dict__.get("generate")
    spec = getattr(llm, "speculation", None)
    last = spec.last if spec is not None else None

    def generate(tokens, **kwargs):
        for tok in inner(tokens, **kwargs):
            stamps.append(time.perf_counter())
            yield tok

    llm.generate = generate
    try:
        t0 = time.perf_counter()
        if messages is not None:
            out = llm.create_chat_completion(
                messages=messages, max_tokens=MAX_TOKENS, temperature=0.0
            )
            text = out["choices"][0]["message"]["content"]
        else:
            out = llm.create_completion(prompt, max_tokens=MAX_TOKENS, temperature=0.0)
            text = out["choices"][0]["text"]
        total = time.perf_counter() - t0
    finally:
        if own is None:
            del llm.generate
        else:
            llm.generate = own
    if spec is not None:  # the request went through pyspec's loop, not llama-cpp-python's
        assert spec.last is not last, "the speculative object decoded without pyspec's loop"
    rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0
    return {"rate": rate, "seconds": total, "tokens": len(stamps), "text": text}


def bench_costly_drafter_never_loses(benchmark, monkeypatch):
    import llama_cpp
    from _sharegpt import chat_requests

    from pyspec.llama import SpeculativeLlama
    from pyspec.testing.models import ensure_model
    from pyspec.tools.cli import DEMO_PROMPT

    monkeypatch.setenv("PYSPEC_COST_CACHE", "off")
    target = str(ensure_model("qwen2.5-coder-1.5b"))
    draft = str(ensure_model("qwen2.5-coder-0.5b"))
    common = dict(n_ctx=2048, n_threads=2, verbose=False)
    modes = {
        "plain": llama_cpp.Llama(model_path=target, **common),
        "draft model": SpeculativeLlama(target, draft=draft, **common),
        "lookup": SpeculativeLlama(target, draft="lookup", **common),
    }
    requests = [("demo", None, DEMO_PROMPT)]
    requests += [
        (f"sharegpt {r['id']} ({r['tokens']} tokens)", r["messages"], None)
        for r in chat_requests(modes["plain"], N_CHATS)
    ]
    results = {name: {mode: [] for mode in modes} for name, _, _ in requests}

    def run():
        for name, messages, prompt in requests:
            order = list(modes)
            for mode in (order + order[::-1]) * CYCLES:
                results[name][mode].append(_timed(modes[mode], messages, prompt))

    benchmark.pedantic(run, rounds=1, iterations=1)
    lines = [
        f"decode tok/s after the first token (median of {2 * CYCLES}, paired A B C C B A), "
        f"{MAX_TOKENS} greedy tokens, {os.cpu_count()} cores"
    ]
    ratios = {mode: [] for mode in modes if mode != "plain"}
    table = {}
    for name, _, _ in requests:
        rate = {m: float(np.median([r["rate"] for r in runs])) for m, runs in results[name].items()}
        secs = {
            m: float(np.median([r["seconds"] for r in runs])) for m, runs in results[name].items()
        }
        row = {m: rate[m] / rate["plain"] for m in ratios}
        for m in ratios:
            ratios[m].append(row[m])
        table[name] = {"rate": rate, "seconds": secs, "over_plain": row}
        lines.append(
            f"  {name:<40} plain {rate['plain']:5.2f}  "
            + "  ".join(
                f"{m} {rate[m]:5.2f} ({row[m]:.2f}x, request {secs[m] / secs['plain']:.2f}x time)"
                for m in ratios
            )
        )
    for m, values in ratios.items():
        geo = math.exp(float(np.mean(np.log(values))))
        lines.append(f"  {m}: geometric mean {geo:.2f}x plain, worst {min(values):.2f}x")
    budget = modes["draft model"].speculation.controller.budget
    lines.append(f"  draft model's {budget.describe()}")
    benchmark.extra_info.update({"requests": table, "max_tokens": MAX_TOKENS, "runs": 2 * CYCLES})
    print("\n" + "\n".join(lines))
    for llm in modes.values():
        llm.close()
