/*
 * test_draw.c - C tests of the draw arithmetic (csrc/draw.h) and of the SIMD row sums in
 * csrc/row_scan.c, which must agree with draw.h's scalar formulas bit for bit.
 *
 * Built together with csrc/row_scan.c (its functions are internal to the library) and with
 * the library's compile options, so each CI configuration (scalar, AVX2, native/AVX-512)
 * checks its own SIMD loop against the scalar formula. The known answers of
 * pyspec_exp_portable are the bit patterns every back end (the CUDA one included) must
 * produce.
 *
 * Same conventions as the API tests (test_main.c): every CHECK counts one pass or one
 * failure, the last line is "N passed, M failed", the exit status is non-zero when anything
 * failed.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draw.h"
#include "internal.h"
#include "rules.h"

static long long g_passed, g_failed;

static int check_at(int ok, int line, const char *fmt, ...) {
    if (ok) {
        ++g_passed;
        return 1;
    }
    if (++g_failed <= 60) {
        va_list ap;
        va_start(ap, fmt);
        printf("FAIL (test_draw.c:%d): ", line);
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
        fflush(stdout);
    }
    return 0;
}

#define CHECK(cond, ...) check_at((cond) ? 1 : 0, __LINE__, __VA_ARGS__)

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("out of memory allocating %zu bytes\n", bytes);
        exit(2);
    }
    return p;
}

/* splitmix64: the test's own deterministic generator. */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double next_unit(void) { return (double)(next_u64() >> 11) * 0x1.0p-53; } /* [0, 1) */
static float next_range(float lo, float hi) { return lo + (float)next_unit() * (hi - lo); }

static uint32_t float_bits(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}
static float bits_float(uint32_t b) {
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* ==== pyspec_exp_portable ================================================================ */

/* Known answers: (input bits, output bits). Any back end must reproduce them exactly. */
static const uint32_t k_exp_answers[][2] = {
    { 0x00000000u, 0x3f800000u }, /* exp(0) = 1 */
    { 0x80000000u, 0x3f800000u }, /* exp(-0) = 1 */
    { 0xb3d6bf95u, 0x3f7ffffeu }, /* exp(-1e-7) */
    { 0xba83126fu, 0x3f7fbe7fu }, /* exp(-0.001) */
    { 0xbe800000u, 0x3f475f7du }, /* exp(-0.25) */
    { 0xbf000000u, 0x3f1b4598u }, /* exp(-0.5) */
    { 0xbf317218u, 0x3f000000u }, /* exp(-0.693147182) = 0.5 */
    { 0xbf800000u, 0x3ebc5ab2u }, /* exp(-1) */
    { 0xc0200000u, 0x3da81c2eu }, /* exp(-2.5) */
    { 0xc0533333u, 0x3d1712ceu }, /* exp(-3.3) */
    { 0xc1200000u, 0x383e6bceu }, /* exp(-10) */
    { 0xc1a40000u, 0x30abd1d8u }, /* exp(-20.5) */
    { 0xc1f80000u, 0x291b090fu }, /* exp(-31) */
    { 0xc2487df4u, 0x1b4e2f56u }, /* exp(-50.123) */
    { 0xc2abcccdu, 0x018698a0u }, /* exp(-85.9) */
    { 0xc2abff7du, 0x0173d1bcu }, /* exp(-85.999) */
    { 0xc2ac0000u, 0x00000000u }, /* exp(-86): at the cutoff, 0 */
    { 0xc2c80000u, 0x00000000u }, /* exp(-100) = 0 */
    { 0xff800000u, 0x00000000u }, /* exp(-inf) = 0 */
    { 0x3f800000u, 0x3f800000u }, /* exp(+1): positive arguments are taken as 0 */
};

static void test_exp_known_answers(void) {
    for (size_t i = 0; i < sizeof k_exp_answers / sizeof k_exp_answers[0]; ++i) {
        const float x = bits_float(k_exp_answers[i][0]);
        const uint32_t got = float_bits(pyspec_exp_portable(x));
        CHECK(got == k_exp_answers[i][1], "exp_portable(%.9g) = 0x%08x, want 0x%08x", (double)x,
              got, k_exp_answers[i][1]);
    }
    CHECK(pyspec_exp_portable(NAN) == 0.0f, "exp_portable(NaN) is not 0");
}

/* Within 2 ulp (of the float nearest the true value) of exp() over (-86, 0]: every 97th
 * float of the range (~11 million), plus the values around the cutoff. */
static void test_exp_accuracy(void) {
    double worst = 0.0;
    float worst_x = 0.0f;
    long long n = 0, not_monotone = 0;
    float prev_y = 0.0f;
    /* From -86 upwards: the bit pattern of a negative float decreases towards -0. */
    for (uint32_t b = float_bits(-86.0f) - 1; b >= 0x80000000u && b < 0xC2AC0000u; b -= 97) {
        const float x = bits_float(b);
        const float y = pyspec_exp_portable(x);
        const double e = exp((double)x);
        const float ef = (float)e;
        const double ulp = (double)nextafterf(ef, INFINITY) - (double)ef;
        const double err = fabs((double)y - e) / ulp;
        if (err > worst) {
            worst = err;
            worst_x = x;
        }
        not_monotone += y < prev_y;
        prev_y = y;
        ++n;
        if (b < 0x80000000u + 97) break;
    }
    CHECK(worst <= 2.0, "exp_portable is %.3f ulp off exp() at %.9g", worst, (double)worst_x);
    CHECK(not_monotone == 0, "exp_portable decreases %lld times on an increasing sweep", not_monotone);
    CHECK(n > 10000000, "the sweep covered only %lld values", n);
    printf("  exp_portable: %lld arguments, worst %.3f ulp at %.9g\n", n, worst, (double)worst_x);
    const float just_above = nextafterf(-86.0f, 0.0f);
    CHECK(pyspec_exp_portable(just_above) > 0.0f && pyspec_exp_portable(-86.0f) == 0.0f,
          "the cutoff is not at -86");
    CHECK(isnormal(pyspec_exp_portable(just_above)), "exp_portable just above -86 is not normal");
}

/* ==== fixed point and the draw target ===================================================== */

static void test_weight_shift(void) {
    const struct { int64_t v; int shift; } cases[] = {
        { 1, 50 }, { 2, 50 }, { 4096, 50 }, { 4097, 49 }, { 32000, 47 }, { 151936, 44 },
        { 262144, 44 }, { 262145, 43 }, { (int64_t)1 << 20, 42 }, { INT32_MAX, 31 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const int s = pyspec_weight_shift(cases[i].v);
        CHECK(s == cases[i].shift, "weight_shift(%lld) = %d, want %d", (long long)cases[i].v, s,
              cases[i].shift);
        /* n_vocab weights of 1 (all logits equal) must not overflow: n << shift <= 2^62. */
        CHECK((unsigned __int128)cases[i].v << s <= (unsigned __int128)1 << 62,
              "weight_shift(%lld): a row of ones overflows 2^62", (long long)cases[i].v);
    }
}

static void test_fixed_weight(void) {
    CHECK(pyspec_fixed_weight(1.0f, 44) == (uint64_t)1 << 44, "fixed(1) != 2^44");
    CHECK(pyspec_fixed_weight(0.0f, 44) == 0, "fixed(0) != 0");
    CHECK(pyspec_fixed_weight(0.5f, 1) == 1 && pyspec_fixed_weight(0.25f, 1) == 0 &&
              pyspec_fixed_weight(0.75f, 1) == 2,
          "fixed point does not round to nearest, ties to even");
    CHECK(pyspec_fixed_weight(ldexpf(1.0f, -45), 44) == 0 &&
              pyspec_fixed_weight(ldexpf(1.5f, -45), 44) == 1,
          "fixed point does not round at half a unit");
    /* Every weight a float can hold in [2^-20, 1] is exact at shift 44. */
    for (int i = 0; i < 1000; ++i) {
        const float w = next_range(0x1.0p-20f, 1.0f);
        const uint64_t f = pyspec_fixed_weight(w, 44);
        CHECK(ldexp((double)f, -44) == (double)w, "fixed(%.9g) = %llu is not exact", (double)w,
              (unsigned long long)f);
    }
}

/* Integer sums: forward, backward and shuffled orders give the same total. */
static void test_fixed_sums_order_independent(void) {
    const int64_t n = 151936;
    const int shift = pyspec_weight_shift(n);
    uint64_t *w = xmalloc((size_t)n * sizeof *w);
    for (int trial = 0; trial < 5; ++trial) {
        for (int64_t i = 0; i < n; ++i)
            w[i] = pyspec_fixed_weight(pyspec_exp_portable(trial == 0 ? 0.0f : next_range(-40.0f, 0.0f)), shift);
        uint64_t fwd = 0, bwd = 0, shuffled = 0;
        for (int64_t i = 0; i < n; ++i) fwd += w[i];
        for (int64_t i = n - 1; i >= 0; --i) bwd += w[i];
        for (int64_t i = n - 1; i > 0; --i) { /* Fisher-Yates */
            const int64_t j = (int64_t)(next_u64() % (uint64_t)(i + 1));
            const uint64_t t = w[i]; w[i] = w[j]; w[j] = t;
        }
        for (int64_t i = 0; i < n; ++i) shuffled += w[i];
        CHECK(fwd == bwd && fwd == shuffled, "trial %d: fixed sums differ by order", trial);
        CHECK(fwd <= (uint64_t)1 << 62, "trial %d: sum %llu exceeds 2^62", trial,
              (unsigned long long)fwd);
        if (trial == 0)
            CHECK(fwd == (uint64_t)n << shift, "a row of ones does not sum to n * 2^shift");
    }
    free(w);
}

/* floor(u * total) by exact 128-bit arithmetic: u = bits / 2^53. */
static uint64_t reference_target(double u, uint64_t total) {
    const uint64_t bits = (uint64_t)ldexp(u, 53);
    return (uint64_t)(((unsigned __int128)bits * total) >> 53);
}

static void test_draw_target(void) {
    const double u_max = 1.0 - 0x1.0p-53;
    const uint64_t two62 = (uint64_t)1 << 62;
    CHECK(pyspec_draw_target(0.0, 1) == 0 && pyspec_draw_target(u_max, 1) == 0,
          "total 1: the target is not 0");
    CHECK(pyspec_draw_target(0.0, two62) == 0, "u = 0: the target is not 0");
    CHECK(pyspec_draw_target(u_max, two62) == two62 - ((uint64_t)1 << 9),
          "u = 1 - 2^-53, total 2^62: target %llu", (unsigned long long)pyspec_draw_target(u_max, two62));
    CHECK(pyspec_draw_target(u_max, two62 - 1) == two62 - ((uint64_t)1 << 9) - 1,
          "u = 1 - 2^-53, total 2^62 - 1: target %llu",
          (unsigned long long)pyspec_draw_target(u_max, two62 - 1));
    CHECK(pyspec_draw_target(0.5, 3) == 1 && pyspec_draw_target(0.5, 2) == 1 &&
              pyspec_draw_target(nextafter(0.5, 0.0), 2) == 0,
          "u = 0.5: wrong target");
    CHECK(pyspec_draw_target(u_max, 2) == 1 && pyspec_draw_target(u_max, ((uint64_t)1 << 53) + 1) ==
                                                   ((uint64_t)1 << 53) - 1,
          "u = 1 - 2^-53: wrong target near 2^53");
    long long wrong = 0, out_of_range = 0;
    for (int i = 0; i < 200000; ++i) {
        const double u = i % 7 == 0 ? u_max - ldexp((double)(next_u64() & 1023), -53) : next_unit();
        uint64_t total;
        switch (i % 4) {
        case 0: total = 1 + next_u64() % 1000; break;
        case 1: total = two62 - (next_u64() & 0xFFFF); break;
        case 2: total = (next_u64() >> 2) | 1; break;
        default: total = ((uint64_t)1 << (next_u64() % 62)) + (next_u64() & 0xFF); break;
        }
        const uint64_t t = pyspec_draw_target(u, total);
        wrong += t != reference_target(u, total);
        out_of_range += t >= total;
    }
    CHECK(wrong == 0, "%lld random draw targets differ from floor(u * total)", wrong);
    CHECK(out_of_range == 0, "%lld draw targets are >= total", out_of_range);
}

static void test_fixed_residual_and_walk(void) {
    const uint64_t total = (uint64_t)1 << 44;
    CHECK(pyspec_fixed_residual(total / 2, total, 0.25) == total / 4, "residual 0.5 - 0.25");
    CHECK(pyspec_fixed_residual(total / 4, total, 0.25) == 0, "residual p == q is not 0");
    CHECK(pyspec_fixed_residual(total / 4, total, 0.5) == 0, "residual p < q is not 0");
    CHECK(pyspec_fixed_residual(total, total, 0.0) == total, "residual with q = 0 is not p");
    /* The walk: first index whose running sum exceeds the target. */
    const uint64_t w[] = { 0, 3, 0, 5, 2 };
    const uint64_t want[] = { 1, 1, 1, 3, 3, 3, 3, 3, 4, 4 };
    for (uint64_t t = 0; t < 10; ++t)
        CHECK(pyspec_fixed_inverse_cdf(w, 5, t) == (int64_t)want[t], "walk: target %llu gives %lld",
              (unsigned long long)t, (long long)pyspec_fixed_inverse_cdf(w, 5, t));
    CHECK(pyspec_top_p_reached(9, 0.9f, 10) && !pyspec_top_p_reached(8, 0.9f, 10),
          "top-p cut at 0.9 of 10");
}

/* ==== SIMD row sums against the scalar formula ============================================ */

static uint16_t f32_to_f16_bits(float f) { /* round to nearest even; the test's own */
    uint32_t x = float_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t e = (int32_t)((x >> 23) & 0xFF) - 127 + 15;
    uint32_t m = x & 0x7FFFFFu;
    if (((x >> 23) & 0xFF) == 0xFF) return (uint16_t)(sign | 0x7C00u | (m ? 0x200u : 0));
    if (e >= 31) return (uint16_t)(sign | 0x7C00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        m |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = 1u << (shift - 1), rest = m & ((1u << shift) - 1);
        uint32_t r = m >> shift;
        if (rest > half || (rest == half && (r & 1))) ++r;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((uint32_t)e << 10) | (m >> 13);
    uint32_t rest = m & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1))) ++r;
    return (uint16_t)(sign | r);
}

static uint16_t f32_to_bf16_bits(float f) {
    uint32_t x = float_bits(f);
    if (isnan(f)) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static uint64_t scalar_row_sum(const void *row, int64_t n, int32_t dtype, float max_logit, int shift) {
    uint64_t total = 0;
    for (int64_t i = 0; i < n; ++i)
        total += pyspec_fixed_weight(pyspec_exp_portable(pyspec_load_logit(row, dtype, i) - max_logit), shift);
    return total;
}

/* Random rows of every dtype and awkward lengths (SIMD tails), with -inf entries, values
 * straddling the -86 cutoff, a max_logit below the true maximum (penalised rows) and above
 * it, and random temperatures for the candidate weights. */
static void test_simd_matches_scalar(void) {
    const int64_t max_n = 70000;
    float *logit = xmalloc((size_t)max_n * sizeof *logit);
    uint16_t *half = xmalloc((size_t)max_n * sizeof *half);
    uint64_t *out = xmalloc((size_t)max_n * sizeof *out);
    long long sum_mismatch = 0, weight_mismatch = 0, rows = 0;
    for (int trial = 0; trial < 300; ++trial) {
        const int64_t n = trial < 40 ? trial + 1 : 1 + (int64_t)(next_u64() % (uint64_t)(trial < 280 ? 5000 : max_n));
        const float scale = (float)(0.5 + 30.0 * next_unit());
        float max_l = -INFINITY;
        for (int64_t i = 0; i < n; ++i) {
            float x = (float)(2.0 * next_unit() - 1.0) * scale;
            const uint64_t r = next_u64() % 100;
            if (r < 5) x = -INFINITY;
            else if (r < 10) x = -86.0f + next_range(-0.01f, 0.01f); /* near the cutoff (max 0) */
            else if (r < 12) x = -1e30f;
            logit[i] = x;
            if (x > max_l) max_l = x;
        }
        if (!(max_l > -INFINITY)) max_l = 0.0f;
        for (int variant = 0; variant < 3; ++variant) {
            /* 0: the true maximum; 1: below it (a penalised maximum); 2: zero. */
            const float m = variant == 0 ? max_l : variant == 1 ? max_l - next_range(0.0f, 5.0f) : 0.0f;
            for (int32_t dtype = PYSPEC_F32; dtype <= PYSPEC_BF16; ++dtype) {
                const void *row = logit;
                if (dtype != PYSPEC_F32) {
                    for (int64_t i = 0; i < n; ++i)
                        half[i] = dtype == PYSPEC_F16 ? f32_to_f16_bits(logit[i]) : f32_to_bf16_bits(logit[i]);
                    row = half;
                }
                const int shift = pyspec_weight_shift(trial % 2 ? n : 151936);
                const uint64_t simd = pyspec_row_fixed_sum(row, n, dtype, m, shift);
                const uint64_t scalar = scalar_row_sum(row, n, dtype, m, shift);
                sum_mismatch += simd != scalar;
                if (simd != scalar && sum_mismatch < 5)
                    CHECK(0, "trial %d n %lld dtype %d max %.9g: SIMD sum %llu, scalar %llu", trial,
                          (long long)n, dtype, (double)m, (unsigned long long)simd,
                          (unsigned long long)scalar);
                ++rows;
            }
        }
        /* Candidate weights: element by element, untempered and tempered. */
        const float temps[] = { 1.0f, next_range(0.05f, 3.0f), 1e-30f };
        for (int ti = 0; ti < 3; ++ti) {
            const int shift = pyspec_weight_shift(n);
            const uint64_t total = pyspec_fixed_weights(logit, n, max_l, temps[ti], shift, out);
            uint64_t want_total = 0;
            for (int64_t i = 0; i < n; ++i) {
                const uint64_t want = pyspec_fixed_weight(pyspec_exp_portable((logit[i] - max_l) / temps[ti]), shift);
                want_total += want;
                if (out[i] != want && ++weight_mismatch < 5)
                    CHECK(0, "trial %d T %g: weight of %.9g is %llu, scalar %llu", trial,
                          (double)temps[ti], (double)logit[i], (unsigned long long)out[i],
                          (unsigned long long)want);
            }
            CHECK(total == want_total, "trial %d T %g: weights sum %llu, scalar %llu", trial,
                  (double)temps[ti], (unsigned long long)total, (unsigned long long)want_total);
        }
    }
    CHECK(sum_mismatch == 0, "%lld of %lld SIMD row sums differ from the scalar sum", sum_mismatch, rows);
    CHECK(weight_mismatch == 0, "%lld SIMD weights differ from the scalar formula", weight_mismatch);

    /* Every float in a dense band of arguments, lane by lane: x - 0 / 1 = x. */
    const int64_t n = 65536;
    for (int band = 0; band < 4; ++band) {
        const float start[] = { -86.0f, -10.0f, -0.5f, -43.0f };
        uint32_t b = float_bits(start[band]);
        for (int64_t i = 0; i < n; ++i) logit[i] = bits_float(b - (uint32_t)(i - n / 2));
        const int shift = pyspec_weight_shift(n);
        (void)pyspec_fixed_weights(logit, n, 0.0f, 1.0f, shift, out);
        long long bad = 0;
        for (int64_t i = 0; i < n; ++i)
            bad += out[i] != pyspec_fixed_weight(pyspec_exp_portable(logit[i]), shift);
        CHECK(bad == 0, "band around %g: %lld SIMD weights differ", (double)start[band], bad);
    }
    free(logit);
    free(half);
    free(out);
}

int main(void) {
    test_exp_known_answers();
    test_exp_accuracy();
    test_weight_shift();
    test_fixed_weight();
    test_fixed_sums_order_independent();
    test_draw_target();
    test_fixed_residual_and_walk();
    test_simd_matches_scalar();
    printf("SIMD: %s\n",
#if defined(__AVX512F__) && defined(__AVX512BW__)
           "avx512"
#elif defined(__AVX2__) && defined(__F16C__)
           "avx2"
#else
           "scalar"
#endif
    );
    printf("%lld passed, %lld failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
