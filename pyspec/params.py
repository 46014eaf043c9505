"""Sampling parameters, with llama.cpp's meaning and chain order."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pyspec._native.abi import MAX_PENALTY, MAX_PENALTY_WINDOW, Status
from pyspec.errors import InvalidInputError


def _short(x: float) -> str:
    """1e6 -> "1e6", 1e-6 -> "1e-6": the bounds as the docs write them."""
    return f"{x:g}".replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")


_PENALTY_RANGE = f"[{_short(1 / MAX_PENALTY)}, {_short(MAX_PENALTY)}]"
_SIGNED_PENALTY_RANGE = f"[-{_short(MAX_PENALTY)}, {_short(MAX_PENALTY)}]"


@dataclass(frozen=True)
class SamplingParams:
    """How each verify row is turned into a distribution, as llama-cpp-python's chain does.

    The transforms run in llama.cpp's order: top-k, then top-p (normalised over the top-k
    survivors), then min-p (relative to the maximum), all on the untempered logits; then
    temperature; then the draw.

    Parameters
    ----------
    temperature : float
        ``<= 0`` means greedy (argmax, ties to the lowest token id). Must be finite.
    top_k : int
        Keep the ``top_k`` largest logits; ``<= 0`` (or ``>= n_vocab``) turns it off.
    top_p : float
        Nucleus mass in ``(0, 1]``; ``1`` turns it off.
    min_p : float
        Keep tokens whose probability is at least ``min_p`` times the top one; ``<= 0`` turns
        it off; must be ``<= 1``.
    seed : int
        Key of every random draw, in ``[0, 2**64)``. A draw depends only on
        (seed, absolute position, purpose).
    repeat_penalty, frequency_penalty, presence_penalty : float
        llama.cpp's penalties, applied first: a token seen c > 0 times in the last
        ``penalty_last_n`` tokens of the history (``penalty_history=`` of each call, then the
        row's preceding drafts) gets ``logit * repeat`` if ``logit <= 0`` else
        ``logit / repeat``, minus ``c * frequency + presence``. Off at (1, 0, 0).
        ``repeat`` must lie in [1e-6, 1e6], the other two in [-1e6, 1e6], which keeps the
        arithmetic finite; a penalised logit that still overflows float32 (a logit near
        3.4e38) saturates at +-3.4e38, so a row never turns NaN and a masked (-inf) token
        stays masked.
    penalty_last_n : int
        Window length (llama-cpp-python's ``last_n_tokens_size``, 64); 0 turns penalties
        off, -1 uses the whole history.
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = 0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64

    def __post_init__(self):
        def bad(name, why):
            raise InvalidInputError(
                f"SamplingParams.{name} {why}, got {getattr(self, name)!r}", Status.PARAM
            )

        # numpy scalars are numbers too (np.int64(40) from an array, np.float32(0.9)): store
        # them as Python ints and floats.
        for name in ("top_k", "seed", "penalty_last_n"):
            value = getattr(self, name)
            if isinstance(value, np.integer):
                object.__setattr__(self, name, int(value))
        for name in (
            "temperature",
            "top_p",
            "min_p",
            "repeat_penalty",
            "frequency_penalty",
            "presence_penalty",
        ):
            value = getattr(self, name)
            if isinstance(value, (np.floating, np.integer)):
                object.__setattr__(self, name, float(value))
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                bad(name, "must be a number")
        if not math.isfinite(self.temperature):
            bad("temperature", "must be finite (<= 0 means greedy)")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int):
            bad("top_k", "must be an int (<= 0 turns top-k off)")
        if not (-(2**31) <= self.top_k < 2**31):
            bad("top_k", "must fit in 32 bits")
        if not (0.0 < self.top_p <= 1.0):
            bad("top_p", "must be in (0, 1] (1 turns top-p off)")
        if math.isnan(self.min_p) or self.min_p > 1.0:
            bad("min_p", "must be <= 1 (<= 0 turns min-p off)")
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int)
            or not 0 <= self.seed < 2**64
        ):
            bad("seed", "must be an int in [0, 2**64)")
        # Bounds that keep the penalty arithmetic finite in float32 (the C library checks the
        # same; a penalised logit that still overflows saturates at +-FLT_MAX).
        if not (1.0 / MAX_PENALTY <= self.repeat_penalty <= MAX_PENALTY):
            bad("repeat_penalty", f"must be in {_PENALTY_RANGE} (1 turns it off)")
        for name in ("frequency_penalty", "presence_penalty"):
            if not abs(getattr(self, name)) <= MAX_PENALTY:
                bad(name, f"must be in {_SIGNED_PENALTY_RANGE} (0 turns it off)")
        if (
            isinstance(self.penalty_last_n, bool)
            or not isinstance(self.penalty_last_n, int)
            or not -1 <= self.penalty_last_n <= MAX_PENALTY_WINDOW
        ):
            bad(
                "penalty_last_n",
                f"must be an int in [-1, {MAX_PENALTY_WINDOW}] (0: off, -1: whole history)",
            )

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def penalties_on(self) -> bool:
        return self.penalty_last_n != 0 and (
            self.repeat_penalty != 1.0
            or self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
        )

    @classmethod
    def greedy_params(cls, seed: int = 0) -> "SamplingParams":
        """Greedy decoding (the transforms do not matter for an argmax)."""
        return cls(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed)

    def fill(self, c_params, history=None, n_history: int = 0) -> None:
        """Writes these parameters into a ``pyspec_sampling_params`` cdata; ``history`` is an
        int32 cdata array of the penalty history (kept alive by the caller)."""
        c_params.temperature = self.temperature
        c_params.top_k = self.top_k
        c_params.top_p = self.top_p
        c_params.min_p = self.min_p
        c_params.seed = self.seed
        c_params.penalty_last_n = self.penalty_last_n
        c_params.penalty_repeat = self.repeat_penalty
        c_params.penalty_freq = self.frequency_penalty
        c_params.penalty_present = self.presence_penalty
        if history is not None and n_history:
            c_params.penalty_history = history
            c_params.n_penalty_history = n_history
