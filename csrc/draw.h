/*
 * draw.h - the arithmetic of a draw that both back ends must reproduce bit for bit:
 * the exponential that turns logits into weights, the fixed-point weights that make every
 * sum independent of summation order, and the exact integer target of an inverse-CDF draw.
 *
 * Why: the CPU walks a row with one thread and SIMD lanes, the GPU with a block of threads;
 * they add weights in different orders, and libm's expf differs from CUDA's expf in the last
 * bit. Either difference can move an inverse-CDF draw across a token boundary. So:
 *   - weights come from pyspec_exp_portable, built only from operations IEEE 754 rounds
 *     exactly (fmaf, add, multiply by a power of two), identical on any conforming FPU;
 *   - weights are summed as integers (pyspec_fixed_weight), so any order gives the same
 *     total;
 *   - a draw picks the first token, in token-id order, whose running integer sum exceeds
 *     pyspec_draw_target(u, total), an exact 128-bit product.
 * Compile the users of this header without floating-point contraction (-ffp-contract=off on
 * the host, -fmad=false for CUDA): a fused multiply-add the compiler invents would round
 * differently on the two sides.
 */
#ifndef PYSPEC_DRAW_H
#define PYSPEC_DRAW_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "hostdevice.h"

#if defined(__CUDA_ARCH__)
#  define PYSPEC_FMAF(a, b, c) __fmaf_rn((a), (b), (c))
#else
#  define PYSPEC_FMAF(a, b, c) fmaf((a), (b), (c))
#endif

/* Below this argument the weight is taken as 0 (exp(-86) ~ 4e-38: the result stays a normal
 * float, and it is far below the fixed-point resolution anyway). */
#define PYSPEC_EXP_CUTOFF (-86.0f)

/* exp(x) for x <= 0 (weights are exp((logit - max) / T)), within 2 ulp of the true value,
 * and the same bits on every back end. -inf and NaN-free inputs below the cutoff give 0.
 * Cody-Waite reduction x = k ln2 + r, |r| <= ln2 / 2, then Cephes' degree-5 polynomial. */
PYSPEC_HD float pyspec_exp_portable(float x) {
    if (!(x > PYSPEC_EXP_CUTOFF)) return 0.0f;
    if (x > 0.0f) x = 0.0f; /* never happens for weights; keeps 2^k in range */
    /* k = round-to-nearest-even(x log2 e): one fmaf rounds x*log2e + 1.5*2^23 to an integer. */
    const float shifter = 12582912.0f;
    float k = PYSPEC_FMAF(x, 1.44269502163f, shifter) - shifter;
    float r = PYSPEC_FMAF(k, -0.693145751953125f, x);     /* ln2 high part: exact product */
    r = PYSPEC_FMAF(k, -1.428606765330187e-06f, r);       /* ln2 low part */
    float p = 1.9875691500e-4f;
    p = PYSPEC_FMAF(p, r, 1.3981999507e-3f);
    p = PYSPEC_FMAF(p, r, 8.3334519073e-3f);
    p = PYSPEC_FMAF(p, r, 4.1665795894e-2f);
    p = PYSPEC_FMAF(p, r, 1.6666665459e-1f);
    p = PYSPEC_FMAF(p, r, 5.0000001201e-1f);
    float r2 = r * r;
    float y = PYSPEC_FMAF(p, r2, r) + 1.0f;
    /* 2^k as a float: k is in [-125, 0], so the scale is a normal number and the product
     * below is exact up to the final rounding. */
    int32_t e = (int32_t)k + 127;
    uint32_t bits = (uint32_t)e << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

/* Fixed-point scale for a row of n_vocab weights in [0, 1]: weight w becomes the integer
 * nearest to w * 2^shift, and n_vocab of them still sum below 2^62. Tokens whose weight is
 * below 2^-(shift+1) of the maximum round to 0: for a 262144-token vocabulary (shift 44) all
 * of them together carry less than 2^-26 of the mass, less than float rounding of the
 * weights themselves. */
PYSPEC_HD int pyspec_weight_shift(int64_t n_vocab) {
    int log2_ceil = 0;
    while (log2_ceil < 62 && ((int64_t)1 << log2_ceil) < n_vocab) ++log2_ceil;
    int shift = 62 - log2_ceil;
    return shift > 50 ? 50 : shift;
}

/* Nearest integer (ties to even) of a non-negative double below 2^63. */
PYSPEC_HD uint64_t pyspec_round_to_u64(double x) {
#if defined(__CUDA_ARCH__)
    return __double2ull_rn(x);
#else
    return (uint64_t)nearbyint(x); /* the default rounding mode: to nearest, ties to even */
#endif
}

/* The fixed-point value of a weight w in [0, 1]: round(w * 2^shift). The multiplication by a
 * power of two is exact, so the result depends on w and shift alone. */
PYSPEC_HD uint64_t pyspec_fixed_weight(float w, int shift) {
    return pyspec_round_to_u64(ldexp((double)w, shift));
}

/* The integer target of an inverse-CDF draw: floor(u * total), computed exactly. u carries 53
 * random bits (a multiple of 2^-53 in [0, 1)), so u * total = bits * total / 2^53; the
 * result is < total whenever total > 0. The drawn token is the first (in the draw's fixed
 * order) at which the running sum of weights exceeds the target. */
PYSPEC_HD uint64_t pyspec_draw_target(double u, uint64_t total) {
    uint64_t bits = (uint64_t)ldexp(u, 53);
#if defined(__CUDA_ARCH__)
    uint64_t hi = __umul64hi(bits, total);
#else
    uint64_t hi = (uint64_t)(((unsigned __int128)bits * total) >> 64);
#endif
    uint64_t lo = bits * total;
    return (hi << 11) | (lo >> 53);
}

/* The residual weight max(0, p - q) of one token in the units of the target's fixed-point
 * weights: p = weight / total, so p - q > 0 exactly when weight > q * total. */
PYSPEC_HD uint64_t pyspec_fixed_residual(uint64_t weight, uint64_t total, double q) {
    uint64_t q_fixed = pyspec_round_to_u64((double)q * (double)total);
    return weight > q_fixed ? weight - q_fixed : 0;
}

#endif /* PYSPEC_DRAW_H */
