"""How far the cost model's draft lengths are from the best lengths, on the real workloads.

Per request of bench_draftless's workloads (ShareGPT chats and the 5 code edits, Qwen2.5-Coder
1.5B, 96 greedy tokens and the target's confidence per token, recorded once and cached by
bench_confidence_rules), on every batch curve the repository holds (bench_slow_start.curves):

- the policy: the loop replayed as it runs by default (the unsure and sure-copy rules, the
  lookup with its memory, one controller through bench_draftless's order, chats then edits);
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
from bench_slow_start import MAX_TOKENS, curves

DEFAULT_RULES = "unsure + sure copy"  # what the loop runs beside a free drafter


def ceilings(order: list, costs: dict) -> dict:
    """workload -> the oracle's speedup per request, ``order``'s requests through one lookup
    and its memory, as the replayed row has them."""
    from pyspec.llama.drafting.lookup import PromptLookup
    from pyspec.llama.drafting.request_memory import RequestMemory
    from pyspec.testing.ceiling import acceptable_runs, chain_ceiling

    drafter = PromptLookup()
    drafter.use_memory(RequestMemory())
    out: dict = {}
    for workload, prompt, output, _ in order:
        runs = acceptable_runs(prompt, output, drafter=drafter, max_tokens=MAX_TOKENS)
        out.setdefault(workload, []).append(chain_ceiling(runs, costs).speedup)
    return out


def _geo(values) -> float:
    return float(np.exp(np.mean(np.log(values))))


def bench_policy_ceiling(benchmark):
    requests = recorded_requests()
    order = orders(requests)["bench"]

    def run_all():
        table: dict = {}
        for curve, costs in curves().items():
            policy = replay_in_order(order, costs, DEFAULT_RULES)
            ceiling = ceilings(order, costs)
            for workload in policy:
                p, c = np.array(policy[workload]), np.array(ceiling[workload])
                table.setdefault(curve, {})[workload] = {
                    "requests": len(p),
                    "policy": _geo(p),
                    "ceiling": _geo(c),
                    "policy_over_ceiling": _geo(p / c),
                    "worst_policy_over_ceiling": float(min(p / c)),
                }
        return table

    table = benchmark.pedantic(run_all, rounds=1, iterations=1)
    benchmark.extra_info.update(order="bench", rules=DEFAULT_RULES, speedup=table)
    for curve, rows in table.items():
        for workload, v in rows.items():
            print(
                f"\n{curve}, {workload} ({v['requests']}): policy {v['policy']:.3f}x plain, "
                f"ceiling {v['ceiling']:.3f}x, policy/ceiling {v['policy_over_ceiling']:.3f} "
                f"(worst request {v['worst_policy_over_ceiling']:.3f})",
                flush=True,
            )
