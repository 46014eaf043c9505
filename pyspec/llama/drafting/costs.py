"""The target's forward cost per batch size, learned online from the rounds the loop runs.

No throw-away calibration batches: every round's decode is timed anyway, and that is all the
model learns from. What it believes about a batch of n tokens:

    target(n) = c1 * (1 + s * (prior(n) - 1)) * correction(n)

- ``c1``, the cost of one token: the median of the last ``WINDOW_ONE`` one-token passes
  (plain rounds). A median, because a busy machine gives outliers (a descheduled pass can
  take 50x the others); a window, so a change of load is followed within tens of rounds.
- ``prior(n)``, the shape of the batch curve relative to one token: from the cost cache of an
  earlier process (validated; see ``validate_ratios``), else ``default_prior``: a monotone,
  concave curve, shrunk toward "a batch of n costs n tokens" (what batching cannot beat) so
  that it errs on the pessimistic side, yet optimistic enough that a drafter whose drafts
  pass is tried, which measures the real curve. It was fitted on Qwen2.5-Coder 1.5B and
  Gemma 3 270M on 2 cores (2 tokens: 1.7-2.0x one token, 9: 4.8-4.9x, 17: 6.0-6.4x); the
  prior says 2.0x, 4.7x and 6.8x (the constants were chosen by replaying the recorded
  generations of tests/data, ``pyspec.testing.replay``).
- ``s``, how dear batching is here against that shape, pooled over every measured size
  (``_scale``): builds differ mostly by this one number (on one Xeon, AMX builds batch at
  0.2-0.4 of the default prior's extra cost, the others at 0.4-0.6), and a size's passes
  then tell about the sizes not measured yet. Without it a chat, whose few verify rounds
  each measure one size, kept believing the prior's costs for the rest.
- ``correction(n)``: at each measured size, median(measured) / (c1 * scaled prior) over its last
  ``WINDOW`` passes, shrunk toward 1 in log space by a weight that grows with the number of
  passes and, where the size measured dearer than the prior, fades with their age
  (``STALE_ROUNDS``), so an old measurement taken under a load that has passed is not trusted
  for good: the size drifts back to the prior and is tried again (a size measured cheaper is
  re-measured by every round that uses it, so it keeps its weight). Between measured sizes
  the log-correction is interpolated; beyond them it is held.

A batch can cost less than a smaller one: llama.cpp's repacked Q4_K kernels on x86 take a
batch's tokens in groups of four and the rest one by one, and on a Zen 4 EPYC 16 tokens
cost 7.3x one token, 15 cost 8.2-10.5x (``docs/drafting.md``). A shape measured at every size
(``calibration.py``, kept in the cost cache) keeps such dips, and the controller then drafts
15 rather than 16; with any other prior, whose sizes in between are guesses, the curve is
made non-decreasing in n. Nothing here reads a clock: tests inject timings (noisy,
shifting) deterministically.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from numbers import Integral, Real
from typing import Optional

import numpy as np

WINDOW = 9  # passes kept per batch size n >= 2
WINDOW_ONE = 15  # one-token passes kept (plain rounds are frequent)
STALE_ROUNDS = 300  # a size's weight halves every this many rounds without a pass of it
MAX_SIZE = 4096
SCALE_PSEUDO = 1.0  # passes' worth of belief in the prior's own scale (BatchCosts._scale)
MIN_EXTRA = 0.02  # a batch costs at least this much over one token (noise can say less)
MAX_DIP = 2.0  # a shape may have a batch cost down to 1/MAX_DIP of a smaller one
# The least a batch of 2 or more may cost over one token in a shape measured at every size by
# calibrate() (calibration.py); a shape pieced together from live passes keeps
# LIVE_MIN_RATIO (a one-token pass timed under a passing load made them look cheap). Below 1 is
# real: llama.cpp's AMX
# kernels take a batch of 2 or more in AMX tiles, and one token through an AVX-512 VNNI
# path, which on one thread is the slower: on the AMX Xeon (family 6, model 167, one thread)
# a batch of 2 measured 0.72x one token for Qwen2.5-Coder 0.5B and 0.77x for Gemma 3 270M,
# 4 tokens 0.83-0.90x (session 49; the 1.5B: 1.04x). Half a token is not: a one-token pass
# timed under a load that then went.
MIN_RATIO = 0.5
LIVE_MIN_RATIO = 0.8


def default_prior(n: int) -> float:
    """Cost of a batch of n relative to one token, before anything about this model and
    machine is known: the concave curve 1 + (n - 1)^0.6, shrunk by 5% toward n."""
    if n <= 1:
        return 1.0
    return 0.95 * (1.0 + (n - 1) ** 0.6) + 0.05 * n


def every_size_from_2(ratios: dict) -> bool:
    """Whether a shape holds every batch size from 2 to its largest (a calibration's)."""
    return bool(ratios) and set(ratios) >= set(range(2, max(ratios) + 1))


def ratios_from(shape) -> tuple:
    """(sizes >= 2 -> float cost, '') from a mapping of batch sizes (ints, or digit strings
    as JSON gives them back) to costs over one token, or ({}, why it is not one)."""
    if not isinstance(shape, Mapping):
        kind = type(shape).__name__
        return {}, f"the shape must map batch sizes to costs over one token, not a {kind}"
    ratios: dict = {}
    for n, r in shape.items():
        if isinstance(n, str) and n.isdigit():
            n = int(n)
        if isinstance(n, bool) or not isinstance(n, Integral):
            return {}, f"batch size {n!r} is not a whole number"
        if isinstance(r, bool) or not isinstance(r, Real):
            return {}, f"batch size {n}: cost {r!r} is not a number"
        if int(n) in ratios:
            return {}, f"batch size {n} is given twice"
        if n != 1:  # (one token over itself)
            ratios[int(n)] = float(r)
    return ratios, ""


def validate_ratios(ratios: dict, calibrated: bool = False) -> str:
    """Why a batch-cost shape (n -> cost(n) / cost(1)) is implausible ('' when it is fine):
    sizes in [2, MAX_SIZE], finite, at least MIN_RATIO of one token (``calibrated``: measured at
    every size by calibrate(); LIVE_MIN_RATIO otherwise) and at most about n tokens
    (a batch of n that costs 50x one token was measured under load, not by batching), and
    no batch below half of a smaller one (kernels dip, by 30% at 16 tokens on a Zen 4; a
    shape that dips further was measured while a load came and went)."""
    if not ratios:
        return "no batch sizes"
    floor = MIN_RATIO if calibrated else LIVE_MIN_RATIO
    for n, r in ratios.items():
        if not isinstance(n, int) or not 2 <= n <= MAX_SIZE:
            return f"batch size {n!r} outside [2, {MAX_SIZE}]"
        if not isinstance(r, (int, float)) or not math.isfinite(r):
            return f"batch size {n}: cost {r!r} is not a finite number"
        if not floor <= r <= 1.5 * n + 1:
            return (
                f"batch size {n} costs {r:.3g}x one token, outside [{floor:g}, "
                f"{1.5 * n + 1:g}] (measured under load?)"
            )
    dearest = 0.0
    for n in sorted(ratios):
        if ratios[n] < dearest / MAX_DIP:
            return (
                f"batch size {n} costs {ratios[n]:.3g}x one token, less than half of a "
                f"smaller batch ({dearest:.3g}x)"
            )
        dearest = max(dearest, ratios[n])
    return ""


class BatchCosts:
    """What the target's forward pass costs per batch size (seconds), learned online."""

    def __init__(self, max_n: int = 65):
        self.max_n = max_n
        self._passes: dict = {}  # n -> deque of seconds
        self._last_seen: dict = {}  # n -> round index of its last pass
        self._round = 0
        self._prior_ratios: Optional[dict] = None  # from the cost cache (validated)
        self.prior_source = "default"
        self.calibrated = False  # the prior was measured at every size (calibration.py)
        self._curve: Optional[np.ndarray] = None  # seconds for n = 0..max_n, rebuilt lazily
        self._scale_now = 1.0  # _scale as of the last _build (predict builds first)
        # Kept until a pass or a new prior changes them: the loop asks for these many times a
        # round, and rebuilding the curve after every pass (the prior interpolated at each
        # size up to max_n one by one, a median per call) was most of what the loop spent
        # outside the target's decode (in a replay, 0.5 of its 0.66 ms a round).
        self._prior_curve: Optional[np.ndarray] = None  # prior(n) for n = 0..max_n
        self._medians: dict = {}  # n -> median of its window

    # ---- inputs -------------------------------------------------------------------------
    def observe(self, n: int, seconds: float) -> None:
        """One timed forward pass over n tokens. Non-finite or non-positive times are dropped."""
        if n < 1 or not (seconds > 0 and math.isfinite(seconds)):
            return
        self._round += 1
        window = self._passes.get(n)
        if window is None:
            window = self._passes[n] = deque(maxlen=WINDOW_ONE if n == 1 else WINDOW)
        window.append(float(seconds))
        self._last_seen[n] = self._round
        self._medians.pop(n, None)
        self._curve = None
        if n > 1 and self._prior_ratios is not None and n in self._prior_ratios:
            self._check_prior_against(n)

    def use_prior(self, ratios: dict, source: str = "cache", calibrated: bool = False) -> None:
        """A batch-cost shape (n -> cost(n) / cost(1)) to start from instead of the default;
        call ``validate_ratios`` first. Live measurements override it. ``calibrated``: it
        was measured at every size up to its largest, so its dips are real."""
        self._prior_ratios = {int(n): float(r) for n, r in ratios.items() if int(n) >= 2}
        self.prior_source = source
        self.calibrated = calibrated and every_size_from_2(self._prior_ratios)
        self._prior_curve = None
        self._curve = None

    def calibrated_up_to(self, n: int) -> bool:
        """Whether the prior was measured at every size from 2 to n (``calibration.py``)."""
        return self.calibrated and max(self._prior_ratios or {0: 0}) >= n

    @property
    def has_prior(self) -> bool:
        """Whether a shape measured on this machine is the prior (not the default curve)."""
        return bool(self._prior_ratios)

    def prior_shape(self) -> dict:
        """The prior shape in use (n -> cost(n) / cost(1)); empty with the default curve."""
        return dict(self._prior_ratios or {})

    def _check_prior_against(self, n: int) -> None:
        """The cached shape must agree with the first real passes of a size within 2x, or it
        is dropped (a cache written on another machine, or under a load since gone)."""
        c1 = self.per_token()
        window = self._passes[n]
        if c1 is None or len(window) < 3:
            return
        measured = self._median(n) / c1
        cached = self._prior_ratios[n]
        if not 0.5 <= measured / cached <= 2.0:
            self.prior_source = (
                f"default (the cached shape said {cached:.2f}x for {n} tokens, "
                f"live passes {measured:.2f}x)"
            )
            self._prior_ratios = None
            self.calibrated = False
            self._prior_curve = None
            self._curve = None

    # ---- beliefs ------------------------------------------------------------------------
    def _median(self, n: int) -> float:
        """The median of size n's window (which must hold a pass), kept until its next pass."""
        median = self._medians.get(n)
        if median is None:
            median = self._medians[n] = float(np.median(self._passes[n]))
        return median

    def per_token(self) -> Optional[float]:
        return self._median(1) if self._passes.get(1) else None

    def prior(self, n: int) -> float:
        if isinstance(n, (int, np.integer)) and 0 <= n <= self.max_n:
            return float(self._prior_array()[n])
        return self._prior_at(n)

    def _prior_array(self) -> np.ndarray:
        """prior(n) for n = 0..max_n, computed once per prior."""
        if self._prior_curve is None:
            self._prior_curve = np.array([self._prior_at(m) for m in range(self.max_n + 1)])
        return self._prior_curve

    def _prior_at(self, n: int) -> float:
        ratios = self._prior_ratios
        if not ratios or n <= 1:
            return default_prior(n)
        xs = sorted(ratios)
        if n < xs[0]:  # between one token and the smallest cached size
            return float(np.interp(n, [1, xs[0]], [1.0, ratios[xs[0]]]))
        if n > xs[-1]:  # beyond: the default curve's growth from there
            return ratios[xs[-1]] * default_prior(n) / default_prior(xs[-1])
        return float(np.interp(n, xs, [ratios[x] for x in xs]))

    def weight(self, n: int, dearer: bool = True) -> float:
        """How much size n's own passes count against the prior (0..1). Only a size measured
        dearer than the prior ages: the controller then avoids it, so nothing would measure
        it again, and a pass slowed by a load that has passed must not keep it avoided for
        good. A size measured cheaper is chosen whenever its drafts justify it, and each
        such pass re-measures it; aging it would let the sparse verify rounds of a chat
        (a few per hundred tokens) drift back to the pessimistic prior between two uses."""
        window = self._passes.get(n)
        if not window:
            return 0.0
        trust = len(window) / (len(window) + 1.0)
        if not dearer:
            return trust
        age = self._round - self._last_seen[n]
        return trust * 0.5 ** (age / STALE_ROUNDS)

    def _scale(self, c1: float, sizes: list) -> float:
        """How dear batching is here against the prior, pooled over every measured size: the
        s in cost(n) = c1 * (1 + s * (prior(n) - 1)), a weighted geometric mean of each size's
        own s, shrunk toward 1 by a pseudo-pass (``SCALE_PSEUDO``), at most 1. One number
        learned from every size at once: a pass of 3 tokens says how dear 5 and 9 are too
        (builds differ mostly by it: AMX batches at s = 0.2-0.4 of the prior's extra cost,
        the others at 0.4-0.6 on the same Xeon, an older 2-core machine at about 1)."""
        # Never above 1: a dear pass (a descheduled one, often) spread over every size would
        # keep the controller off all of them, and nothing would measure them again; a dear
        # size is held to its own correction instead, which ages (``weight``).
        total = weights = 0.0
        for n in sizes:
            prior_extra = self.prior(n) - 1.0
            if prior_extra < MIN_EXTRA:  # a cached shape may say a batch costs one token
                continue
            extra = max(self._median(n) / c1 - 1.0, MIN_EXTRA)
            log_s = math.log(extra / prior_extra)
            w = self.weight(n, dearer=log_s > 0)
            total += w * log_s
            weights += w
        return math.exp(min(total / (weights + SCALE_PSEUDO), 0.0))

    def _scaled_prior(self, n: int) -> float:
        """The prior's shape with its extra cost over one token scaled as measured here (the
        scale of the last ``_build``)."""
        return 1.0 + self._scale_now * (self.prior(n) - 1.0)

    def _build(self) -> np.ndarray:
        c1 = self.per_token()
        if c1 is None:  # nothing measured yet: unit-free (only ratios matter then)
            c1 = 1.0
        sizes = [n for n in sorted(self._passes) if n >= 2 and n <= self.max_n]
        self._scale_now = self._scale(c1, sizes)
        shape = 1.0 + self._scale_now * (self._prior_array() - 1.0)  # _scaled_prior at every n
        raw = [math.log(self._median(n) / (c1 * shape[n])) for n in sizes]
        logc = [self.weight(n, dearer=r > 0) * r for n, r in zip(sizes, raw)]
        ns = np.arange(self.max_n + 1)
        corr = np.interp(ns, sizes, logc) if sizes else np.zeros(len(ns))
        curve = c1 * shape * np.exp(corr)
        curve[0], curve[1] = 0.0, c1
        # Sizes in between measured ones are guesses: never a dip there. A calibrated prior
        # was measured at every size up to its largest; beyond that it is a guess too.
        guessed_from = max(self._prior_ratios) if self.calibrated else 1
        curve[guessed_from:] = np.maximum.accumulate(curve[guessed_from:])
        return curve

    def predict(self, n: int) -> float:
        """Seconds for a forward pass over n tokens, as believed now."""
        if self._curve is None:
            self._curve = self._build()
        if n <= self.max_n:
            return float(self._curve[n])
        return float(self._curve[-1] * self._scaled_prior(n) / self._scaled_prior(self.max_n))

    def measured_ratios(self, min_passes: int = 3) -> dict:
        """n -> median cost / c1 for sizes with at least ``min_passes`` passes (what the cost
        cache keeps: the shape, which does not depend on the load of the moment)."""
        c1 = self.per_token()
        if c1 is None or len(self._passes.get(1, ())) < min_passes:
            return {}
        return {
            n: self._median(n) / c1
            for n, w in sorted(self._passes.items())
            if n >= 2 and len(w) >= min_passes
        }

    def shape_to_save(self) -> dict:
        """What the cost cache should keep: the trusted prior shape (if any) updated with the
        sizes measured often enough here; nothing over a calibrated shape. A calibration
        measures every size in interleaved sweeps, at one depth and one moment; live
        medians come from other depths and other loads (a batch of 48 measured 17-25x one
        token within a quarter hour, docs/draftless-runs.md), and merged into it they left sizes
        that no sweep measured beside their neighbours, dips the cost model then believed
        in every later process. Live passes correct a calibrated shape in this process only;
        ``calibrate(force=True)`` measures it anew."""
        if self.calibrated:
            return {}
        shape = dict(self._prior_ratios or {})
        shape.update(self.measured_ratios())
        return shape if not validate_ratios(shape) else {}

    def describe(self, sizes=(2, 5, 9, 17)) -> str:
        c1 = self.per_token()
        if c1 is None:
            return "per-token cost not measured yet"
        parts = []
        for n in sizes:
            if n > self.max_n:
                continue
            w = self.weight(n, dearer=False)
            tag = f"measured x{len(self._passes[n])}" if w > 0.05 else "prior"
            parts.append(f"{n}: {self.predict(n) / c1:.2f}x ({tag})")
        batches = f"; batch {', '.join(parts)}" if parts else ""  # (none: draft_max 0)
        return (
            f"one token {1000 * c1:.1f} ms (median of {len(self._passes[1])}){batches}"
            f"; prior shape: {self.prior_source}"
        )
