"""One verify round on the host path against the same round in llama.cpp's graph, timed in
alternating pairs: what ``benchmarks/bench_graph_sampling.py`` reports on this machine and
``benchmarks/device/graph_checks.py`` on a device machine.

The host round decodes k + 1 rows and verifies them in place (``verify_from_pointer``); the
graph round decodes with pyspec's sampler attached and reads one token per row. Each is
timed whole (decode to tokens in Python) and after the decode call returns.
"""

from __future__ import annotations

import statistics
import time

from pyspec.llama.graph.sampling import GraphSampler
from pyspec.verifier import verify_from_pointer


def host_round(llm, batch, n_past, params) -> tuple:
    """(seconds for the round, seconds after the decode call) of one host round."""
    dec = llm.speculation.decoder
    dec.remove_from(n_past)
    t0 = time.perf_counter()
    addr = dec.decode(batch, n_past, len(batch))
    t1 = time.perf_counter()
    verify_from_pointer(addr, llm.n_vocab(), batch[1:], params=params, position=n_past + 1)
    return time.perf_counter() - t0, time.perf_counter() - t1


def graph_round(llm, sampler: GraphSampler, batch, n_past) -> tuple:
    """The same for a round sampled in the graph by ``sampler``."""
    dec = llm.speculation.decoder
    dec.remove_from(n_past)
    t0 = time.perf_counter()
    sampler.set_position(n_past + 1)
    dec.decode_sampled(batch, n_past, len(batch))
    t1 = time.perf_counter()
    sampler.read(0, len(batch))
    return time.perf_counter() - t0, time.perf_counter() - t1


def paired_rounds(llm, batch, n_past, params, pairs: int) -> dict:
    """``pairs`` host rounds alternating with graph rounds over ``batch`` at ``n_past`` (the
    cache must hold the tokens before it); medians in ms and the graph / host ratio. Each
    graph round gets a fresh sampler whose first decode (it builds and reserves the graph)
    is not timed."""
    host, graph = [], []
    for _ in range(pairs):
        host.append(host_round(llm, batch, n_past, params))
        sampler = GraphSampler(llm.ctx, params, max_rows=len(batch))
        try:
            graph_round(llm, sampler, batch, n_past)
            graph.append(graph_round(llm, sampler, batch, n_past))
        finally:
            sampler.detach()
    med = {
        side: (
            statistics.median(r for r, _ in runs) * 1e3,
            statistics.median(a for _, a in runs) * 1e3,
        )
        for side, runs in (("host", host), ("graph", graph))
    }
    return {
        "host_round_ms": med["host"][0],
        "host_after_decode_ms": med["host"][1],
        "graph_round_ms": med["graph"][0],
        "graph_after_decode_ms": med["graph"][1],
        "round_ratio": med["graph"][0] / med["host"][0],
    }
