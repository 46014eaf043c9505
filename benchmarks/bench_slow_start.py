"""The slow start read in cost against the slow start in tokens, replayed on real workloads.

After a rejection (and at a new request) a bucket's drafts are limited to a few tokens,
doubling with every round that passes in full (``DraftLengthController._limit``). Read as a
token count, that limit was chosen where batches cost what the default prior says; read in
cost (``slow_start_in_cost``, the default), it allows the longest draft whose extra cost over
one token is what the limit's drafts cost in the prior: the same draft where batches are
that dear, a longer one where they are cheap.

Per request of bench_draftless's workloads (ShareGPT chats and the 5 code edits, Qwen2.5-
Coder 1.5B, 96 greedy tokens, the outputs decoded once by plain llama-cpp-python and cached
as bench_tree_outlook caches them), ``pyspec.testing.replay`` replays the loop with each rule
(requests in a row on one controller, as one Llama serves them), in three batch curves: the
Xeon AMX build's (docs/results/tree-outlook.json), the dear curve of tests/data, and this
build's own when ``docs/results/batch-curve.json`` holds one measured here (``python
benchmarks/bench_slow_start.py --measure``). Cost units, so the figures do not depend on
this run's timing; the wall-clock check is bench_draftless.

    PYSPEC_BENCH_CHATS=24 pytest benchmarks/bench_slow_start.py -s
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
from bench_draftless import THREADS
from bench_tree_outlook import recorded_workloads

N_CHATS = int(os.environ.get("PYSPEC_BENCH_CHATS", "24"))
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"


def curves() -> dict:
    """name -> batch curve (n -> cost of n tokens over one)."""
    out = {}
    outlook = json.loads((RESULTS / "tree-outlook.json").read_text())["benchmarks"][0]
    out["Xeon AMX build"] = {int(n): c for n, c in outlook["extra_info"]["costs"].items()}
    recorded = json.loads((ROOT / "tests" / "data" / "recorded_generations.json").read_text())
    dear = recorded["costs"]["qwen2.5-coder-1.5b"]
    out["dear (tests/data)"] = {int(n): c for n, c in dear.items()}
    here = RESULTS / "batch-curve.json"
    if here.is_file():
        measured = json.loads(here.read_text())
        out[f"this build ({measured['cpu']})"] = {int(n): c for n, c in measured["costs"].items()}
    return out


def replay_in_row(requests: list, costs: dict, in_cost: bool) -> list:
    """Speedups over plain of each request, replayed in a row on one controller."""
    import dataclasses

    from pyspec.llama.drafting.adaptive import FREE_DRAFTER, DraftLengthController
    from pyspec.testing.replay import replay_lookup

    controller = DraftLengthController(0, 16, watch=dataclasses.replace(FREE_DRAFTER))
    controller.slow_start_in_cost = in_cost
    speedups = []
    for prompt, output in requests:
        result = replay_lookup(prompt, output, costs, controller=controller)
        speedups.append(result.speedup)
    return speedups


def _geo(values) -> float:
    return float(np.exp(np.mean(np.log(values))))


def bench_slow_start(benchmark):
    workloads, prompts, outputs = recorded_workloads(N_CHATS)
    by_workload: dict = {}
    for (workload, _), prompt, output in zip(workloads, prompts, outputs):
        if len(output) >= 2:  # a request that ended at once has nothing to replay
            by_workload.setdefault(workload, []).append((prompt, output))

    def run_all():
        return {
            curve: {
                workload: {
                    rule: _geo(replay_in_row(requests, costs, rule == "cost"))
                    for rule in ("tokens", "cost")
                }
                for workload, requests in by_workload.items()
            }
            for curve, costs in curves().items()
        }

    table = benchmark.pedantic(run_all, rounds=1, iterations=1)
    benchmark.extra_info.update(requests={w: len(r) for w, r in by_workload.items()}, speedup=table)
    for curve, rows in table.items():
        for workload, s in rows.items():
            print(
                f"\n{curve}, {workload} ({len(by_workload[workload])}): slow start in tokens "
                f"{s['tokens']:.3f}x plain, in cost {s['cost']:.3f}x",
                flush=True,
            )


def measure_curve() -> None:
    """This build's batch curve for Qwen 1.5B (medians of 9 interleaved repetitions, in a
    process of its own), written to docs/results/batch-curve.json. Run it on a quiet machine."""
    from pyspec.testing import build_probe
    from pyspec.testing.models import ensure_model
    from pyspec.tools.machine import machine_info, now_iso

    probe = build_probe.run(
        [
            "costs",
            "--model",
            str(ensure_model("qwen2.5-coder-1.5b")),
            "--threads",
            str(THREADS),
            "--reps",
            "9",
        ]
    )
    ms = probe["ms_per_batch"]
    costs = {n: v / ms["1"] for n, v in ms.items()}
    cpu = machine_info()["cpu"]
    flags = set(cpu["flags"])
    simd = "AMX" if "amx_int8" in flags else "AVX-512" if "avx512f" in flags else "AVX2"
    record = {"cpu": f"{cpu['brand_raw']}, {simd}", "measured": now_iso(), "ms_per_batch": ms}
    record["costs"] = costs
    (RESULTS / "batch-curve.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(costs))


if __name__ == "__main__" and sys.argv[1:] == ["--measure"]:
    measure_curve()
