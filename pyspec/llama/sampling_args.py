"""llama-cpp-python's sampling arguments, as pyspec's verifier takes them: the ones it verifies
exactly become ``SamplingParams``; the ones it cannot honour yet send the request to
llama-cpp-python's own loop (``fallback_reason``), never to a changed distribution.
"""

from __future__ import annotations

from pyspec._native.abi import MAX_PENALTY_WINDOW
from pyspec.params import SamplingParams


def sampling_params_for(
    temp: float,
    top_k: int,
    top_p: float,
    min_p: float,
    seed: int,
    *,
    repeat_penalty: float = 1.0,
    frequency_penalty: float = 0.0,
    presence_penalty: float = 0.0,
    penalty_last_n: int = 64,
) -> SamplingParams:
    """llama-cpp-python's sampling arguments as pyspec SamplingParams (same chain:
    penalties first, then greedy, or top-k, top-p, min-p, temperature)."""
    seed %= 2**64
    penalties = dict(
        repeat_penalty=float(repeat_penalty),
        frequency_penalty=float(frequency_penalty),
        presence_penalty=float(presence_penalty),
        penalty_last_n=max(0, min(int(penalty_last_n), MAX_PENALTY_WINDOW)),
    )
    if temp == 0.0:
        return SamplingParams(
            temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed, **penalties
        )
    if temp < 0.0:  # llama-cpp-python: a draw from the raw softmax, no transforms
        return SamplingParams(
            temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed, **penalties
        )
    return SamplingParams(
        temperature=float(temp),
        top_k=int(top_k),
        top_p=min(max(float(top_p), 1e-9), 1.0),  # p <= 0 keeps the top one
        min_p=min(float(min_p), 1.0),
        seed=seed,
        **penalties,
    )


def unsupported_reason(*, typical_p=1.0, mirostat_mode=0) -> str:
    """Why a request cannot be verified exactly yet ('' when it can)."""
    if mirostat_mode:
        return f"mirostat (mode {mirostat_mode})"
    if typical_p < 1.0:
        return "typical-p sampling"
    return ""


def fallback_reason(llama, typical_p, mirostat_mode, reset: bool = True) -> str:
    """Why llama-cpp-python's own loop must decode a request ('' when pyspec's does)."""
    reason = unsupported_reason(typical_p=typical_p, mirostat_mode=mirostat_mode)
    if not reason and not reset:
        reason = "generate(reset=False)"
    if not reason and (
        getattr(llama, "_is_recurrent", False) or getattr(llama, "_is_hybrid", False)
    ):
        reason = "recurrent or hybrid models (their KV cells cannot be partly removed)"
    return reason
