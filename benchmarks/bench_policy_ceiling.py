"""How far the cost model's draft lengths are from the best lengths, on the real workloads.

Per request of bench_draftless's workloads (ShareGPT chats and the 5 code edits, Qwen2.5-Coder
1.5B, 96 greedy tokens and the target's confidence per token, recorded once and cached by
bench_confidence_rules), on every batch curve the repository holds (bench_slow_start.curves):

- the policy: the loop replayed as it runs by default (the unsure, sure-copy and
  remembered-copy rules, the lookup with its memory, one controller through
  bench_draftless's order, chats then edits);
- the ceiling: the draft-length oracle (``pyspec.testing.ceiling``), which knows the output
  and picks every round's length from the same lookup's offers to spend the least target
  time (one drafter with its memory through the same order).

Both in cost units over plain decoding, so nothing depends on this run's timing. The policy
over the ceiling is what better draft lengths could still win on that curve; the ceiling
itself bounds every chain of these drafts, whatever decides their lengths: a CPU whose
long batches cost nearly their tokens caps it (docs/drafting.md, "The ceiling").

    pyspec bench policy-ceiling   # or: pytest benchmarks/bench_policy_ceiling.py -s
"""

from __future__ import annotations

import numpy as np
from bench_confidence_rules import orders, recorded_requests, replay_in_order
from bench_draftless import MAX_TOKENS
from bench_slow_start import _geo, curves

# what the loop runs beside a free drafter (all four rules since session 37)
DEFAULT_RULES = "unsure + sure copy + remembered + reproduced"


def offers_in_row(order: list) -> list:
    """The lookup's offers at every position of each request of ``order``, one drafter and
    its memory through the row, as the replayed row has them (the same on every curve)."""
    from pyspec.llama.drafting.lookup import PromptLookup
    from pyspec.llama.drafting.request_memory import RequestMemory
    from pyspec.testing.ceiling import lookup_offers

    drafter = PromptLookup()
    drafter.use_memory(RequestMemory())
    return [
        lookup_offers(prompt, output, drafter=drafter, max_tokens=MAX_TOKENS)
        for _, prompt, output, _ in order
    ]


def bench_policy_ceiling(benchmark):
    requests = recorded_requests()
    order = orders(requests)["bench"]

    def run_all():
        from pyspec.testing.ceiling import chain_ceiling

        offers = offers_in_row(order)
        table: dict = {}
        for curve, costs in curves().items():
            policy = replay_in_order(order, costs, DEFAULT_RULES)
            ceiling: dict = {}
            for (workload, *_), offered in zip(order, offers):
                ceiling.setdefault(workload, []).append(chain_ceiling(offered, costs).speedup)
            for workload in policy:
                p, c = np.array(policy[workload]), np.array(ceiling[workload])
                table.setdefault(curve, {})[workload] = {
                    "requests": len(p),
                    "policy": _geo(p),
                    "ceiling": _geo(c),
                    "policy_over_ceiling": _geo(p / c),
                    "worst_policy_over_ceiling": float(min(p / c)),
                    # Above 1 only where the loop's lookup, asked at its rounds' starts,
                    # offered more than the one asked at every position (ceiling.py).
                    "best_policy_over_ceiling": float(max(p / c)),
                    "requests_over_ceiling": int(np.sum(p > c * (1 + 1e-9))),
                }
        return table

    table = benchmark.pedantic(run_all, rounds=1, iterations=1)
    benchmark.extra_info.update(order="bench", rules=DEFAULT_RULES, speedup=table)
    for curve, rows in table.items():
        for workload, v in rows.items():
            print(
                f"\n{curve}, {workload} ({v['requests']}): policy {v['policy']:.3f}x plain, "
                f"ceiling {v['ceiling']:.3f}x, policy/ceiling {v['policy_over_ceiling']:.3f} "
                f"(requests {v['worst_policy_over_ceiling']:.3f}-"
                f"{v['best_policy_over_ceiling']:.3f}, {v['requests_over_ceiling']} over it)",
                flush=True,
            )
