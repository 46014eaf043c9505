"""Independent numpy references the C library is tested against."""
from __future__ import annotations

import numpy as np
from scipy import stats


def apply_penalties(logits, params, history) -> np.ndarray:
    """llama.cpp's penalties sampler in numpy (float32 arithmetic, as llama.cpp)."""
    l32 = np.array(logits, dtype=np.float32)
    if not getattr(params, "penalties_on", False) or history is None:
        return l32
    window = list(history) if params.penalty_last_n < 0 else list(history)[-params.penalty_last_n:]
    for tok, count in zip(*np.unique(np.asarray(window, dtype=np.int64), return_counts=True)):
        x = l32[tok]
        if not np.isfinite(x):
            continue
        x = x * np.float32(params.repeat_penalty) if x <= 0 else x / np.float32(params.repeat_penalty)
        l32[tok] = np.float32(x) - np.float32(count) * np.float32(params.frequency_penalty) \
            - np.float32(params.presence_penalty)
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
