"""pyspec's replayed policy beside llama.cpp's ngram-simple mode, in cost units.

Per request of bench_draftless's workloads (the ShareGPT chats and the 5 code edits, 96
tokens, greedy and sampled at 0.8, recorded once and cached by bench_confidence_rules), in
bench_draftless's order, on every batch curve the repository holds (bench_slow_start.curves):

- pyspec: the loop replayed as it runs by default (``bench_policy_ceiling.DEFAULT_RULES``,
  the lookup with its memory, one controller through the order);
- ngram-simple: llama.cpp's ``--spec-type ngram-simple`` at its defaults, replayed
  (``pyspec.testing.cpp_ngram``: drafts of up to 48 after a 12-token match, all verified).

The ratio of the two, per workload by the geometric mean over its requests, is what a live
run (bench_draftless) measures against that mode with the noise of a shared machine and the
loops' own costs left out: both are priced by the same curve. ngram-simple led the C++ modes
on the chats in every live run; on the edits ngram-map-k or -k4v did, which this replay does
not model.

    pyspec bench peer-replay   # or: pytest benchmarks/bench_peer_replay.py -s
"""

from __future__ import annotations

import numpy as np
from bench_confidence_rules import all_recordings, orders, replay_in_order
from bench_draftless import MAX_TOKENS
from bench_policy_ceiling import DEFAULT_RULES
from bench_slow_start import _geo, curves


def _row(pyspec: np.ndarray, replays: list) -> dict:
    """One workload's speedups: pyspec's replayed policy's and ngram-simple's per request."""
    peer = np.array([r.speedup for r in replays])
    ratios = pyspec / peer
    drafted = sum(r.drafted for r in replays)
    accepted = sum(r.accepted for r in replays)
    return dict(
        requests=len(ratios),
        pyspec=_geo(pyspec),
        ngram_simple=_geo(peer),
        pyspec_over_ngram_simple=_geo(ratios),
        worst=float(ratios.min()),
        best=float(ratios.max()),
        ngram_simple_acceptance=accepted / drafted if drafted else 0.0,
    )


def bench_peer_replay(benchmark):
    from pyspec.testing.cpp_ngram import replay_ngram_simple

    recordings = all_recordings()

    def run_all():
        table: dict = {}
        for recording, requests in recordings.items():
            order = orders(requests)["bench"]
            for curve, costs in curves().items():
                policy = replay_in_order(order, costs, DEFAULT_RULES)
                peer: dict = {}
                for workload, prompt, output, _ in order:
                    peer.setdefault(workload, []).append(
                        replay_ngram_simple(prompt, output, costs, max_tokens=MAX_TOKENS)
                    )
                for workload, replays in peer.items():
                    table.setdefault(recording, {}).setdefault(curve, {})[workload] = _row(
                        np.array(policy[workload]), replays
                    )
        return table

    table = benchmark.pedantic(run_all, rounds=1, iterations=1)
    benchmark.extra_info.update(order="bench", rules=DEFAULT_RULES, speedup=table)
    for recording, by_curve in table.items():
        for curve, rows in by_curve.items():
            for workload, v in rows.items():
                print(
                    f"\n{recording}, {curve}, {workload} ({v['requests']}): pyspec "
                    f"{v['pyspec']:.3f}x plain, ngram-simple {v['ngram_simple']:.3f}x "
                    f"(accepted {v['ngram_simple_acceptance']:.0%}); pyspec/ngram-simple "
                    f"{v['pyspec_over_ngram_simple']:.3f} (requests {v['worst']:.3f}-"
                    f"{v['best']:.3f})",
                    flush=True,
                )
