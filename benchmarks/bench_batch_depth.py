"""What a verify pass costs after a short and after a long context: the calibration's depth
against the depths real requests decode at.

``SpeculativeLlama.calibrate`` measures the batch curve (cost(n) / cost(1)) after 64 tokens
of context (``calibration.CONTEXT_TOKENS``), while the workloads decode after 91-743 tokens
of prompt and more of output. The cost model reads the shape against the one-token pass it
measures live, at the request's own depth, so what matters is whether the shape itself moves
with the depth. Measured here with the calibration's own routine
(``calibration.measure_at_depths``): Qwen2.5-Coder 1.5B, 2 threads, flash attention on (as in
bench_draftless), the verify sizes of drafts of 1, 4, 8, 16, 32, 48 and 64, at four depths
within each sweep, sizes and depths in the opposite order every other sweep.

Also reported: how far one size's ratio moves from sweep to sweep (each sweep's pass against
the same sweep's one-token pass at the same depth): on a shared 2-core VM this is the drift
the online cost model must follow (a batch of 48 measured 17-25x one token within a quarter
of an hour on the AVX2 Zen 3, session 27), and what a calibration taken at one moment cannot
know.

    pyspec bench batch-depth  # or: pytest benchmarks/bench_batch_depth.py -s
"""

from __future__ import annotations

import statistics

from bench_draftless import THREADS

SIZES = (1, 2, 5, 9, 17, 33, 49, 65)  # one token, then drafts of 1, 4, ..., 64 verified
DEPTHS = (64, 256, 512, 1024)  # the calibration's, then the range the workloads decode at
PASSES = 8


def summarise(times: dict) -> dict:
    """Per depth (as a string, for JSON): the median one-token pass (ms); by verify batch
    size (a draft of n is a batch of n + 1), the median pass over the median one-token pass
    and the range of each sweep's own ratio (each pass against its sweep's one-token pass
    at the same depth); and every pass's seconds, so that any other statistic can be
    computed later."""
    from pyspec.llama.drafting.calibration import ratios_of

    out = {}
    for depth, by_size in times.items():
        ones = by_size[1]
        out[str(depth)] = {
            "one_token_ms": 1000 * statistics.median(ones),
            "ratios_by_batch_size": {str(n): r for n, r in ratios_of(by_size).items() if n > 1},
            "sweep_ratio_range": {
                str(n): _range_of_ratios(seconds, ones) for n, seconds in by_size.items() if n > 1
            },
            "seconds": {str(n): seconds for n, seconds in by_size.items()},
        }
    return out


def _range_of_ratios(seconds: list, ones: list) -> list:
    per_sweep = [s / one for s, one in zip(seconds, ones)]
    return [min(per_sweep), max(per_sweep)]


def bench_batch_depth(benchmark, monkeypatch):
    from pyspec.llama import SpeculativeLlama
    from pyspec.llama.drafting.calibration import TEXT, measure_at_depths
    from pyspec.testing.models import ensure_model

    monkeypatch.setenv("PYSPEC_COST_CACHE", "off")
    target = str(ensure_model("qwen2.5-coder-1.5b"))
    llm = SpeculativeLlama(
        target, draft="lookup", n_ctx=2048, n_threads=THREADS, verbose=False, flash_attn=True
    )
    tokens = llm.tokenize(TEXT.encode(), add_bos=False)

    def run_all():
        return measure_at_depths(
            llm.speculation.decoder, tokens, SIZES, DEPTHS, passes=PASSES, progress=print
        )

    try:
        times = benchmark.pedantic(run_all, rounds=1, iterations=1)
    finally:
        llm.close()
    summary = summarise(times)
    benchmark.extra_info.update(
        model="qwen2.5-coder-1.5b", threads=THREADS, passes=PASSES, depths=summary
    )
    for depth, row in summary.items():
        print(
            f"\nafter {depth} tokens: one token {row['one_token_ms']:.1f} ms; "
            + ", ".join(f"{n}: {r:.2f}x" for n, r in row["ratios_by_batch_size"].items()),
            flush=True,
        )
