"""The in-graph sampler against the host path (issue 11), on whatever runs the model.

Per verify round (k drafts, k + 1 rows), paired and alternating in one run: the host path
decodes, then libpyspec verifies llama.cpp's rows in place (``verify_from_pointer``); the
graph path decodes with pyspec's sampler in the graph (no logits rows copied out), then
reads one token per row. Reported: the whole round (decode to tokens in Python) and the part
after the decode call returns. Then whole generations with prompt lookup, host against
graph, tokens/s after the first token. Nothing is asserted about speed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time

import pytest
from bench_generation import REPEAT_PROMPT

from pyspec.llama import SpeculativeLlama
from pyspec.params import SamplingParams
from pyspec.testing.graph_rounds import paired_rounds
from pyspec.testing.models import ensure_model

MODELS = {"gemma": "gemma3-270m", "qwen": "qwen2.5-coder-1.5b"}
PARAMS = {"greedy": SamplingParams.greedy_params(seed=1), "default": SamplingParams(seed=1)}
KW = dict(n_ctx=1024, n_threads=2, verbose=False, seed=1, draft_max=16)
PAIRS = 12


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    llm = SpeculativeLlama(str(ensure_model(MODELS[request.param])), **KW)
    yield request.param, llm
    llm.close()


@pytest.mark.parametrize("k", [1, 4, 8, 16])
@pytest.mark.parametrize("kind", sorted(PARAMS))
def bench_graph_round(benchmark, model, kind, k, generation_rows):
    name, llm = model
    params = PARAMS[kind]
    prompt = llm.tokenize(REPEAT_PROMPT.encode())
    dec = llm.speculation.decoder
    dec.remove_from(0)
    n_past = len(prompt) - (k + 1)
    dec.decode(prompt[:n_past], 0, 1)
    batch = prompt[n_past:]
    rounds = {}
    benchmark.pedantic(
        lambda: rounds.update(paired_rounds(llm, batch, n_past, params, PAIRS)),
        rounds=1,
        iterations=1,
    )
    benchmark.extra_info.update(model=name, params=kind, k=k, **rounds)
    generation_rows.append(
        f"graph round {name:5s} {kind:7s} k={k:2d}  host {rounds['host_round_ms']:7.2f} ms "
        f"(after decode {rounds['host_after_decode_ms']:5.2f})  "
        f"graph {rounds['graph_round_ms']:7.2f} ms "
        f"(after decode {rounds['graph_after_decode_ms']:5.2f})  "
        f"graph/host x{rounds['round_ratio']:5.3f}"
    )
    llm.n_tokens = 0


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("kind", sorted(PARAMS))
def bench_graph_generation(benchmark, kind, name, generation_rows):
    path = str(ensure_model(MODELS[name]))
    llms = {s: SpeculativeLlama(path, sampling=s, **KW) for s in ("host", "graph")}
    runs = {s: [] for s in llms}
    temperature = 0.0 if kind == "greedy" else 0.8

    def one_round():
        for side, llm in llms.items():
            start, n = None, 0
            for _ in llm.create_completion(
                REPEAT_PROMPT, max_tokens=128, stream=True, temperature=temperature, seed=3
            ):
                start = start or time.perf_counter()
                n += 1
            runs[side].append((n - 1) / (time.perf_counter() - start))

    one_round()  # warm-up: each side's cost model learns its own costs
    for side_runs in runs.values():
        side_runs.clear()
    benchmark.pedantic(one_round, rounds=3, iterations=1)
    rate = {s: statistics.median(r) for s, r in runs.items()}
    assert llms["graph"].speculation.last.sampling == "graph"
    benchmark.extra_info.update(
        model=name,
        params=kind,
        host_tok_s=rate["host"],
        graph_tok_s=rate["graph"],
        ratio=rate["graph"] / rate["host"],
    )
    generation_rows.append(
        f"graph generation {name:5s} {kind:7s} host {rate['host']:6.2f} tok/s  "
        f"graph {rate['graph']:6.2f} tok/s  x{rate['graph'] / rate['host']:5.3f}"
    )
    for llm in llms.values():
        llm.close()


def _llama_bench_tok_s(binary: str, model_path: str) -> float:
    """llama.cpp's own llama-bench: 128 generated tokens, one per decode, 2 threads, flash
    attention off (llama-cpp-python's default; llama-bench's own is "auto")."""
    out = subprocess.run(
        [
            binary,
            "-m",
            model_path,
            "-t",
            "2",
            "-p",
            "0",
            "-n",
            "128",
            "-r",
            "1",
            "-fa",
            "0",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(json.loads(out)[0]["avg_ts"])


# llama-bench sizes its context to the test (128 tokens here); the loop's context is the
# smallest that holds the prompt and 128 tokens. A larger one costs llama.cpp itself a few
# percent per token on Gemma 270M (its sliding-window cache is as large as the context).
PLAIN_KW = dict(KW, draft_max=0, n_ctx=256)
PLAIN_ROUNDS = 6


@pytest.mark.parametrize("name", sorted(MODELS))
def bench_graph_plain_path(benchmark, name, generation_rows):
    """The loop without drafts (draft_max=0: one token per decode, sampled on the host or in
    the graph) against llama.cpp's llama-bench built from the same sources with the same
    flags (PYSPEC_LLAMA_BENCH=/path/to/llama-bench), alternating, greedy, 128 tokens, the
    same context size and attention."""
    binary = os.environ.get("PYSPEC_LLAMA_BENCH")
    if not binary or not os.path.isfile(binary):
        pytest.skip("set PYSPEC_LLAMA_BENCH to a llama-bench built like llama-cpp-python")
    path = str(ensure_model(MODELS[name]))
    llms = {s: SpeculativeLlama(path, sampling=s, **PLAIN_KW) for s in ("host", "graph")}
    rates = {"host": [], "graph": [], "llama-bench": []}

    def one_round():
        for side, llm in llms.items():
            start, n = None, 0
            for _ in llm.create_completion(
                "Once upon a time", max_tokens=129, stream=True, temperature=0.0
            ):
                start = start or time.perf_counter()
                n += 1
            rates[side].append((n - 1) / (time.perf_counter() - start))
        rates["llama-bench"].append(_llama_bench_tok_s(binary, path))

    benchmark.pedantic(one_round, rounds=PLAIN_ROUNDS, iterations=1)
    med = {s: statistics.median(r) for s, r in rates.items()}
    # Each round's own ratio, then their median: a round slowed by a neighbour slows all
    # three sides of it, and the ratio keeps what the round can say.
    pair = {
        s: statistics.median(a / b for a, b in zip(rates[s], rates["llama-bench"]))
        for s in ("host", "graph")
    }
    benchmark.extra_info.update(
        model=name,
        rounds=PLAIN_ROUNDS,
        n_ctx=PLAIN_KW["n_ctx"],
        host_pair_ratio=pair["host"],
        graph_pair_ratio=pair["graph"],
        **{f"{s.replace('-', '_')}_tok_s": r for s, r in med.items()},
    )
    generation_rows.append(
        f"plain path {name:5s} llama-bench {med['llama-bench']:6.2f} tok/s  "
        f"host {med['host']:6.2f} "
        f"(x{pair['host']:5.3f})  graph {med['graph']:6.2f} (x{pair['graph']:5.3f})"
    )
    for llm in llms.values():
        llm.close()
