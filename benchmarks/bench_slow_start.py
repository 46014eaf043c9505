"""The slow start's rules, replayed on real workloads.

After a rejection (and at a new request) a bucket's drafts are limited to a few tokens,
doubling with every round that passes in full (``DraftLengthController._limit``). Read as a
token count, that limit was chosen where batches cost what the default prior says; read in
cost (``slow_start_in_cost``, the default), it allows the longest draft whose extra cost over
one token is what the limit's drafts cost in the prior: the same draft where batches are
that dear, a longer one where they are cheap. A new request starts each bucket at 2, or
(``learn_request_start``, the default) where the bucket's first drafts of the last requests
left it: twice as long after each request whose first draft passed in full; and a bucket
whose learned start reached 16 may draft up to draft_max (32), the others up to 16
(``adaptive.UNPROVEN_DRAFT_MAX``). "and calibrated" also starts the controller from the
curve at every size as ``SpeculativeLlama.calibrate`` measures it (its dips believed: this
Zen 4 build verifies 16 tokens for less than 15); "and up to 64" drafts up to pyspec.h's
limit (``adaptive.DEFAULT_DRAFT_MAX``; llama.cpp's ngram-mod drafts up to 64), and "and
unproven too" drops the rule that only a proven bucket drafts past 16 (today's default);
"and proven counts kept" also lets a new request keep as many of a bucket's observations as
its learned start (``keep_proven_counts``, off: it costs the chats when edits come first).
Curves measured only up to 17 tokens (the Xeon AMX one, the dear one) are extended beyond
with their last segment's slope (``replay.batch_cost``).

Per request of bench_draftless's workloads (ShareGPT chats and the 5 code edits, Qwen2.5-
Coder 1.5B, 96 greedy tokens, the outputs decoded once by plain llama-cpp-python and cached
as _recordings caches them), ``pyspec.testing.replay`` replays the loop with each rule
(all requests in a row, as bench_draftless serves them: one controller, one PromptLookup
with its memory of earlier requests), in the batch curves the repository holds: the Xeon
AMX build's (docs/results/llama-builds.json, family 6 model 207), the dear curve of
tests/data, and those measured at every size
(``docs/results/batch-curve-family<F>-model<M>.json``: the Zen 4 EPYC's is family 25,
model 17), each on its own CPU by
``python benchmarks/bench_slow_start.py --measure [LARGEST]``. Cost units, so the figures
do not depend on this run's timing; the wall-clock check is bench_draftless.

    PYSPEC_BENCH_CHATS=24 pytest benchmarks/bench_slow_start.py -s
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from _bench_json import kernels, machine
from _recordings import recorded_workloads
from _sharegpt import chats_asked
from bench_draftless import MAX_TOKENS, THREADS

N_CHATS = chats_asked(24)
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"


def amx_build_curve() -> dict:
    """n -> cost of a decode of n tokens over one, as `pyspec bench llama-builds` measured
    them for the AMX build (docs/results/llama-builds.json, up to 17 tokens)."""
    path = RESULTS / "llama-builds.json"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `pyspec bench llama-builds` first")
    info = json.loads(path.read_text())["benchmarks"]
    ms = next(
        b["extra_info"]["ms"] for b in info if b["extra_info"]["model"] == "qwen2.5-coder-1.5b"
    )
    build = ms["amx"] if "amx" in ms else ms[next(iter(ms))]
    return {int(n): v / build["1"] for n, v in build.items() if n.isdigit()}


def curves() -> dict:
    """name -> batch curve (n -> cost of n tokens over one)."""
    out = {"Xeon AMX build": amx_build_curve()}
    recorded = json.loads((ROOT / "tests" / "data" / "recorded_generations.json").read_text())
    dear = recorded["costs"]["qwen2.5-coder-1.5b"]
    out["dear (tests/data)"] = {int(n): c for n, c in dear.items()}
    # The curves measured at every size, one file per CPU (measure_curve): a VM's bare "AMD
    # EPYC" has been three generations here, so each is named by its family and model.
    for path in sorted(RESULTS.glob("batch-curve-*.json")):
        measured = json.loads(path.read_text())
        out[f"{measured['cpu']} build"] = {int(n): c for n, c in measured["costs"].items()}
    # And the curve a live bench_draftless run calibrated and believed (its JSON keeps it
    # since session 26), so a replay weighs draft lengths where the live run decided them.
    # A file without it (older, or from a run that failed) adds nothing.
    for path in sorted(RESULTS.glob("draftless*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        runs = [b for b in data.get("benchmarks") or [] if b.get("name") == "bench_draftless_modes"]
        shape = runs[0].get("extra_info", {}).get("calibration") if runs else None
        if shape:
            name = (
                f"{machine(data)}{kernels(data)}, calibrated by {path.name} "
                f"{data.get('datetime', '?')[:10]}"
            )
            out[name] = {1: 1.0, **{int(n): c for n, c in shape.items()}}
    return out


RULES = {  # name -> (slow start read in cost, learned start, draft_max, calibrated curve,
    # drafts beyond 16 only once proven, a proven bucket's counts kept at its learned start)
    "tokens": (False, False, 16, False, True, False),
    "cost": (True, False, 16, False, True, False),
    "cost, learned start": (True, True, 16, False, True, False),
    "and up to 32 once proven": (True, True, 32, False, True, False),
    "and calibrated": (True, True, 32, True, True, False),
    "and up to 64": (True, True, 64, True, True, False),
    "and unproven too": (True, True, 64, True, False, False),
    "and proven counts kept": (True, True, 64, True, False, True),
}


def every_size(costs: dict, largest: int) -> dict:
    """The curve at every size from 2 to ``largest`` (what ``SpeculativeLlama.calibrate``
    measures), from its measured sizes as the replay reads them (``replay.batch_cost``)."""
    from pyspec.testing.replay import batch_cost

    return {n: batch_cost(costs, n) / batch_cost(costs, 1) for n in range(2, largest + 1)}


def replay_in_row(requests: list, costs: dict, rule: str) -> dict:
    """Each workload's speedups over plain, replaying ``requests`` ((workload, prompt,
    output), in bench_draftless's order) in one row with ``rule``'s controller."""
    import dataclasses

    from pyspec.llama.drafting.adaptive import (
        FREE_DRAFTER,
        UNPROVEN_DRAFT_MAX,
        DraftLengthController,
    )

    in_cost, learned, draft_max, calibrated, proven, keep_counts = RULES[rule]
    controller = DraftLengthController(0, draft_max, watch=dataclasses.replace(FREE_DRAFTER))
    controller.slow_start_in_cost, controller.learn_request_start = in_cost, learned
    controller.unproven_draft_max = UNPROVEN_DRAFT_MAX if proven else None
    controller.keep_proven_counts = keep_counts
    if calibrated:
        controller.use_cost_prior(every_size(costs, draft_max + 1), calibrated=True)
    return replay_row(requests, costs, controller)


def replay_row(
    requests: list,
    costs: dict,
    controller,
    *,
    max_tokens: int | None = MAX_TOKENS,
    token_text="recorded",
    branch=None,
    collect: list | None = None,
) -> dict:
    """Each workload's speedups over plain, replaying ``requests`` in their order in one
    row, as one SpeculativeLlama serves them: ``controller`` and one PromptLookup with its
    memory of earlier requests through all. A request is (workload, prompt, output), or
    with a fourth item, the target's confidence per output token (replay_lookup's).
    ``max_tokens``: what each request asked for (None: read to the recording's end). The
    lookup reads the requests with the recordings' vocabulary, as the loop's reads its
    target's (``token_text`` None: without one, as before session 37). ``branch``: a tree's
    second branch (replay_lookup's); ``collect``: a list that gets each request's
    (workload, ReplayResult)."""
    from _vocabulary import recorded_text

    from pyspec.llama.drafting.lookup import PromptLookup
    from pyspec.llama.drafting.request_memory import RequestMemory
    from pyspec.testing.replay import replay_lookup

    drafter = PromptLookup(token_text=recorded_text() if token_text == "recorded" else token_text)
    drafter.use_memory(RequestMemory())
    speedups: dict = {}
    for workload, prompt, output, *confidence in requests:
        # As a request with max_tokens: no draft past the recording's length (from MAX_TOKENS).
        result = replay_lookup(
            prompt,
            output,
            costs,
            controller=controller,
            drafter=drafter,
            max_tokens=max_tokens,
            confidence=confidence[0] if confidence else None,
            branch=branch,
        )
        speedups.setdefault(workload, []).append(result.speedup)
        if collect is not None:
            collect.append((workload, result))
    return speedups


def _geo(values) -> float:
    return float(np.exp(np.mean(np.log(values))))


def bench_slow_start(benchmark):
    workloads, prompts, outputs = recorded_workloads(N_CHATS)
    requests = [
        (workload, prompt, output)
        for (workload, _), prompt, output in zip(workloads, prompts, outputs)
        if len(output) >= 2  # a request that ended at once has nothing to replay
    ]
    counts = Counter(workload for workload, _, _ in requests)

    def run_all():
        table: dict = {}
        for curve, costs in curves().items():
            for rule in RULES:
                for workload, s in replay_in_row(requests, costs, rule).items():
                    table.setdefault(curve, {}).setdefault(workload, {})[rule] = _geo(s)
        return table

    table = benchmark.pedantic(run_all, rounds=1, iterations=1)
    benchmark.extra_info.update(requests=dict(counts), speedup=table)
    for curve, rows in table.items():
        for workload, s in rows.items():
            print(
                f"\n{curve}, {workload} ({counts[workload]}): "
                + ", ".join(f"slow start {rule} {v:.3f}x" for rule, v in s.items()),
                flush=True,
            )


def measure_curve(largest: int = 65) -> None:
    """This build's batch curve for Qwen 1.5B at every size up to ``largest`` (65: every
    verify pass of up to 64 drafts; medians of 5 interleaved repetitions, in a process of its
    own), written to docs/results/batch-curve-family<F>-model<M>.json. Run it on a quiet
    machine (about 7 minutes on the Zen 4 up to 65)."""
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
            "5",
            "--sizes",
            ",".join(map(str, range(1, largest + 1))),
        ]
    )
    ms = probe["ms_per_batch"]
    costs = {n: v / ms["1"] for n, v in ms.items()}
    cpu = machine_info()["cpu"]
    flags = set(cpu["flags"])
    simd = "AMX" if "amx_int8" in flags else "AVX-512" if "avx512f" in flags else "AVX2"
    family, model = cpu.get("family"), cpu.get("model")
    if family is None or model is None:
        raise SystemExit("no CPU family and model in /proc/cpuinfo: the curve could not be named")
    name = f"{cpu['brand_raw']} (family {family}, model {model}), {simd}"
    where = RESULTS / f"batch-curve-family{family}-model{model}.json"
    record = {"cpu": name, "measured": now_iso(), "ms_per_batch": ms}
    record["costs"] = costs
    where.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{where}: {json.dumps(costs)}")


if __name__ == "__main__" and sys.argv[1:2] == ["--measure"]:
    measure_curve(*(int(a) for a in sys.argv[2:3]))
