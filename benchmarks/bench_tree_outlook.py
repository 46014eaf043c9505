"""Would a tree of drafts pay on this machine? Chains against trees on the real workloads, in
the target's measured batch costs.

A tree verifies a second branch beside the chain in the same llama.cpp batch: here the
branch at the root, the continuation after the context's longest earlier match that starts
with a different first token than the chain's (the suffix index's runner-up). It can only
win where the chain's first draft is rejected and the runner-up's first token is the
target's; it costs its tokens in every batch it rides in. So the outlook needs two measured
things: how often the runner-up is right when the chain is wrong on the real workloads, and
what the extra batch rows cost (``docs/results/llama-builds.json``: milliseconds per
``llama_decode`` of n tokens on this build).

Per request of bench_draftless's workloads (8 ShareGPT chats and the 5 code edits, Qwen2.5-
Coder 1.5B, 96 greedy tokens, the outputs decoded once by plain llama-cpp-python and cached),
the loop is replayed as ``pyspec.testing.replay`` replays it (the real PromptLookup, the real
cost model, greedy acceptance against the recorded output), once with chains and once per
branch length with trees; the speedups are in cost units (plain cost over spent), so they do
not depend on this run's timing. Nothing here is a wall-clock claim about trees: it is the
gain an exact tree verifier could reach at best, before its own overhead.

    pyspec bench tree-outlook   # or: pytest benchmarks/bench_tree_outlook.py
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
from _sharegpt import chats_asked
from bench_draftless import MAX_TOKENS, THREADS, render_chat

N_CHATS = chats_asked(8)
# How the recorded outputs are decoded: as bench_draftless's live modes decode (flash attention
# on, llama.cpp's own default), so a replay follows the text the live bench's plain
# llama-cpp-python writes. With flash attention off (the recordings before session 40), 11 of
# the 24 greedy chats left that text at a near-tie, at their 0th-43rd token
# (docs/draftless-runs.md).
RECORDING = dict(n_ctx=4096, n_threads=THREADS, verbose=False, flash_attn=True)
RECORDING_KEY = "flash attention on"
BRANCH_LENGTHS = (1, 2, 4)
MIN_MATCH, MAX_MATCH = 2, 8
RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"


def runner_up(tokens: list, exclude: int, length: int) -> list:
    """The branch a tree would add at the root: after the longest suffix of ``tokens``
    (MIN_MATCH..MAX_MATCH tokens) that occurred before, the most frequent next token other
    than ``exclude`` (latest occurrence on a tie), followed by what followed it there, up to
    ``length`` tokens in all. [] when there is none."""
    seq = np.asarray(tokens)
    n = len(seq)
    for size in range(min(MAX_MATCH, n - 1), MIN_MATCH - 1, -1):
        suffix = seq[n - size :]
        windows = np.lib.stride_tricks.sliding_window_view(seq[: n - 1], size)
        ends = np.flatnonzero((windows == suffix).all(axis=1)) + size  # index after a match
        ends = ends[ends < n]
        if not len(ends):
            continue
        counts: dict = {}
        for end in ends:  # later occurrences overwrite: the latest wins a tie
            token = int(seq[end])
            if token != exclude:
                count, _ = counts.get(token, (0, 0))
                counts[token] = (count + 1, int(end))
        if not counts:
            return []
        _, end = max(counts.values())
        return [int(t) for t in seq[end : end + length]]
    return []


def replay(prompt: list, output: list, costs: dict, branch: int, at_rejection=False) -> dict:
    """The loop replayed on one recorded greedy output, with a branch of ``branch`` tokens
    beside every chain (0: chains only): at the root, or (``at_rejection``, an upper bound no
    tree can reach, since it must place its branches before the target has spoken) at the
    node where the chain is rejected. Cost units, as pyspec.testing.replay."""
    from pyspec.llama.drafting.adaptive import FREE_DRAFTER, DraftLengthController
    from pyspec.llama.drafting.lookup import PromptLookup
    from pyspec.llama.rounds import Round
    from pyspec.testing.replay import batch_cost

    drafter = PromptLookup()
    controller = DraftLengthController(0, 16, watch=dataclasses.replace(FREE_DRAFTER))
    i, spent = 1, 0.0
    tally = dict(rounds=0, rejections=0, runner_up=0, runner_up_right=0, branch_tokens=0)
    while i < len(output):
        context = list(prompt) + list(output[:i])
        draft = drafter.draft(context, 16, None, len(context))
        k = (
            controller.choose(len(draft.tokens), draft.bucket, draft_cost=0.0)
            if draft.tokens
            else 0
        )
        drafts = draft.tokens[:k]
        accepted = 0
        while (
            accepted < k and i + accepted < len(output) and drafts[accepted] == output[i + accepted]
        ):
            accepted += 1
        emitted = min(accepted + 1, len(output) - i)
        node = accepted if at_rejection else 0  # where the branch leaves the chain
        rejected = k and accepted == node and accepted < k
        extra = []
        if branch and k and (rejected or not at_rejection):
            extra = runner_up(context + drafts[:node], drafts[node], branch)
        if rejected:
            tally["rejections"] += 1
            tally["runner_up"] += bool(extra)
        at = i + node
        if rejected and extra and at < len(output) and extra[0] == output[at]:  # the target's
            tally["runner_up_right"] += 1
            run = 0
            while run < len(extra) and at + run < len(output) and extra[run] == output[at + run]:
                run += 1
            emitted = min(node + run + 1, len(output) - i)
        cost = batch_cost(costs, 1 + k + len(extra))
        spent += cost
        tally["rounds"] += 1
        tally["plain_rounds"] = tally.get("plain_rounds", 0) + (not k)
        tally["branch_tokens"] += len(extra)
        r = Round(
            bucket=draft.bucket,
            offered=k,
            verified=k,
            accepted=accepted,
            emitted=min(accepted + 1, len(output) - i),  # the controller learns the chain
            batch=k + 1,
            target_seconds=batch_cost(costs, k + 1),
            round_seconds=batch_cost(costs, k + 1),
            shadow_match=(draft.tokens[0] == output[i]) if not k and draft.tokens else None,
        )
        controller.observe(r)
        i += emitted
    tally["speedup"] = (len(output) - 1) * batch_cost(costs, 1) / spent if spent else 1.0
    return tally


def _decoded_outputs(
    llm, prompts: list, temperature: float = 0.0, seed: int = 0, max_tokens: int = MAX_TOKENS
) -> list:
    """Each prompt's output (``max_tokens`` or to the end of text), decoded once by plain
    llama-cpp-python (``llm``, made with RECORDING's setup) and cached by the prompt's tokens
    (a fresh machine decodes them): greedy at temperature 0, else sampled with
    llama-cpp-python's default top-k, top-p and min-p, request i seeded with seed + i so that
    each recording repeats."""
    from pyspec.cache import cache_dir

    directory = cache_dir() / "tree-outlook"
    directory.mkdir(parents=True, exist_ok=True)
    outputs = []
    for i, ids in enumerate(prompts):
        # a sampled key names the request's own seed, which depends on its place in the list;
        # both name the decoding setup (before session 40 the outputs were decoded with
        # flash attention off, and 11 of the 24 greedy chats left the live bench's text)
        named = (
            [max_tokens, ids] if temperature == 0.0 else [max_tokens, temperature, seed + i, ids]
        )
        named = [RECORDING_KEY, *named]
        key = hashlib.sha256(json.dumps(named).encode()).hexdigest()[:16]
        path = directory / f"{key}.json"
        if path.is_file():
            outputs.append(json.loads(path.read_text()))
            continue
        if temperature > 0.0:
            llm.set_seed(seed + i)
        out = []
        for tok in llm.generate(ids, temp=temperature):
            if tok == llm.token_eos():
                break
            out.append(int(tok))
            if len(out) == max_tokens:
                break
        path.write_text(json.dumps(out))
        outputs.append(out)
        how = "greedy" if temperature == 0.0 else f"sampled at {temperature}"
        print(f"decoded {len(out)} tokens ({how}) for a {len(ids)}-token prompt", flush=True)
    return outputs


def batch_costs() -> dict:
    """n -> cost of a decode of n tokens over a decode of one, this build's measured curve."""
    path = RESULTS / "llama-builds.json"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `pyspec bench llama-builds` first")
    info = json.loads(path.read_text())["benchmarks"]
    ms = next(
        b["extra_info"]["ms"] for b in info if b["extra_info"]["model"] == "qwen2.5-coder-1.5b"
    )
    build = ms["amx"] if "amx" in ms else ms[next(iter(ms))]
    return {int(n): v / build["1"] for n, v in build.items() if n.isdigit()}


def recorded_workloads(
    n_chats: int,
    temperature: float = 0.0,
    seed: int = 0,
    workloads: list | None = None,
    max_tokens: int = MAX_TOKENS,
):
    """(workloads, prompts, outputs): n_chats ShareGPT chats and the code edits, or the given
    ``workloads`` ((workload, messages) pairs) instead, their prompt tokens, and their outputs
    (greedy, or sampled at ``temperature`` from ``seed``; up to ``max_tokens``; decoded once,
    cached)."""
    import llama_cpp

    from pyspec.testing.models import ensure_model

    target = str(ensure_model("qwen2.5-coder-1.5b"))
    llm = llama_cpp.Llama(model_path=target, **RECORDING)
    if workloads is None:
        from _code_edits import requests as code_requests
        from _sharegpt import chat_requests

        workloads = [("chat", r["messages"]) for r in chat_requests(llm, n_chats)]
        workloads += [("code edits", messages) for _, messages in code_requests()]
    prompts = [
        llm.tokenize(render_chat(llm, m).encode(), add_bos=True, special=True) for _, m in workloads
    ]
    outputs = _decoded_outputs(llm, prompts, temperature, seed, max_tokens)
    llm.close()
    return workloads, prompts, outputs


def bench_tree_outlook(benchmark):
    workloads, prompts, outputs = recorded_workloads(N_CHATS)
    costs = batch_costs()

    def run_all():
        results = {}
        for (workload, _), prompt, output in zip(workloads, prompts, outputs):
            if len(output) < 2:
                continue
            for branch in (0, *BRANCH_LENGTHS):
                results.setdefault(workload, {}).setdefault(str(branch), []).append(
                    replay(prompt, output, costs, branch)
                )
            results[workload].setdefault("oracle", []).append(
                replay(prompt, output, costs, BRANCH_LENGTHS[-1], at_rejection=True)
            )
        return results

    results = benchmark.pedantic(run_all, rounds=1, iterations=1)
    summary = {}
    for workload, by_branch in results.items():
        chain = by_branch["0"]
        summary[workload] = {
            "requests": len(chain),
            "speedup": {
                b: float(np.exp(np.mean(np.log([t["speedup"] for t in ts]))))
                for b, ts in by_branch.items()
            },
            "rounds": sum(t["rounds"] for t in chain),
            "verify_rounds": sum(t["rounds"] - t["plain_rounds"] for t in chain),
        }
        for placement in (str(BRANCH_LENGTHS[-1]), "oracle"):
            for key in ("rejections", "runner_up", "runner_up_right"):
                summary[workload][f"{placement}:{key}"] = sum(t[key] for t in by_branch[placement])
    benchmark.extra_info.update(
        max_tokens=MAX_TOKENS, branch_lengths=list(BRANCH_LENGTHS), costs=costs, summary=summary
    )
    for workload, s in summary.items():
        print(f"\n{workload}: {s}", flush=True)
