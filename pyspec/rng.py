"""The counter-based draws: every uniform is a pure function of (seed, position, purpose)."""

from __future__ import annotations

from pyspec._native.abi import Purpose
from pyspec._native.ffi import ffi, lib


def uniform(seed: int, position: int, purpose: Purpose, stream: int = 0) -> float:
    """The uniform in [0, 1) (53 bits) that pyspec draws for (seed, position, purpose);
    ``stream`` (Philox's fourth counter word, 0 for the verifier's draws) separates the
    rounds of a drafter that drafts the same position more than once."""
    if stream:
        return float(lib.pyspec_uniform_stream_at(seed, position, int(purpose), stream))
    return float(lib.pyspec_uniform(seed, position, int(purpose)))


def philox4x32_10(counter, key) -> tuple:
    """One Philox4x32-10 block: four 32-bit counter words, two key words -> four words."""
    c = ffi.new("uint32_t[4]", list(counter))
    k = ffi.new("uint32_t[2]", list(key))
    out = ffi.new("uint32_t[4]")
    lib.pyspec_philox4x32_10(c, k, out)
    return tuple(int(x) for x in out)
