"""A plain stretch (nothing drafted, nothing accepted) of pyspec's loop against llama.cpp's
own decode of the same build: issue 26's item 7, the loop's own cost per round.

Qwen2.5-Coder 1.5B, 2 threads, flash attention on everywhere, 96 greedy tokens after a
ShareGPT chat's prompt. Per round, in turn and in the opposite order every other round:
``SpeculativeLlama(draft_max=0)`` (every round a plain one: one decode, the fused verifier's
draw), plain llama-cpp-python, a bare greedy loop of ``llama_decode`` calls on a
llama-cpp-python context (``_raw_decode.py``: the decode path with no Python loop around it),
and ``llama-bench`` tg of 96 tokens at a depth of the prompt's length (its ``-d``: the same
context to attend to). Decode tokens/s after the first token; the ratios are taken within a
round (paired) and their geometric mean reported, since single runs vary by 10-20% on a
shared 2-core machine. pyspec's rounds also record what the loop spends outside the target's
decode and the verifier (``loop_ms_per_round``).

    pyspec bench plain-stretch  # or: pytest benchmarks/bench_plain_stretch.py
"""

from __future__ import annotations

import statistics

from bench_draftless import MAX_TOKENS, THREADS, render_chat, run_python

ROUNDS = 10
MODES = ("pyspec, no drafts", "llama-cpp-python", "raw llama_decode", "llama-bench tg")
PROBES = ("loop_ms_per_round", "target_ms_per_round", "verify_ms_per_round")


def bench_plain_stretch(benchmark, monkeypatch):
    import llama_cpp
    from _llama_cpp_tools import bench_tg, ensure_tools
    from _raw_decode import raw_greedy_rate
    from _sharegpt import chat_requests

    from pyspec.llama import SpeculativeLlama
    from pyspec.testing.models import ensure_model

    monkeypatch.setenv("PYSPEC_COST_CACHE", "off")
    tools = ensure_tools()
    target = str(ensure_model("qwen2.5-coder-1.5b"))
    common = dict(n_ctx=4096, n_threads=THREADS, verbose=False, flash_attn=True)
    plain = llama_cpp.Llama(model_path=target, **common)
    spec = SpeculativeLlama(target, draft_max=0, **common)
    messages = chat_requests(plain, 1)[0]["messages"]
    ids = plain.tokenize(render_chat(plain, messages).encode(), add_bos=True, special=True)
    runs = {m: [] for m in MODES}
    loop_costs = {p: [] for p in PROBES}

    def run_all():
        for r in range(ROUNDS):
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                if mode == "llama-bench tg":
                    rate = bench_tg(
                        tools,
                        target,
                        n_gen=MAX_TOKENS,
                        threads=THREADS,
                        repetitions=1,
                        depth=len(ids),
                    )
                elif mode == "raw llama_decode":
                    rate = raw_greedy_rate(plain, ids, MAX_TOKENS)
                elif mode == "llama-cpp-python":
                    rate = run_python(plain, ids)["rate"]
                else:
                    result = run_python(spec, ids)
                    rate = result["rate"]
                    for probe in PROBES:
                        loop_costs[probe].append(result[probe])
                runs[mode].append(rate)
            print(f"\nround {r}: " + ", ".join(f"{m} {runs[m][-1]:.2f}" for m in MODES), flush=True)
        return runs

    benchmark.pedantic(run_all, rounds=1, iterations=1)
    assert spec.speculation.last.drafted == 0  # a plain stretch: nothing drafted
    spec.close()
    plain.close()
    median = {m: statistics.median(v) for m, v in runs.items()}
    # The paired ratios (and their range) are derived from `runs` where they are shown
    # (_readme_sections.plain_stretch), once.
    benchmark.extra_info.update(
        max_tokens=MAX_TOKENS,
        threads=THREADS,
        prompt_tokens=len(ids),
        rounds=ROUNDS,
        runs=runs,
        median=median,
        loop_costs=loop_costs,
        loop_cost_median={p: statistics.median(v) for p, v in loop_costs.items()},
    )
    print(f"\nmedians: {median}", flush=True)
