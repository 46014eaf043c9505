"""Measures the target's batch-cost curve at every draft length, once per model and setup.

The online cost model (``costs.BatchCosts``) learns a size only from rounds that use it, and
between the sizes it measured it interpolates, held non-decreasing. That misses what the
kernels do: llama.cpp's repacked Q4_K weights on x86 take a batch's tokens in groups of four
through a GEMM kernel and the rest one by one through GEMV (``ggml-cpu/repack.cpp``), and on
a Zen 4 EPYC (2 threads, Qwen2.5-Coder 1.5B) the curve dips at 16, 24 and 32 tokens: 16
cost 7.3x one token, 15 cost 8.2-10.5x and 17 cost 7.7-9.2x (``docs/drafting.md``). Drafts
of 16 and 32, where the slow start and the caps land, verify in batches of 17 and 33, just
past the dips. A curve measured at every size lets the controller draft 15 instead of 16.

The measurement decodes each size from 2 to ``max_size`` over a short context, in
``passes`` interleaved sweeps (a slow moment of the machine then hits every size alike),
and keeps per size the median of its passes relative to the median one-token pass: what a
round of that size will typically cost. Not the fastest pass: on a shared 2-core VM a
size's passes spread by 20% from sweep to sweep (AMD EPYC, Zen 3, session 24), the fastest
of each size is the luckiest moment it happened to meet, and the controller, which drafts
the length whose predicted cost per token is lowest, picks exactly the sizes that were
lucky: a calibration by the fastest of two sweeps there believed 37 and 44 tokens cost
13.9x and 14.9x one token, which live rounds then paid 18-22x for, and 5 tokens 2.8x
(3.3x live), and the lookup drafted 4 tokens a round through copies that passed whole.
Replayed on the recorded chats and edits with a curve measured at every size as the truth,
that calibration cost the edits 15-17% and the chats 1-5%. Of four later sweeps on the same
machine, the fastest of the first two cost the edits 1-3% (a quieter moment), the fastest
of all four 13-24% (the more sweeps, the luckier the fastest), the median of three 1-7% and
of four 1-3% (docs/drafting.md). Three sweeps take 4-5 minutes for sizes up to 65 (the
default draft_max, 64) on the Zen 3 EPYC's 2 cores with a 1.5B model (85-90 s a sweep,
measured), about 100 s on the Zen 4's (1.5x the 70 s its two sweeps took); the shape goes
into the cost cache (``cost_cache.py``), so it is paid once per model file, build, CPU and
thread setup.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Optional

from pyspec.errors import PyspecError
from pyspec.llama.drafting.cost_cache import calibrated_the_old_way

# Any text: the cost of a pass does not depend on which tokens it holds.
TEXT = "The quick brown fox jumps over the lazy dog; def area(r):\n    return 3.14159 * r * r\n"
CONTEXT_TOKENS = 64  # the batches are decoded after this many tokens of context
PASSES = 3  # the median of three: one lucky or slow sweep moves no size past its other two


def measure_shape(
    decoder,
    tokens: list,
    max_size: int,
    *,
    passes: int = PASSES,
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    """n -> cost(n) / cost(1) for n in 2..max_size, measured with ``decoder`` (a
    ``BatchDecoder`` on the target's context, whose cache this empties) after
    CONTEXT_TOKENS of context. ``tokens``: any text's tokens (repeated to fill the context
    and the batches); ``progress`` is called with one line per sweep."""
    if max_size < 2:
        raise ValueError(f"measure_shape needs max_size >= 2, got {max_size}")
    sizes = range(1, max_size + 1)
    times = measure_at_depths(
        decoder, tokens, sizes, [CONTEXT_TOKENS], passes=passes, progress=progress
    )
    return {n: r for n, r in ratios_of(times[CONTEXT_TOKENS]).items() if n >= 2}


def ratios_of(times: dict) -> dict:
    """n -> median(seconds of n) / median(seconds of 1), from one depth's passes (size 1
    must be among them): what a round of each size typically costs against one token."""
    one = statistics.median(times[1])
    return {n: statistics.median(seconds) / one for n, seconds in times.items()}


def measure_at_depths(
    decoder,
    tokens: list,
    sizes,
    depths,
    *,
    passes: int = PASSES,
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    """depth -> n -> the seconds of each pass of a batch of n decoded after ``depth``
    tokens of context (every row kept, as a verify pass keeps them), for every size in
    ``sizes`` (1 among them, the one-token pass the others are read against) and depth in
    ``depths``. Each sweep measures every size at every depth, the sizes in the opposite
    order every other sweep and the depths likewise, so that a load that rises or falls
    during the measurement weighs on every size and depth alike: on a shared 2-core VM a
    batch of 48 measured 17-25x one token within a quarter of an hour (docs/draftless-runs.md),
    so sizes or depths measured one after the other would compare moments, not costs.
    The context grows or is cut to each depth in turn (only the difference is decoded);
    the cache is empty at the end. The caller keeps the deepest depth plus the largest
    size within the context (llama.cpp refuses a decode past it mid-sweep)."""
    sizes, depths = sorted(set(sizes)), sorted(set(depths))
    if passes < 1 or not tokens or not sizes or sizes[0] < 1 or not depths or depths[0] < 1:
        raise ValueError(
            "measure_at_depths needs passes >= 1, some tokens, and sizes and depths of 1 or more"
        )
    if 1 not in sizes:
        raise ValueError("the sizes must include 1, the pass the others are read against")
    if sizes[-1] > decoder.capacity:  # (checked before any pass, not after the first sweeps)
        raise ValueError(
            f"a batch of {sizes[-1]} tokens is more than the decoder's {decoder.capacity}"
        )
    need = depths[-1] + sizes[-1]
    text = (list(tokens) * (need // len(tokens) + 1))[:need]
    times: dict = {d: {n: [] for n in sizes} for d in depths}
    held = 0  # tokens of context the cache holds

    def hold(depth: int) -> None:
        nonlocal held
        if held > depth:
            decoder.remove_from(depth)
            held = depth
        for start in range(held, depth, decoder.capacity):  # n_batch may be below a depth
            decoder.decode(text[start : min(start + decoder.capacity, depth)], start, 1)
        held = depth

    at = f" at {', '.join(map(str, depths))} tokens of context" if len(depths) > 1 else ""

    decoder.remove_from(0)
    try:
        for sweep in range(passes):
            start = time.perf_counter()
            forward = sweep % 2 == 0
            for depth in depths if forward else reversed(depths):
                hold(depth)
                batch = text[depth:]
                for n in sizes if forward else reversed(sizes):
                    t0 = time.perf_counter()
                    decoder.decode(batch[:n], depth, n)  # a verify pass keeps every row
                    times[depth][n].append(time.perf_counter() - t0)
                    decoder.remove_from(depth)
            if progress is not None:
                progress(
                    f"sweep {sweep + 1}/{passes} over batch sizes {sizes[0]}-{sizes[-1]}{at}: "
                    f"{time.perf_counter() - start:.1f} s"
                )
    finally:
        decoder.remove_from(0)
    return times


# ``pyspec generate`` and ``pyspec serve`` call this after loading: when the cost cache has
# no shape measured at every size for this model file, build, CPU and thread setup, the curve
# is measured now and kept, so later starts skip it. ``--no-calibrate`` (serve: the
# ``calibrate`` setting) skips it; with the cost cache off (``PYSPEC_COST_CACHE=off``)
# nothing could keep it, and it is skipped with a line that says so.
def calibrate_once(llm, say: Callable[[str], None], skip: str = "--no-calibrate") -> bool:
    """Calibrates ``llm`` unless there is nothing to gain or keep; True when it measured.
    ``skip``: the caller's option that turns it off, named in the line that says so."""
    spec = getattr(llm, "speculation", None)
    if spec is None or spec.controller.fixed or spec.controller.draft_max < 1:
        return False  # plain decoding, or fixed draft lengths: the curve decides nothing
    costs = spec.controller.costs
    if costs.calibrated_up_to(costs.max_n):  # (a shorter draft_max's shape is measured again)
        return False
    if spec.cost_file is None:
        say(
            "pyspec: not calibrating the batch costs: the cost cache is off "
            "(PYSPEC_COST_CACHE), so the measurement could not be kept"
        )
        return False
    if calibrated_the_old_way(spec.cost_file):
        say(
            "pyspec: the cached batch costs were calibrated by each size's fastest pass, "
            "which believes the luckiest sizes cheap: measuring them again by the median"
        )
    say(
        f"pyspec: measuring this model's batch costs at every draft length up to "
        f"{spec.controller.draft_max} (once for this model, build and setup; "
        f"kept in {spec.cost_file.parent}; {skip} skips it)"
    )
    try:
        shape = llm.calibrate(progress=lambda line: say(f"pyspec:   {line}"))
    except PyspecError as exc:  # a busy machine, a context too small: said, not fatal
        say(f"pyspec: calibration failed ({exc}); the cost model learns the curve online")
        return False
    cheap = ", ".join(str(n - 1) for n in sorted(shape) if n > 2 and shape[n] < shape[n - 1])
    say(
        f"pyspec: calibrated; drafts of {cheap} cost less than one draft fewer"
        if cheap
        else "pyspec: calibrated"
    )
    return True
