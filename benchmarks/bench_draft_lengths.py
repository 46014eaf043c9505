"""Does the 0.5B draft model pay on this CPU? The draft model at fixed draft lengths against
plain decoding, measured on real chats.

The cost model lets a draft model draft only where its costs predict a gain (bench_draft_peer:
on the 2-core CPUs this project ran on, it drafted no round). This suite measures what it
would have got: ``SpeculativeLlama(target, draft=DRAFT, adaptive=False, draft_min=k,
draft_max=k)`` drafts k tokens with the 0.5B every round and verifies them in one pass, for k
in DRAFT_LENGTHS, against plain llama-cpp-python, on the ShareGPT chats of bench_draftless
(PYSPEC_BENCH_CHATS, 8 by default), greedy, 96 tokens, the modes in turn and in the opposite
order for every other request. Per mode: decode tok/s (geometric mean), acceptance, and what
a round costs: the target's verify pass and a drafted token, each over plain
llama-cpp-python's time per token in the same requests, the drafted token's without the
draft model's own prompt pass (its first round's catch-up, which the decode rate includes
and which is given apart).

    pyspec bench draft-lengths   # or: pytest benchmarks/bench_draft_lengths.py -s
"""

from __future__ import annotations

from _sharegpt import chats_asked
from bench_draftless import MAX_TOKENS, THREADS, _geo, run_requests

N_CHATS = chats_asked(8)
DRAFT_LENGTHS = (1, 2, 3, 4)


def mode_name(k: int) -> str:
    return f"draft model, k={k}"


class PromptPasses:
    """Wraps a DraftModel's ``draft`` to keep, per request (one entry per ``start_request``,
    which the loop calls once per request; 0 where nothing was drafted), what its first call
    spent catching up on the prompt (the draft model's own prompt pass): it falls in the first
    round, after the first token, so it counts in the decode rate, and the steady cost of a
    drafted token is read without it."""

    def __init__(self, drafter):
        self.seconds: list = []
        self._draft, self._fresh = drafter.draft, False
        drafter.draft = self._wrapped
        start = drafter.start_request

        def start_request():
            self.seconds.append(0.0)
            self._fresh = True
            start()

        drafter.start_request = start_request

    def _wrapped(self, *args, **kwargs):
        result = self._draft(*args, **kwargs)
        if self._fresh:
            self.seconds[-1] = result.catch_up_seconds
            self._fresh = False
        return result


def summarise(rows: list, modes: list) -> dict:
    """The chats, as bench_draftless's summary names a workload (what ``pyspec bench``'s report
    reads): decode tok/s (geometric means) and over plain per mode; per speculative mode the
    acceptance, tokens per round, and a round's verify pass and a drafted token in plain
    llama-cpp-python's time per token."""
    plain_ms = _geo([1000 / r["plain"]["rate"] for r in rows])
    s: dict = {"requests": len(rows), "rate": {}, "over_plain": {}}
    for m in modes:
        mine = [r[m] for r in rows]
        s["rate"][m] = _geo([x["rate"] for x in mine])
        s["over_plain"][m] = _geo([x["rate"] / r["plain"]["rate"] for x, r in zip(mine, rows)])
        if m == "plain":
            continue
        drafted = sum(x["drafted"] for x in mine)
        rounds = sum(x["rounds"] for x in mine)
        target_ms = sum(x["target_ms_per_round"] * x["rounds"] for x in mine) / rounds
        # the drafting time without the draft model's prompt pass (PromptPasses)
        draft_ms = sum(
            x["draft_ms_per_round"] * x["rounds"] - 1000 * x["draft_prompt_seconds"] for x in mine
        )
        for key, value in (
            ("acceptance", sum(x["accepted"] for x in mine) / max(drafted, 1)),
            ("tokens_per_round", sum(x["tokens"] - 1 for x in mine) / rounds),
            ("verify_over_plain", target_ms / plain_ms),
            ("draft_token_over_plain", draft_ms / max(drafted, 1) / plain_ms),
            ("draft_prompt_seconds", sum(x["draft_prompt_seconds"] for x in mine) / len(mine)),
        ):
            s.setdefault(key, {})[m] = value
    return {"chat": s}


def bench_draft_lengths(benchmark, monkeypatch):
    import llama_cpp
    from _sharegpt import chat_requests

    from pyspec.llama import SpeculativeLlama
    from pyspec.testing.models import ensure_model

    monkeypatch.setenv("PYSPEC_COST_CACHE", "off")
    target = str(ensure_model("qwen2.5-coder-1.5b"))
    draft = str(ensure_model("qwen2.5-coder-0.5b"))
    common = dict(n_ctx=4096, n_threads=THREADS, verbose=False, flash_attn=True)
    objects = {"plain": llama_cpp.Llama(model_path=target, **common)}
    passes = {}
    for k in DRAFT_LENGTHS:
        objects[mode_name(k)] = SpeculativeLlama(
            target, draft=draft, adaptive=False, draft_min=k, draft_max=k, **common
        )
        passes[mode_name(k)] = PromptPasses(objects[mode_name(k)].speculation.drafter)
    modes = list(objects)
    chats = chat_requests(objects["plain"], N_CHATS)
    workloads = [("chat", c["id"], c["messages"]) for c in chats]

    def run_all():
        # bench_draftless's request loop, with no C++ mode (no tools, no work folder)
        rows = run_requests(workloads, modes, objects["plain"], objects, None, target, None)
        for m, p in passes.items():
            for row, seconds in zip(rows, p.seconds, strict=True):
                row[m]["draft_prompt_seconds"] = seconds
        return rows

    rows = benchmark.pedantic(run_all, rounds=1, iterations=1)
    for llm in objects.values():
        llm.close()
    summary = summarise(rows, modes)
    benchmark.extra_info.update(
        max_tokens=MAX_TOKENS, threads=THREADS, modes=modes, rows=rows, summary=summary
    )
    for key, by_mode in summary["chat"].items():
        if isinstance(by_mode, dict):
            print(f"\n{key}: " + ", ".join(f"{m} {v:.3f}" for m, v in by_mode.items()), flush=True)
