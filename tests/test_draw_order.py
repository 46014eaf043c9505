"""Draws are exact functions of the logits and the uniforms: the token pyspec emits equals the
fixed-point reference (tests/reference.py, csrc/draw.h) bit for bit: weights from
exp_portable rounded to integers, integer sums, and the first token in token-id order whose
running sum exceeds floor(u * total). A GPU back end must match the same reference."""

import ctypes
import ctypes.util
import itertools

import numpy as np
import pytest
from reference import (
    draw_target,
    exp_portable,
    fixed_point_dist,
    fixed_point_draw,
    fixed_point_verify_row,
    fmaf,
    peaked_logits,
    weight_shift,
)

import pyspec
from pyspec.rng import Purpose, uniform

# (input bits, output bits) of pyspec_exp_portable; the same table is in tests/c/test_draw.c.
EXP_KNOWN_ANSWERS = [
    (0x00000000, 0x3F800000),
    (0x80000000, 0x3F800000),
    (0xB3D6BF95, 0x3F7FFFFE),
    (0xBA83126F, 0x3F7FBE7F),
    (0xBE800000, 0x3F475F7D),
    (0xBF000000, 0x3F1B4598),
    (0xBF317218, 0x3F000000),
    (0xBF800000, 0x3EBC5AB2),
    (0xC0200000, 0x3DA81C2E),
    (0xC0533333, 0x3D1712CE),
    (0xC1200000, 0x383E6BCE),
    (0xC1A40000, 0x30ABD1D8),
    (0xC1F80000, 0x291B090F),
    (0xC2487DF4, 0x1B4E2F56),
    (0xC2ABCCCD, 0x018698A0),
    (0xC2ABFF7D, 0x0173D1BC),
    (0xC2AC0000, 0x00000000),
    (0xC2C80000, 0x00000000),
    (0xFF800000, 0x00000000),
    (0x3F800000, 0x3F800000),
]


def test_reference_exp_known_answers():
    x = np.array([a for a, _ in EXP_KNOWN_ANSWERS], dtype=np.uint32).view(np.float32)
    want = np.array([b for _, b in EXP_KNOWN_ANSWERS], dtype=np.uint32)
    np.testing.assert_array_equal(exp_portable(x).view(np.uint32), want)


def test_reference_fmaf_matches_libm(rng):
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.fmaf.restype = ctypes.c_float
    libm.fmaf.argtypes = [ctypes.c_float] * 3
    a = rng.standard_normal(3000).astype(np.float32)
    b = rng.standard_normal(3000).astype(np.float32)
    c = (rng.standard_normal(3000) * 10.0 ** rng.integers(-8, 8, 3000)).astype(np.float32)
    # Halfway cases for the float64 -> float32 rounding: c cancels most of a * b.
    c[:1000] = (-(a[:1000].astype(np.float64) * b[:1000])).astype(np.float32)
    got = fmaf(a, b, c)
    want = np.array(
        [libm.fmaf(float(x), float(y), float(z)) for x, y, z in zip(a, b, c)], dtype=np.float32
    )
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_weight_shift_and_draw_target():
    assert [weight_shift(v) for v in (1, 4096, 4097, 151936, 262144)] == [50, 50, 49, 44, 44]
    assert draw_target(0.0, 2**62) == 0
    assert draw_target(1 - 2.0**-53, 1) == 0
    assert draw_target(1 - 2.0**-53, 2**62) == 2**62 - 2**9


def _sample_u(seed, pos):
    return uniform(seed, pos, Purpose.SAMPLE)


def test_draw_walks_token_ids_not_ranks():
    """Two tokens, the better one last: a small uniform lands on token 0 (the first in id
    order), which a walk in rank order would never give for it."""
    logits = np.array([2.0, 3.0], dtype=np.float32)
    params = pyspec.SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    ids, w, total = fixed_point_dist(logits, params)
    cut = int(w[0])  # token 0 is drawn exactly when floor(u * total) < w[0]
    seen = set()
    for seed in range(200):
        u = _sample_u(seed, 7)
        want = 0 if draw_target(u, total) < cut else 1
        assert (
            pyspec.sample(logits, pyspec.SamplingParams(**{**params.__dict__, "seed": seed}), 7)
            == want
        )
        seen.add(want)
    assert seen == {0, 1}
    # The same with top-k on: the kept candidates are walked by id, not by rank.
    params_k = pyspec.SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0)
    logits3 = np.array([2.0, 3.0, -5.0], dtype=np.float32)
    ids, w, total = fixed_point_dist(logits3, params_k)
    assert list(ids) == [0, 1]
    for seed in range(200):
        u = _sample_u(seed, 3)
        want = 0 if draw_target(u, total) < int(w[0]) else 1
        assert (
            pyspec.sample(logits3, pyspec.SamplingParams(**{**params_k.__dict__, "seed": seed}), 3)
            == want
        )


PARAMS = [
    pyspec.SamplingParams(temperature=t, top_k=k, top_p=p, min_p=m)
    for t, k, p, m in itertools.product(
        (0.0, 0.3, 1.0, 1.7), (0, 1, 40, 700), (1.0, 0.95, 0.6), (0.0, 0.05)
    )
] + [
    pyspec.SamplingParams(),
    pyspec.SamplingParams(
        temperature=1.0,
        top_k=0,
        top_p=0.9,
        min_p=0.0,
        repeat_penalty=1.3,
        frequency_penalty=0.2,
        presence_penalty=0.5,
    ),
    pyspec.SamplingParams(
        temperature=0.7, top_k=50, top_p=0.8, min_p=0.02, repeat_penalty=1.1, presence_penalty=1.0
    ),
]


def _with_seed(params, seed):
    return pyspec.SamplingParams(**{**params.__dict__, "seed": seed})


@pytest.mark.parametrize(
    "n_vocab,dtype",
    [(1000, np.float32), (4099, np.float32), (5000, np.float16), (151936, np.float32)],
)
def test_sample_equals_fixed_point_reference(n_vocab, dtype, rng):
    rows = peaked_logits(rng, n_vocab, n_rows=2, head=40, scale=2.0).astype(dtype)
    rows[1, rng.choice(n_vocab, n_vocab // 10, replace=False)] = -np.inf
    history = list(rng.integers(0, n_vocab, 30))
    n_seeds = 12 if n_vocab > 100000 else 40
    params_list = PARAMS if n_vocab < 100000 else PARAMS[::5] + PARAMS[-3:]
    for row, params in itertools.product(rows, params_list):
        hist = history if params.penalties_on else None
        ids, w, total = fixed_point_dist(row.astype(np.float32), params, hist)
        probs = pyspec.distribution(row, params, penalty_history=hist)
        want_probs = np.zeros(n_vocab, dtype=np.float32)
        want_probs[ids] = (w.astype(np.float64) / float(total)).astype(np.float32)
        np.testing.assert_array_equal(probs, want_probs, err_msg=str(params))
        for seed in range(n_seeds):
            pos = 1000 + 17 * seed
            got = pyspec.sample(row, _with_seed(params, seed), pos, penalty_history=hist)
            assert got == fixed_point_draw(ids, w, total, _sample_u(seed, pos)), (params, seed)


def test_point_mass_verify_equals_reference(rng):
    n_vocab = 3000
    rows = peaked_logits(rng, n_vocab, n_rows=5, head=8, scale=1.0)
    params = pyspec.SamplingParams(temperature=1.1, top_k=0, top_p=0.97, min_p=0.0)
    for seed in range(30):
        p = _with_seed(params, seed)
        want = [
            fixed_point_draw(*fixed_point_dist(rows[i], p), _sample_u(seed, 50 + i))
            for i in range(5)
        ]
        drafts = want[:4]
        if seed % 3 == 0:
            drafts[seed % 4] = (drafts[seed % 4] + 1) % n_vocab
        r = pyspec.verify(rows, drafts, None, p, 50)
        assert list(r.tokens) == want[: r.n_accepted + 1]


@pytest.mark.parametrize("top_k", [0, 30])
def test_rejection_sampling_equals_reference(top_k, rng):
    """Acceptance with p = W / total and the fixed-point residual, row by row."""
    n_vocab = 2000
    rows = peaked_logits(rng, n_vocab, n_rows=2, head=40, scale=1.0) * np.float32(0.5)
    params = pyspec.SamplingParams(temperature=1.0, top_k=top_k, top_p=0.95, min_p=0.01)
    q_params = pyspec.SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    q = pyspec.distribution(rows[0] + rng.standard_normal(n_vocab).astype(np.float32), q_params)
    ids, w, total = fixed_point_dist(rows[0], params)
    q_fixed = np.rint(q[ids].astype(np.float64) * float(total)).astype(np.uint64)
    assert np.sum(w > q_fixed) > 10  # a residual spread over many tokens
    n_rejected = 0
    for seed in range(300):
        p = _with_seed(params, seed)
        x = int(
            np.searchsorted(np.cumsum(q.astype(np.float64)), _sample_u(seed + 10**6, 0) * q.sum())
        )
        x = min(x, n_vocab - 1)
        if q[x] <= 0:
            continue
        want, accepted = fixed_point_verify_row(
            rows[0], p, x, q, uniform(seed, 9, Purpose.ACCEPT), uniform(seed, 9, Purpose.RESIDUAL)
        )
        r = pyspec.verify(rows, [x], q[None, :], p, 9)
        assert r.tokens[0] == want and (r.n_accepted == 1) == accepted, seed
        n_rejected += not accepted
    assert n_rejected > 20  # the residual path was exercised
