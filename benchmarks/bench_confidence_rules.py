"""The rules that read the target's confidence (docs/drafting.md), replayed on the real
workloads: none, the unsure rule alone, the unsure rule with the sure-copy rule (the default
beside a free drafter until session 33), both with the remembered-copy rule (the default in
sessions 33-36), and the three with the reproduction rule (on by default since session 37).

Per request of bench_draftless's workloads (ShareGPT chats and the 5 code edits, Qwen2.5-
Coder 1.5B, 96 greedy tokens, decoded once and cached), the top probability of every row
that decided an output token is recorded from one pass over prompt and output (cached too),
and the loop is replayed (``pyspec.testing.replay.replay_lookup(confidence=...)``: the real
PromptLookup with its memory, the real controller) in three orders of the requests, one
controller through each: bench_draftless's (the chats, then the edits), the edits first, and
an edit after every fourth chat. Speedups over plain in cost units on each batch curve the
repository holds (bench_slow_start.curves), so nothing here depends on this run's timing.
The same is replayed on outputs sampled at 0.8 (one seed; llama-cpp-python's default
top-k, top-p and min-p), where a copy can be left while the target's rows stay sure.

    pyspec bench confidence-rules   # or: pytest benchmarks/bench_confidence_rules.py -s
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
from _recordings import recorded_workloads
from _sharegpt import chats_asked
from bench_draftless import THREADS
from bench_slow_start import curves, every_size, replay_row

N_CHATS = chats_asked(24)
SAMPLED_TEMPERATURE = 0.8
SAMPLED_SEEDS = (1,)
RULES = {  # name -> (unsure_below, sure_above, remembered_floor, reproduced_floor)
    "off": (None, None, None, None),
    "unsure": ("default", None, None, None),
    "unsure + sure copy": ("default", "default", None, None),
    "unsure + sure copy + remembered": ("default", "default", "default", None),
    "unsure + sure copy + remembered + reproduced": ("default",) * 4,
}


def recorded_confidences(prompts: list, outputs: list) -> list:
    """Per request, the largest probability of the raw row that decided each output token
    (what the verifier's top_probs return; for a greedy output, the probability of the token
    itself, not so for a sampled one), from one pass over prompt and output with every row
    kept; cached by the tokens, so a fresh machine computes them once."""
    import llama_cpp

    from pyspec.cache import cache_dir
    from pyspec.testing.models import ensure_model

    directory = cache_dir() / "confidence"
    directory.mkdir(parents=True, exist_ok=True)
    llm, found = None, []
    for prompt, output in zip(prompts, outputs):
        key = hashlib.sha256(json.dumps([list(prompt), list(output)]).encode()).hexdigest()[:16]
        path = directory / f"{key}.json"
        if path.is_file():
            found.append(json.loads(path.read_text()))
            continue
        if llm is None:
            llm = llama_cpp.Llama(
                model_path=str(ensure_model("qwen2.5-coder-1.5b")),
                n_ctx=4096,
                n_batch=1024,
                n_threads=THREADS,
                logits_all=True,
                flash_attn=True,
                verbose=False,
            )
        llm.reset()
        tokens = list(prompt) + list(output[:-1])
        llm.eval(tokens)
        rows = np.asarray(llm.scores[len(prompt) - 1 : len(tokens)], dtype=np.float64)
        top = 1.0 / np.exp(rows - rows.max(axis=1, keepdims=True)).sum(axis=1)
        found.append([float(p) for p in top])
        path.write_text(json.dumps(found[-1]))
        print(f"recorded the confidence of {len(output)} tokens", flush=True)
    if llm is not None:
        llm.close()
    return found


def orders(requests: list) -> dict:
    chats = [r for r in requests if r[0] == "chat"]
    edits = [r for r in requests if r[0] != "chat"]
    every_fourth = [
        x
        for i, chat in enumerate(chats)
        for x in [chat] + ([edits[(i // 4) % len(edits)]] if edits and i % 4 == 3 else [])
    ]
    return {"bench": chats + edits, "edits first": edits + chats, "interleaved": every_fourth}


def replay_in_order(order: list, costs: dict, rule: str, **row) -> dict:
    """Each workload's speedups over plain for one order of (workload, prompt, output,
    confidence), one controller and one lookup through it, with ``rule``'s settings
    (``row``: replay_row's max_tokens and token_text)."""
    import dataclasses

    from pyspec.llama.drafting import adaptive

    controller = adaptive.DraftLengthController(
        0, adaptive.DEFAULT_DRAFT_MAX, watch=dataclasses.replace(adaptive.FREE_DRAFTER)
    )
    unsure, sure, remembered, reproduced = RULES[rule]
    controller.unsure_below = adaptive.UNSURE_BELOW if unsure else None
    controller.sure_above = adaptive.SURE_ABOVE if sure else None
    controller.remembered_floor = adaptive.REMEMBERED_FLOOR if remembered else None
    controller.reproduced_floor = adaptive.REPRODUCED_FLOOR if reproduced else None
    controller.use_cost_prior(every_size(costs, adaptive.DEFAULT_DRAFT_MAX + 1), calibrated=True)
    return replay_row(order, costs, controller, **row)


def recorded_requests(
    temperature: float = 0.0, seed: int = 0, workloads: list | None = None, **decoded
) -> list:
    """(workload, prompt, output, confidence) per request with an output of 2 tokens or more:
    greedy outputs, or outputs sampled at ``temperature`` (what a chat client usually asks
    for), each with the raw top probability of the rows that decided it (what the verifier
    returns, before the sampling transforms). The chats and the code edits, or the given
    ``workloads`` ((workload, messages) pairs). ``decoded``: recorded_workloads' max_tokens."""
    workloads, prompts, outputs = recorded_workloads(
        N_CHATS, temperature, seed, workloads, **decoded
    )
    kept = [(w, p, o) for (w, _), p, o in zip(workloads, prompts, outputs) if len(o) >= 2]
    confidences = recorded_confidences([p for _, p, _ in kept], [o for _, _, o in kept])
    return [(w, p, o, c) for (w, p, o), c in zip(kept, confidences)]


def all_recordings() -> dict:
    """name -> recorded_requests(): the greedy recording and one per sampled seed."""
    recordings = {"greedy": recorded_requests()}
    recordings.update(
        (
            f"sampled at {SAMPLED_TEMPERATURE}, seed {seed}",
            recorded_requests(SAMPLED_TEMPERATURE, seed),
        )
        for seed in SAMPLED_SEEDS
    )
    return recordings


def bench_confidence_rules(benchmark):
    # A sampled text can wander off a copy while the target's rows stay sure, which the greedy
    # recordings cannot show: the rules are replayed on a sampled recording too. A sampled
    # output replays exactly: a point-mass draft passes a position exactly when the target's
    # own draw there is the drafted token, which is the recorded draw.
    recordings = all_recordings()

    def run_all():
        table: dict = {}
        for curve, costs in curves().items():
            for recording, requests in recordings.items():
                for order_name, order in orders(requests).items():
                    for rule in RULES:
                        for workload, s in replay_in_order(order, costs, rule).items():
                            cell = (
                                table.setdefault(curve, {})
                                .setdefault(recording, {})
                                .setdefault(order_name, {})
                            )
                            cell.setdefault(workload, {})[rule] = {
                                "geomean": float(np.exp(np.mean(np.log(s)))),
                                "worst": float(min(s)),
                            }
        return table

    table = benchmark.pedantic(run_all, rounds=1, iterations=1)
    benchmark.extra_info.update(rules=list(RULES), recordings=list(recordings), speedup=table)
    for curve, by_recording in table.items():
        for recording, by_order in by_recording.items():
            for order_name, by_workload in by_order.items():
                for workload, by_rule in by_workload.items():
                    print(
                        f"\n{curve}, {recording}, {order_name}, {workload}: "
                        + ", ".join(
                            f"{rule} {v['geomean']:.3f}x (worst {v['worst']:.3f}x)"
                            for rule, v in by_rule.items()
                        ),
                        flush=True,
                    )
