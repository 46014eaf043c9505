"""Independent numpy references the C library is tested against."""

from __future__ import annotations

import numpy as np
from scipy import stats


def apply_penalties(logits, params, history) -> np.ndarray:
    """llama.cpp's penalties sampler in numpy (float32 arithmetic, as llama.cpp)."""
    l32 = np.array(logits, dtype=np.float32)
    if not getattr(params, "penalties_on", False) or history is None:
        return l32
    window = list(history) if params.penalty_last_n < 0 else list(history)[-params.penalty_last_n :]
    for tok, count in zip(*np.unique(np.asarray(window, dtype=np.int64), return_counts=True)):
        x = l32[tok]
        if not np.isfinite(x):
            continue
        with np.errstate(over="ignore"):
            x = (
                x * np.float32(params.repeat_penalty)
                if x <= 0
                else x / np.float32(params.repeat_penalty)
            )
            y = (
                np.float32(x)
                - np.float32(count) * np.float32(params.frequency_penalty)
                - np.float32(params.presence_penalty)
            )
        # pyspec saturates a finite logit that the penalties push past float32's range.
        l32[tok] = np.clip(y, -np.finfo(np.float32).max, np.finfo(np.float32).max)
    return l32


def reference_distribution(logits, params, history=None) -> np.ndarray:
    """llama.cpp's chain (penalties, top-k, top-p over the top-k survivors, min-p,
    temperature) in numpy, float64, dense. Comparisons that llama.cpp makes in float stay
    in float32."""
    l32 = apply_penalties(logits, params, history)
    n_vocab = l32.size
    out = np.zeros(n_vocab, dtype=np.float64)
    finite = np.isfinite(l32)
    if params.temperature <= 0:
        best = np.max(l32[finite])
        out[np.flatnonzero(l32 == best)[0]] = 1.0
        return out
    order = np.lexsort((np.arange(n_vocab), -l32.astype(np.float64)))
    order = order[finite[order]]
    sorted_l = l32[order]
    top = sorted_l[0]
    keep = order.size
    if 0 < params.top_k < n_vocab:
        keep = min(keep, params.top_k)
    if params.top_p < 1.0:
        w = np.exp(sorted_l[:keep].astype(np.float64) - top)
        cum = np.cumsum(w) / w.sum()
        keep = int(np.argmax(cum >= params.top_p)) + 1 if np.any(cum >= params.top_p) else keep
    if params.min_p > 0.0:
        threshold = np.float32(top) + np.float32(np.log(np.float32(params.min_p)))
        keep = max(1, min(keep, int(np.sum(sorted_l[:keep] >= threshold))))
    w = np.exp((sorted_l[:keep].astype(np.float64) - top) / params.temperature)
    out[order[:keep]] = w / w.sum()
    return out


def chisquare_pvalue(samples, probs, *, min_expected: float = 5.0) -> float:
    """Goodness of fit of integer samples to probs, pooling bins whose expected count is
    below min_expected into one. A sample outside the support gives p-value 0."""
    samples = np.asarray(samples)
    n = samples.size
    counts = np.bincount(samples, minlength=probs.size).astype(np.float64)
    if np.any(counts[probs <= 0] > 0):
        return 0.0
    support = np.flatnonzero(probs > 0)
    expected = probs[support] * n
    observed = counts[support]
    big = expected >= min_expected
    obs = list(observed[big])
    exp = list(expected[big])
    if np.any(~big):
        obs.append(observed[~big].sum())
        exp.append(expected[~big].sum())
    if len(obs) < 2:
        return 1.0
    obs, exp = np.array(obs), np.array(exp)
    exp *= obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)


def inverse_cdf(probs: np.ndarray, u: float) -> int:
    """Token at uniform u for a dense distribution (in token order)."""
    cum = np.cumsum(probs)
    idx = int(np.searchsorted(cum, u * cum[-1], side="right"))
    return min(idx, int(np.flatnonzero(probs > 0)[-1]))


def peaked_logits(rng, n_vocab: int, n_rows: int = 1, *, head: int = 30, scale: float = 2.0):
    """Rows shaped like a language model's: a broad body plus a head of strong candidates."""
    rows = rng.standard_normal((n_rows, n_vocab)).astype(np.float32) * scale
    for r in range(n_rows):
        picks = rng.choice(n_vocab, size=min(head, n_vocab), replace=False)
        rows[r, picks] += rng.uniform(6, 12, size=picks.size).astype(np.float32)
    return rows


# ---- the fixed-point draw (csrc/draw.h), bit for bit --------------------------------------
#
# What every back end must emit: weights from exp_portable (fmaf, add and power-of-two
# scaling only), rounded to integers at 2^shift, summed as integers, and a draw that picks the
# first token in token-id order whose running sum exceeds floor(u * total). Everything below
# is exact (float32 operations are IEEE-rounded by numpy, the fused multiply-add is emulated
# exactly, sums are integers), so it must equal the C library, and any GPU back end, token
# for token.

_F32 = np.float32
_EXP_CUTOFF = _F32(-86.0)
_EXP_SHIFTER = _F32(float.fromhex("0x1.8p+23"))  # 1.5 * 2^23
_EXP_LOG2E = _F32(float.fromhex("0x1.715476p+0"))
_EXP_LN2_HI = _F32(float.fromhex("-0x1.62e4p-1"))
_EXP_LN2_LO = _F32(float.fromhex("-0x1.7f7d1cp-20"))
_EXP_POLY = [
    _F32(float.fromhex(h))
    for h in (
        "0x1.a0d2cep-13",
        "0x1.6e879cp-10",
        "0x1.11121p-7",
        "0x1.555382p-5",
        "0x1.555554p-3",
        "0x1p-1",
    )
]


def fmaf(a, b, c) -> np.ndarray:
    """fmaf(a, b, c) on float32 arrays: a * b + c rounded once (to nearest, ties to even).
    The product is exact in float64; TwoSum gives the exact error of the float64 sum, which
    settles the one case where rounding float64 -> float32 could go the wrong way (the
    float64 sum lying exactly halfway between two float32 values)."""
    a, b, c = (np.asarray(v, dtype=np.float32) for v in (a, b, c))
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = p + c64
    bb = s - p
    e = (p - (s - bb)) + (c64 - bb)
    r = s.astype(np.float32)
    r64 = r.astype(np.float64)
    toward = np.where(s > r64, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
    other = np.nextafter(r, toward)
    halfway = (s != r64) & (s == (r64 + other.astype(np.float64)) * 0.5)
    wrong_side = halfway & (((other > r) & (e > 0)) | ((other < r) & (e < 0)))
    return np.where(wrong_side, other, r).astype(np.float32)


def exp_portable(x) -> np.ndarray:
    """pyspec_exp_portable (csrc/draw.h) on a float32 array, bit for bit."""
    x = np.asarray(x, dtype=np.float32)
    zero = ~(x > _EXP_CUTOFF)
    x = np.where(zero, _F32(0.0), np.minimum(x, _F32(0.0))).astype(np.float32)
    k = (fmaf(x, _EXP_LOG2E, _EXP_SHIFTER) - _EXP_SHIFTER).astype(np.float32)
    r = fmaf(k, _EXP_LN2_HI, x)
    r = fmaf(k, _EXP_LN2_LO, r)
    p = np.full_like(r, _EXP_POLY[0])
    for coef in _EXP_POLY[1:]:
        p = fmaf(p, r, coef)
    r2 = (r * r).astype(np.float32)
    y = (fmaf(p, r2, r) + _F32(1.0)).astype(np.float32)
    scale = np.ldexp(np.ones_like(y), k.astype(np.int32)).astype(np.float32)
    return np.where(zero, _F32(0.0), (y * scale).astype(np.float32)).astype(np.float32)


def weight_shift(n_vocab: int) -> int:
    """pyspec_weight_shift: 62 - ceil(log2(n_vocab)), at most 50."""
    return min(50, 62 - max(0, (int(n_vocab) - 1).bit_length()))


def fixed_weight(w, shift: int) -> np.ndarray:
    """round(w * 2^shift) (ties to even) as uint64; w * 2^shift is exact in float64."""
    return np.rint(np.ldexp(np.asarray(w, dtype=np.float32).astype(np.float64), shift)).astype(
        np.uint64
    )


def draw_target(u: float, total: int) -> int:
    """floor(u * total) exactly (u carries 53 bits)."""
    bits = int(np.ldexp(u, 53))
    return (bits * int(total)) >> 53


def _libm_logf(x: float) -> np.float32:
    """The C library's logf (what the CPU back end, and the host for a GPU one, computes)."""
    import ctypes
    import ctypes.util

    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.logf.restype = ctypes.c_float
    libm.logf.argtypes = [ctypes.c_float]
    return np.float32(libm.logf(float(x)))


def fixed_point_dist(logits, params, history=None):
    """The transformed distribution as (token ids ascending, uint64 weights, total): the
    kept set of llama.cpp's chain with draw.h's fixed-point weights, as the C library forms
    it. Greedy: the argmax (lowest id on ties) with weight 1."""
    l32 = apply_penalties(logits, params, history)
    n_vocab = l32.size
    finite = l32 > -np.inf
    if params.temperature <= 0:
        best = int(np.flatnonzero(l32 == np.max(l32[finite]))[0])
        return np.array([best]), np.array([1], dtype=np.uint64), 1
    shift = weight_shift(n_vocab)
    order = np.lexsort((np.arange(n_vocab), -l32.astype(np.float64)))
    order = order[finite[order]]
    sorted_l = l32[order]
    top = sorted_l[0]
    keep = order.size
    top_k_on = 0 < params.top_k < n_vocab
    if top_k_on:
        keep = min(keep, params.top_k)
    if params.top_p < 1.0:
        e = fixed_weight(exp_portable((sorted_l - top).astype(np.float32)), shift)
        # top-k on: normalised over the survivors; off: over the whole row (-inf weighs 0).
        z = int(e[:keep].sum()) if top_k_on else int(e.sum())
        cum = np.cumsum(e[:keep])
        reached = cum.astype(np.float64) >= np.float64(np.float32(params.top_p)) * np.float64(z)
        if np.any(reached):
            keep = int(np.argmax(reached)) + 1
    if params.min_p > 0.0:
        threshold = np.float32(top + _libm_logf(np.float32(params.min_p)))
        keep = max(1, min(keep, int(np.sum(sorted_l[:keep] >= threshold))))
    kept_l = sorted_l[:keep]
    scaled = ((kept_l - top).astype(np.float32) / np.float32(params.temperature)).astype(np.float32)
    w = fixed_weight(exp_portable(scaled), shift)
    ids = order[:keep]
    by_id = np.argsort(ids, kind="stable")
    return ids[by_id], w[by_id], int(w.sum())


def fixed_point_draw(ids, weights, total: int, u: float) -> int:
    """The first token, in ascending id order, whose running weight sum exceeds
    floor(u * total)."""
    target = draw_target(u, total)
    cum = np.cumsum(np.asarray(weights, dtype=np.uint64))
    return int(ids[int(np.searchsorted(cum, np.uint64(target), side="right"))])


def fixed_point_sample(logits, params, u: float, history=None) -> int:
    """What pyspec.sample emits for uniform u (its SAMPLE draw)."""
    return fixed_point_draw(*fixed_point_dist(logits, params, history), u)


def fixed_point_verify_row(
    logits, params, draft_token: int, q, u_accept: float, u_residual: float, history=None
):
    """One verify row with draft probabilities q (dense float32 [n_vocab]): (token, accepted).
    Accept when u_accept * q(x) < p(x), p = W / total; otherwise draw from the residual
    max(0, W - round(q * total)) over the kept set (from p itself if that is all zero)."""
    ids, w, total = fixed_point_dist(logits, params, history)
    q = np.asarray(q, dtype=np.float32)
    pos = np.flatnonzero(ids == draft_token)
    p_x = float(w[pos[0]]) / float(total) if pos.size else 0.0
    if u_accept * float(q[draft_token]) < p_x:
        return int(draft_token), True
    q_fixed = np.rint(q[ids].astype(np.float64) * np.float64(total)).astype(np.uint64)
    res = np.where(w > q_fixed, w - q_fixed, np.uint64(0)).astype(np.uint64)
    if int(res.sum()) == 0:
        return fixed_point_draw(ids, w, total, u_residual), False
    return fixed_point_draw(ids, res, int(res.sum()), u_residual), False
