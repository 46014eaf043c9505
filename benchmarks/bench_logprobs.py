"""Completion logprobs: llama-cpp-python's own answer against pyspec's (issue 11: "where
asked, the emitted tokens' log-probabilities"), on real models.

llama-cpp-python answers ``create_completion(logprobs=n)`` only with ``logits_all=True`` and
then sorts every emitted token's whole row in Python; pyspec records each emitted token's
raw logprob and top n while it decodes (``pyspec.row_logprobs`` on the host rows, or in
llama.cpp's graph) and lays them out in the same format. Per model, alternating in one run:
plain llama-cpp-python (logits_all) with logprobs, pyspec with logprobs on the host and in
the graph, and pyspec without logprobs (what the logprobs cost it). Greedy, one token per
decode (draft_max=0, so every side decodes the same batches), 16 tokens. Nothing asserted
about speed; the answers are checked to be the same text.
"""

from __future__ import annotations

import statistics
import time

import llama_cpp
import pytest

from pyspec.llama import SpeculativeLlama
from pyspec.testing.models import ensure_model

MODELS = {"gemma": "gemma3-270m", "qwen": "qwen2.5-coder-1.5b"}
KW = dict(n_ctx=512, n_threads=2, verbose=False, seed=1)
PROMPT = "Write a Python function that adds two numbers:"
REQUEST = dict(max_tokens=16, temperature=0.0)
N_TOP = 5
ROUNDS = 3


@pytest.mark.parametrize("name", sorted(MODELS))
def bench_completion_logprobs(benchmark, name):
    path = str(ensure_model(MODELS[name]))
    sides = {
        "llama-cpp-python": (llama_cpp.Llama(path, logits_all=True, **KW), N_TOP),
        "pyspec host": (SpeculativeLlama(path, draft_max=0, sampling="host", **KW), N_TOP),
        "pyspec graph": (SpeculativeLlama(path, draft_max=0, sampling="graph", **KW), N_TOP),
        "pyspec, no logprobs": (SpeculativeLlama(path, draft_max=0, sampling="host", **KW), None),
    }
    seconds = {side: [] for side in sides}
    texts = {}

    def one_round():
        for side, (llm, n_top) in sides.items():
            t0 = time.perf_counter()
            out = llm.create_completion(PROMPT, logprobs=n_top, **REQUEST)
            seconds[side].append(time.perf_counter() - t0)
            texts[side] = out["choices"][0]["text"]

    one_round()  # warm-up: page faults, the in-graph sampler's build
    for s in seconds.values():
        s.clear()
    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    assert len(set(texts.values())) == 1, texts  # greedy: the same answer everywhere
    med = {side: statistics.median(s) for side, s in seconds.items()}
    benchmark.extra_info.update(
        model=name,
        n_top=N_TOP,
        max_tokens=REQUEST["max_tokens"],
        rounds=ROUNDS,
        **{f"{side}_s": v for side, v in med.items()},
    )
    for llm, _ in sides.values():
        llm.close()
