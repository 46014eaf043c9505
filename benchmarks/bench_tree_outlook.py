"""Would a tree of drafts pay on these machines? Chains against trees on the real workloads,
in each CPU's measured batch costs.

A tree verifies a second branch beside the chain in the same llama.cpp batch: here the
branch at the root, the continuation after the context's longest earlier match that starts
with a different first token than the chain's (a suffix index's runner-up). It can only
win where the chain's first draft is rejected and the runner-up's first token is the
target's; it costs its tokens in every batch it rides in. So the outlook needs two measured
things: how often the runner-up is right when the chain is wrong on the real workloads, and
what the extra batch rows cost on each CPU.

Per request of bench_draftless's workloads (24 ShareGPT chats and the 5 code edits, Qwen2.5-
Coder 1.5B, 96 tokens, greedy and sampled at 0.8, recorded once and cached: _recordings,
bench_confidence_rules), the loop is replayed as it runs by default
(``bench_policy_ceiling.DEFAULT_RULES``: the real PromptLookup with its memory of earlier
requests, the real cost model from a calibrated curve, one controller through the requests in
bench_draftless's order; ``pyspec.testing.replay``), with chains, with a root branch of 1, 2
or 4 tokens, and, as a bound no tree reaches (a tree places its branches before the target
has spoken), a branch of 4 placed at the very node where the chain is rejected. Each is
weighed in each CPU's measured curve and the latest curve a live run calibrated on it
(``machine_curves``). The controller decides as for the chain alone, so a tree's speedup
differs from the chain's only by what its branch costs and rescues. Cost units: the figures
do not depend on this run's timing. Nothing here is a wall-clock claim about trees: it is the
gain an exact tree verifier could reach at best, before its own overhead.

    pyspec bench tree-outlook   # or: pytest benchmarks/bench_tree_outlook.py -s
"""

from __future__ import annotations

import numpy as np

BRANCH_LENGTHS = (1, 2, 4)
MIN_MATCH, MAX_MATCH = 2, 8
# name -> (branch length, placed where the chain is rejected); 0: chains alone
PLACEMENTS = {
    "chains": (0, False),
    **{f"root branch of {n}": (n, False) for n in BRANCH_LENGTHS},
    f"branch of {BRANCH_LENGTHS[-1]} at the rejection": (BRANCH_LENGTHS[-1], True),
}


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


def branch_for(length: int, at_rejection: bool):
    """replay_lookup's ``branch``: the runner-up of ``length`` tokens beside the chain's first
    draft, or (``at_rejection``) beside the draft where the chain is rejected (none where the
    whole chain passes)."""

    def branch(context: list, drafts: list, accepted: int) -> tuple:
        node = accepted if at_rejection else 0
        if node >= len(drafts):
            return 0, []
        return node, runner_up(list(context) + drafts[:node], drafts[node], length)

    return branch


def machine_curves() -> dict:
    """The curves a tree is weighed in: each CPU's measured build curve and, per machine and
    build, the latest curve a live bench_draftless run calibrated there (bench_slow_start's
    curves, which also hold the dear test curve and every older calibration)."""
    from bench_slow_start import curves

    out, latest = {}, {}
    for name, costs in curves().items():
        if name.endswith(" build"):
            out[name] = costs
        elif ", calibrated by " in name:
            machine, _, source = name.partition(", calibrated by ")
            date = source.rsplit(" ", 1)[-1]
            if machine not in latest or date >= latest[machine][0]:
                latest[machine] = (date, name, costs)
    out.update((name, costs) for _, name, costs in latest.values())
    return out


def summarise(collected: list) -> dict:
    """Per workload, over (workload, ReplayResult) pairs: the speedup's geometric mean and
    the rounds and branch counts summed."""
    out: dict = {}
    for workload, r in collected:
        out.setdefault(workload, []).append(r)
    return {
        workload: dict(
            requests=len(rs),
            speedup=float(np.exp(np.mean(np.log([r.speedup for r in rs])))),
            rounds=sum(r.plain_steps + r.verify_steps for r in rs),
            verify_rounds=sum(r.verify_steps for r in rs),
            **{
                key: sum(getattr(r, key) for r in rs)
                for key in ("branch_rejections", "branch_offers", "branch_rescues", "branch_tokens")
            },
        )
        for workload, rs in out.items()
    }


def bench_tree_outlook(benchmark):
    from bench_confidence_rules import all_recordings, orders, replay_in_order
    from bench_policy_ceiling import DEFAULT_RULES

    recordings = all_recordings()
    chosen = machine_curves()

    def run_all():
        table: dict = {}
        for recording, requests in recordings.items():
            order = orders(requests)["bench"]
            for curve, costs in chosen.items():
                for placement, (length, at_rejection) in PLACEMENTS.items():
                    collected: list = []
                    branch = branch_for(length, at_rejection) if length else None
                    replay_in_order(order, costs, DEFAULT_RULES, branch=branch, collect=collected)
                    by_workload = summarise(collected)
                    for workload, s in by_workload.items():
                        table.setdefault(recording, {}).setdefault(curve, {}).setdefault(
                            workload, {}
                        )[placement] = s
                print(f"\n{recording}, {curve}: " + _line(table[recording][curve]), flush=True)
        return table

    table = benchmark.pedantic(run_all, rounds=1, iterations=1)
    benchmark.extra_info.update(
        rules=DEFAULT_RULES,
        placements=list(PLACEMENTS),
        curves={name: {str(n): c for n, c in costs.items()} for name, costs in chosen.items()},
        table=table,
    )


def _line(by_workload: dict) -> str:
    return "; ".join(
        f"{workload} " + ", ".join(f"{p} {s['speedup']:.3f}x" for p, s in by_placement.items())
        for workload, by_placement in by_workload.items()
    )
