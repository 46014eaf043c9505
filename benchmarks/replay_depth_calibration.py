"""Would a calibration at each request's depth decide better than one at 64 tokens?

``calibration.measure_shape`` measures the batch curve after 64 tokens of context, while
bench_draftless's requests decode after 91-743 tokens of prompt, where long batches cost
more relative to one token (``docs/results/batch-depth.json``: on the AMX Xeon, 49 tokens
6.77x one token at 64 and 8.39x at 1024). This replays the loop on the recorded requests
(``_recordings.recorded_workloads``, in bench_draftless's order, one controller and
one lookup with its memory through all, as ``bench_slow_start.replay_row``) with each
request's true costs the curve at its depth (the prompt plus half the output, the curve
interpolated linearly between the measured depths and sizes), once starting from the
curve at 64 (today's calibration) and once from the curve at the request's own depth (a
calibration that followed the depth perfectly). Also at twice each depth, to see longer
conversations. Cost units: the same on any machine.

    python benchmarks/replay_depth_calibration.py [path/to/batch-depth.json]
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
N_CHATS = 24
DRAFT_MAX = 64


def depth_curves(path: Path):
    """(depth -> {n: cost over one token}) read from a bench_batch_depth JSON."""
    info = json.loads(path.read_text())["benchmarks"][0]["extra_info"]["depths"]
    return {
        int(d): {1: 1.0, **{int(n): r for n, r in row["ratios_by_batch_size"].items()}}
        for d, row in info.items()
    }


def curve_at(curves: dict, depth: float) -> dict:
    """The curve at ``depth``: each size's ratio interpolated between the measured depths
    (held beyond them)."""
    depths = sorted(curves)
    sizes = sorted(curves[depths[0]])
    return {n: float(np.interp(depth, depths, [curves[d][n] for d in depths])) for n in sizes}


def replay(requests: list, curves: dict, follow_depth: bool, depth_scale: float) -> dict:
    from bench_draftless import MAX_TOKENS
    from bench_slow_start import every_size

    from pyspec.llama.drafting.adaptive import FREE_DRAFTER, DraftLengthController
    from pyspec.llama.drafting.lookup import PromptLookup
    from pyspec.llama.drafting.request_memory import RequestMemory
    from pyspec.testing.replay import replay_lookup

    controller = DraftLengthController(0, DRAFT_MAX, watch=dataclasses.replace(FREE_DRAFTER))
    controller.use_cost_prior(every_size(curve_at(curves, 64), DRAFT_MAX + 1), calibrated=True)
    drafter = PromptLookup()
    drafter.use_memory(RequestMemory())
    speedups: dict = {}
    for workload, prompt, output in requests:
        truth = curve_at(curves, depth_scale * (len(prompt) + len(output) / 2))
        if follow_depth:
            controller.use_cost_prior(every_size(truth, DRAFT_MAX + 1), calibrated=True)
        result = replay_lookup(
            prompt, output, truth, controller=controller, drafter=drafter, max_tokens=MAX_TOKENS
        )
        speedups.setdefault(workload, []).append(result.speedup)
    return speedups


def main(argv: list) -> None:
    from _recordings import recorded_workloads

    path = Path(argv[0]) if argv else HERE.parent / "docs" / "results" / "batch-depth.json"
    curves = depth_curves(path)
    workloads, prompts, outputs = recorded_workloads(N_CHATS)
    requests = [
        (workload, prompt, output)
        for (workload, _), prompt, output in zip(workloads, prompts, outputs)
        if len(output) >= 2
    ]
    print(f"curves: {path} (depths {sorted(curves)}); {len(requests)} requests")

    def geo(values) -> float:
        return float(np.exp(np.mean(np.log(values))))

    for scale in (1.0, 2.0):
        at_64 = replay(requests, curves, follow_depth=False, depth_scale=scale)
        at_depth = replay(requests, curves, follow_depth=True, depth_scale=scale)
        for workload in at_64:
            before, after = geo(at_64[workload]), geo(at_depth[workload])
            per_request = np.array(at_depth[workload]) / np.array(at_64[workload])
            print(
                f"depths x{scale:g}, {workload} ({len(per_request)}): calibrated at 64 "
                f"{before:.3f}x plain, at each request's depth {after:.3f}x "
                f"({after / before:.3f}; per request {per_request.min():.3f}-"
                f"{per_request.max():.3f})",
                flush=True,
            )


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main(sys.argv[1:])
