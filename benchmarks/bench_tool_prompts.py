"""The remembered-copy rule on a workload whose prompts repeat text no answer copies.

Twelve requests that send one long system prompt (four tools as JSON schemas, the form
Qwen2.5's chat template gives them; `_tool_calls.py`), most answered with a tool call that
quotes a few tokens of the schemas and leaves them (Qwen2.5-Coder 1.5B, 96 greedy tokens,
decoded once and cached, with the target's confidence per token, as bench_confidence_rules
records them). The loop is replayed over them in order (the real PromptLookup with its
memory, the real controller) with the remembered-copy rule on and off, on every batch curve
the repository holds, in cost units. Text held only in prompts must not be believed: before
session 34 the memory counted it, and a tool call that quoted 8 tokens of a schema with the
target sure was verified as 40-odd believed tokens that failed at once (docs/drafting.md).

    pyspec bench tool-prompts   # or: pytest benchmarks/bench_tool_prompts.py -s
"""

from __future__ import annotations

import numpy as np
from _tool_calls import requests as tool_requests
from bench_confidence_rules import recorded_requests, replay_in_order
from bench_slow_start import _geo, curves

RULES = ("unsure + sure copy", "unsure + sure copy + remembered")  # off, on


def recorded_tool_requests() -> list:
    """(workload, prompt, output, confidence) per request (outputs of 2 tokens or more)."""
    return recorded_requests(workloads=[("tool calls", m) for _, m in tool_requests()])


def bench_tool_prompts(benchmark):
    order = recorded_tool_requests()

    def run_all():
        table = {}
        for curve, costs in curves().items():
            off, on = (np.array(replay_in_order(order, costs, r)["tool calls"]) for r in RULES)
            table[curve] = {
                "requests": len(on),
                "rule_off": _geo(off),
                "rule_on": _geo(on),
                "on_over_off": _geo(on / off),
                "worst_on_over_off": float(min(on / off)),
                "best_on_over_off": float(max(on / off)),
            }
        return table

    table = benchmark.pedantic(run_all, rounds=1, iterations=1)
    benchmark.extra_info.update(rules=list(RULES), speedup=table)
    for curve, v in table.items():
        print(
            f"\n{curve}, tool calls ({v['requests']}): rule off {v['rule_off']:.3f}x plain, "
            f"on {v['rule_on']:.3f}x; on/off {v['on_over_off']:.3f} (requests "
            f"{v['worst_on_over_off']:.3f}-{v['best_on_over_off']:.3f})",
            flush=True,
        )
