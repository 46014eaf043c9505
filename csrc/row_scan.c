/*
 * row_scan.c - streaming passes over one vocabulary-wide row of logits.
 *
 * The hot pass is pyspec_scan_top_k: it reads each element exactly once, in its own dtype,
 * and only looks at an element individually when the block it sits in holds a value above
 * the current k-th largest. For real logits and k = 40 that happens a few hundred times per
 * 150k-token row, so the pass runs at the speed of a max-reduction.
 */
#include <math.h>
#include <string.h>

#include "draw.h"
#include "internal.h"

#if defined(__AVX2__) && defined(__F16C__)
#  include <immintrin.h>
#  define PYSPEC_HAVE_AVX2 1
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
#  define PYSPEC_HAVE_AVX512 1
#endif

/* ---- scalar element loads -------------------------------------------------------------- */

static inline float f16_to_f32(uint16_t h) {
#if defined(PYSPEC_HAVE_AVX2)
    return _cvtsh_ss(h);
#else
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0x1Fu) {
        bits = sign | 0x7F800000u | (mant << 13); /* inf or NaN */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
        bits = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3FFu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
#endif
}

static inline float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline __attribute__((always_inline)) float load_one(const void *row, int32_t dtype,
                                                            int64_t i) {
    switch (dtype) {
    case PYSPEC_F16: return f16_to_f32(((const uint16_t *)row)[i]);
    case PYSPEC_BF16: return bf16_to_f32(((const uint16_t *)row)[i]);
    default: return ((const float *)row)[i];
    }
}

float pyspec_load_logit(const void *row, int32_t dtype, int64_t i) {
    return load_one(row, dtype, i);
}

static inline int is_bad_logit(float x) { return isnan(x) || (isinf(x) && x > 0); }

/* ---- the k-largest heap ------------------------------------------------------------------ */

/* The heap keeps its weakest entry at the root: lower logit is weaker, and between equal
 * logits the higher token id is weaker, so ties always favour the lower id (the order a
 * stable descending sort would give). */
static inline int weaker(float la, int32_t ta, float lb, int32_t tb) {
    return la < lb || (la == lb && ta > tb);
}

static void heap_sift_down(int32_t *token, float *logit, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && weaker(logit[l], token[l], logit[m], token[m])) m = l;
        if (r < n && weaker(logit[r], token[r], logit[m], token[m])) m = r;
        if (m == i) return;
        float tl = logit[i]; logit[i] = logit[m]; logit[m] = tl;
        int32_t tt = token[i]; token[i] = token[m]; token[m] = tt;
        i = m;
    }
}

static void heap_sift_up(int32_t *token, float *logit, int64_t i) {
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!weaker(logit[i], token[i], logit[p], token[p])) return;
        float tl = logit[i]; logit[i] = logit[p]; logit[p] = tl;
        int32_t tt = token[i]; token[i] = token[p]; token[p] = tt;
        i = p;
    }
}

typedef struct top_k_state {
    int32_t *token;
    float   *logit;
    int64_t  n, k;
    float    threshold; /* an element must exceed this to enter */
} top_k_state;

/* Elements arrive in increasing token order, so a newcomer equal to the root is weaker. */
static inline void top_k_offer(top_k_state *s, float x, int32_t t) {
    if (!(x > s->threshold)) return; /* also drops -inf and NaN */
    if (s->n < s->k) {
        s->token[s->n] = t;
        s->logit[s->n] = x;
        heap_sift_up(s->token, s->logit, s->n);
        s->n++;
        if (s->n == s->k) s->threshold = s->logit[0];
    } else {
        s->token[0] = t;
        s->logit[0] = x;
        heap_sift_down(s->token, s->logit, s->n, 0);
        s->threshold = s->logit[0];
    }
}

static int64_t first_bad_index(const void *row, int64_t n_vocab, int32_t dtype) {
    for (int64_t i = 0; i < n_vocab; ++i)
        if (is_bad_logit(load_one(row, dtype, i))) return i;
    return -1;
}

#if defined(PYSPEC_HAVE_AVX2)
static inline __attribute__((always_inline)) __m256 load8(const void *row, int32_t dtype,
                                                          int64_t i) {
    switch (dtype) {
    case PYSPEC_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
    case PYSPEC_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    default: return _mm256_loadu_ps((const float *)row + i);
    }
}
#endif

#if defined(PYSPEC_HAVE_AVX512)
static inline __attribute__((always_inline)) __m512 load16(const void *row, int32_t dtype,
                                                           int64_t i) {
    switch (dtype) {
    case PYSPEC_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)));
    case PYSPEC_BF16: {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    default: return _mm512_loadu_ps((const float *)row + i);
    }
}
#endif

/* Offers the elements of a 32-element block whose bits are set in `mask` (bit j: element
 * base + j exceeded the threshold when the block was loaded). Usually one or two. */
static inline void offer_masked(top_k_state *s, const void *row, int32_t dtype, int64_t base,
                                uint32_t mask) {
    while (mask) {
        int j = __builtin_ctz(mask);
        mask &= mask - 1;
        top_k_offer(s, load_one(row, dtype, base + j), (int32_t)(base + j));
    }
}

static inline __attribute__((always_inline)) pyspec_status
scan_top_k_impl(const void *row, int64_t n_vocab, const int32_t dtype, top_k_state *s,
                pyspec_bad_logit *bad) {
    int64_t i = 0;
#if defined(PYSPEC_HAVE_AVX512)
    {
        const __m512 pos_inf = _mm512_set1_ps(INFINITY);
        __mmask16 bad_acc = 0;
        __m512 thr = _mm512_set1_ps(s->threshold);
        for (; i + 32 <= n_vocab; i += 32) {
            __m512 v0 = load16(row, dtype, i), v1 = load16(row, dtype, i + 16);
            /* NaN compares unordered; +inf survives the max and is caught by the eq test. */
            __m512 m = _mm512_max_ps(v0, v1);
            bad_acc |= _mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q) |
                       _mm512_cmp_ps_mask(m, pos_inf, _CMP_EQ_OQ);
            if (_mm512_cmp_ps_mask(m, thr, _CMP_GT_OQ)) {
                uint32_t mask = (uint32_t)_mm512_cmp_ps_mask(v0, thr, _CMP_GT_OQ) |
                                ((uint32_t)_mm512_cmp_ps_mask(v1, thr, _CMP_GT_OQ) << 16);
                offer_masked(s, row, dtype, i, mask);
                thr = _mm512_set1_ps(s->threshold);
            }
        }
        if (bad_acc) {
            bad->index = first_bad_index(row, n_vocab, dtype);
            bad->value = load_one(row, dtype, bad->index);
            return PYSPEC_ERR_LOGITS;
        }
    }
#elif defined(PYSPEC_HAVE_AVX2)
    {
        const __m256 pos_inf = _mm256_set1_ps(INFINITY);
        __m256 bad_acc = _mm256_setzero_ps();
        __m256 thr = _mm256_set1_ps(s->threshold);
        for (; i + 32 <= n_vocab; i += 32) {
            __m256 v0 = load8(row, dtype, i), v1 = load8(row, dtype, i + 8);
            __m256 v2 = load8(row, dtype, i + 16), v3 = load8(row, dtype, i + 24);
            /* NaN compares unordered; +inf survives the max and is caught by the eq test. */
            bad_acc = _mm256_or_ps(bad_acc, _mm256_cmp_ps(v0, v1, _CMP_UNORD_Q));
            bad_acc = _mm256_or_ps(bad_acc, _mm256_cmp_ps(v2, v3, _CMP_UNORD_Q));
            __m256 m = _mm256_max_ps(_mm256_max_ps(v0, v1), _mm256_max_ps(v2, v3));
            bad_acc = _mm256_or_ps(bad_acc, _mm256_cmp_ps(m, pos_inf, _CMP_EQ_OQ));
            if (_mm256_movemask_ps(_mm256_cmp_ps(m, thr, _CMP_GT_OQ))) {
                uint32_t mask = (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(v0, thr, _CMP_GT_OQ)) |
                                ((uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(v1, thr, _CMP_GT_OQ)) << 8) |
                                ((uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(v2, thr, _CMP_GT_OQ)) << 16) |
                                ((uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(v3, thr, _CMP_GT_OQ)) << 24);
                offer_masked(s, row, dtype, i, mask);
                thr = _mm256_set1_ps(s->threshold);
            }
        }
        if (_mm256_movemask_ps(bad_acc)) {
            bad->index = first_bad_index(row, n_vocab, dtype);
            bad->value = load_one(row, dtype, bad->index);
            return PYSPEC_ERR_LOGITS;
        }
    }
#endif
    for (; i < n_vocab; ++i) {
        float x = load_one(row, dtype, i);
        if (is_bad_logit(x)) {
            bad->index = i;
            bad->value = x;
            return PYSPEC_ERR_LOGITS;
        }
        top_k_offer(s, x, (int32_t)i);
    }
    if (s->n == 0) { /* every logit is -inf: nothing can be sampled */
        bad->index = -1;
        bad->value = -INFINITY;
        return PYSPEC_ERR_LOGITS;
    }
    return PYSPEC_OK;
}

pyspec_status pyspec_scan_top_k(const void *row, int64_t n_vocab, int32_t dtype, int64_t k,
                                int32_t *token, float *logit, int64_t *n_out,
                                pyspec_bad_logit *bad) {
    top_k_state s = { token, logit, 0, k, -INFINITY };
    pyspec_status st;
    /* One specialised copy of the loop per dtype: the dtype switch is resolved at compile time. */
    switch (dtype) {
    case PYSPEC_F16: st = scan_top_k_impl(row, n_vocab, PYSPEC_F16, &s, bad); break;
    case PYSPEC_BF16: st = scan_top_k_impl(row, n_vocab, PYSPEC_BF16, &s, bad); break;
    default: st = scan_top_k_impl(row, n_vocab, PYSPEC_F32, &s, bad); break;
    }
    *n_out = s.n;
    return st;
}

int64_t pyspec_gather_at_least(const void *row, int64_t n_vocab, int32_t dtype,
                               float threshold, float max_logit, int shift, int32_t *token,
                               float *logit, uint64_t *exp_sum) {
    int64_t n = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
        float x = load_one(row, dtype, i);
        if (x >= threshold && x > -INFINITY) {
            token[n] = (int32_t)i;
            logit[n] = x;
            ++n;
        }
    }
    if (exp_sum) *exp_sum = pyspec_row_fixed_sum(row, n_vocab, dtype, max_logit, shift);
    return n;
}

/* ---- fixed-point weights ------------------------------------------------------------------
 * The SIMD versions below repeat pyspec_exp_portable and pyspec_fixed_weight (draw.h)
 * operation for operation: the same constants, an FMA exactly where draw.h calls fmaf, the
 * same cutoff, and the same rounding to an integer (w * 2^shift is exact in double; adding
 * 2^52 rounds it to the nearest integer, ties to even, as nearbyint does). So every lane
 * gives the scalar bits, and integer sums make the lane order irrelevant. The C test
 * test_draw.c compares them on random rows. */

static inline uint64_t fixed_exp(float x, int shift) {
    return pyspec_fixed_weight(pyspec_exp_portable(x), shift);
}

#if defined(PYSPEC_HAVE_AVX2)
#  define PYSPEC_FIXED_MAGIC 4503599627370496.0 /* 2^52 */

static inline __m256 exp_portable8(__m256 x) {
    const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(PYSPEC_EXP_CUTOFF), _CMP_GT_OQ);
    x = _mm256_and_ps(x, keep); /* dropped lanes (also -inf, NaN) compute exp(0), then 0 */
    x = _mm256_min_ps(x, _mm256_setzero_ps());
    const __m256 shifter = _mm256_set1_ps(12582912.0f);
    __m256 k = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269502163f), shifter), shifter);
    __m256 r = _mm256_fmadd_ps(k, _mm256_set1_ps(-0.693145751953125f), x);
    r = _mm256_fmadd_ps(k, _mm256_set1_ps(-1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 r2 = _mm256_mul_ps(r, r);
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
    /* k is an integer in [-125, 0]: conversion is exact in any rounding mode. */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_and_ps(y, keep);
}

/* round(w * 2^shift) for 4 weights, as 64-bit integers. */
static inline __m256i fixed4(__m128 w, __m256d scale) {
    const __m256d magic = _mm256_set1_pd(PYSPEC_FIXED_MAGIC);
    __m256d d = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtps_pd(w), scale), magic);
    return _mm256_sub_epi64(_mm256_castpd_si256(d), _mm256_castpd_si256(magic));
}

static inline uint64_t hsum4_u64(__m256i v) {
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, v);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

#if defined(PYSPEC_HAVE_AVX512)
static inline __m512 exp_portable16(__m512 x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(PYSPEC_EXP_CUTOFF), _CMP_GT_OQ);
    x = _mm512_maskz_mov_ps(keep, x);
    x = _mm512_min_ps(x, _mm512_setzero_ps());
    const __m512 shifter = _mm512_set1_ps(12582912.0f);
    __m512 k = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269502163f), shifter), shifter);
    __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-0.693145751953125f), x);
    r = _mm512_fmadd_ps(k, _mm512_set1_ps(-1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 r2 = _mm512_mul_ps(r, r);
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
    y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
    return _mm512_maskz_mov_ps(keep, y);
}

/* round(w * 2^shift) for 8 weights. */
static inline __m512i fixed8(__m256 w, __m512d scale) {
    const __m512d magic = _mm512_set1_pd(PYSPEC_FIXED_MAGIC);
    __m512d d = _mm512_add_pd(_mm512_mul_pd(_mm512_cvtps_pd(w), scale), magic);
    return _mm512_sub_epi64(_mm512_castpd_si512(d), _mm512_castpd_si512(magic));
}

/* Unsigned horizontal sum (_mm512_reduce_add_epi64 adds as signed). */
static inline uint64_t hsum8_u64(__m512i v) {
    uint64_t lanes[8];
    _mm512_storeu_si512((void *)lanes, v);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}

static inline __m256 upper8(__m512 v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}
#endif

static inline __attribute__((always_inline)) uint64_t
fixed_sum_impl(const void *row, int64_t n_vocab, const int32_t dtype, float max_logit, int shift) {
    uint64_t total = 0;
    int64_t i = 0;
#if defined(PYSPEC_HAVE_AVX512)
    {
        const __m512 m = _mm512_set1_ps(max_logit);
        const __m512d scale = _mm512_set1_pd(ldexp(1.0, shift));
        __m512i acc = _mm512_setzero_si512();
        for (; i + 16 <= n_vocab; i += 16) {
            __m512 w = exp_portable16(_mm512_sub_ps(load16(row, dtype, i), m));
            acc = _mm512_add_epi64(acc, fixed8(_mm512_castps512_ps256(w), scale));
            acc = _mm512_add_epi64(acc, fixed8(upper8(w), scale));
        }
        total = hsum8_u64(acc);
    }
#elif defined(PYSPEC_HAVE_AVX2)
    {
        const __m256 m = _mm256_set1_ps(max_logit);
        const __m256d scale = _mm256_set1_pd(ldexp(1.0, shift));
        __m256i acc = _mm256_setzero_si256();
        for (; i + 8 <= n_vocab; i += 8) {
            __m256 w = exp_portable8(_mm256_sub_ps(load8(row, dtype, i), m));
            acc = _mm256_add_epi64(acc, fixed4(_mm256_castps256_ps128(w), scale));
            acc = _mm256_add_epi64(acc, fixed4(_mm256_extractf128_ps(w, 1), scale));
        }
        total = hsum4_u64(acc);
    }
#endif
    for (; i < n_vocab; ++i) total += fixed_exp(load_one(row, dtype, i) - max_logit, shift);
    return total;
}

uint64_t pyspec_row_fixed_sum(const void *row, int64_t n_vocab, int32_t dtype, float max_logit,
                              int shift) {
    switch (dtype) {
    case PYSPEC_F16: return fixed_sum_impl(row, n_vocab, PYSPEC_F16, max_logit, shift);
    case PYSPEC_BF16: return fixed_sum_impl(row, n_vocab, PYSPEC_BF16, max_logit, shift);
    default: return fixed_sum_impl(row, n_vocab, PYSPEC_F32, max_logit, shift);
    }
}

/* ---- the top probability ----------------------------------------------------------------
 * 1 / sum_j exp(x_j - max_logit), the largest probability of the row's softmax, with the
 * terms below exp(-PYSPEC_TOP_PROB_SPAN) left out: a block of 16 logits is only exponentiated
 * when one of them lies within the span of the maximum, which in a language model's row is a
 * few percent of the blocks (the row, just scanned, is still in cache), so the pass runs near
 * the speed of a max-reduction. The terms left out sum to at most n_vocab * exp(-span), and
 * the sum is at least 1: the result overstates the top probability by at most that fraction
 * (1.7e-2 at 152k tokens and a span of 16; about 1e-4 on Qwen2.5's rows). */
static inline __attribute__((always_inline)) double
top_prob_impl(const void *row, int64_t n_vocab, const int32_t dtype, float max_logit) {
    const float lowest = max_logit - (float)PYSPEC_TOP_PROB_SPAN;
    double z = 0.0;
    int64_t i = 0;
#if defined(PYSPEC_HAVE_AVX512)
    {
        const __m512 m = _mm512_set1_ps(max_logit), lo = _mm512_set1_ps(lowest);
        __m512d acc = _mm512_setzero_pd(); /* in double: 152k terms in float lose 1e-4 */
        for (; i + 16 <= n_vocab; i += 16) {
            const __m512 x = load16(row, dtype, i);
            const __mmask16 near = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
            if (near) {
                const __m512 w = _mm512_maskz_mov_ps(near, exp_portable16(_mm512_sub_ps(x, m)));
                acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(w)));
                acc = _mm512_add_pd(acc, _mm512_cvtps_pd(upper8(w)));
            }
        }
        z = _mm512_reduce_add_pd(acc);
    }
#elif defined(PYSPEC_HAVE_AVX2)
    {
        const __m256 m = _mm256_set1_ps(max_logit), lo = _mm256_set1_ps(lowest);
        __m256d acc = _mm256_setzero_pd(); /* in double: 152k terms in float lose 1e-4 */
        for (; i + 8 <= n_vocab; i += 8) {
            const __m256 x = load8(row, dtype, i);
            const __m256 near = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);
            if (_mm256_movemask_ps(near)) {
                const __m256 w = _mm256_and_ps(near, exp_portable8(_mm256_sub_ps(x, m)));
                acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(w)));
                acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(w, 1)));
            }
        }
        double lanes[4];
        _mm256_storeu_pd(lanes, acc);
        z = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    }
#endif
    for (; i < n_vocab; ++i) {
        const float x = load_one(row, dtype, i);
        if (x >= lowest) z += (double)pyspec_exp_portable(x - max_logit);
    }
    /* The maximum's own term is exp(0) = 1: z >= 1 unless max_logit is not the row's. */
    return z >= 1.0 ? 1.0 / z : 1.0;
}

double pyspec_row_top_prob(const void *row, int64_t n_vocab, int32_t dtype, float max_logit) {
    switch (dtype) {
    case PYSPEC_F16: return top_prob_impl(row, n_vocab, PYSPEC_F16, max_logit);
    case PYSPEC_BF16: return top_prob_impl(row, n_vocab, PYSPEC_BF16, max_logit);
    default: return top_prob_impl(row, n_vocab, PYSPEC_F32, max_logit);
    }
}

uint64_t pyspec_fixed_weights(const float *logit, int64_t n, float max_logit, float temperature,
                              int shift, uint64_t *out) {
    uint64_t total = 0;
    int64_t i = 0;
#if defined(PYSPEC_HAVE_AVX512)
    {
        const __m512 m = _mm512_set1_ps(max_logit), t = _mm512_set1_ps(temperature);
        const __m512d scale = _mm512_set1_pd(ldexp(1.0, shift));
        __m512i acc = _mm512_setzero_si512();
        for (; i + 16 <= n; i += 16) {
            __m512 w = exp_portable16(_mm512_div_ps(_mm512_sub_ps(_mm512_loadu_ps(logit + i), m), t));
            __m512i lo = fixed8(_mm512_castps512_ps256(w), scale), hi = fixed8(upper8(w), scale);
            _mm512_storeu_si512((void *)(out + i), lo);
            _mm512_storeu_si512((void *)(out + i + 8), hi);
            acc = _mm512_add_epi64(acc, _mm512_add_epi64(lo, hi));
        }
        total = hsum8_u64(acc);
    }
#elif defined(PYSPEC_HAVE_AVX2)
    {
        const __m256 m = _mm256_set1_ps(max_logit), t = _mm256_set1_ps(temperature);
        const __m256d scale = _mm256_set1_pd(ldexp(1.0, shift));
        __m256i acc = _mm256_setzero_si256();
        for (; i + 8 <= n; i += 8) {
            __m256 w = exp_portable8(_mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(logit + i), m), t));
            __m256i lo = fixed4(_mm256_castps256_ps128(w), scale);
            __m256i hi = fixed4(_mm256_extractf128_ps(w, 1), scale);
            _mm256_storeu_si256((__m256i *)(out + i), lo);
            _mm256_storeu_si256((__m256i *)(out + i + 4), hi);
            acc = _mm256_add_epi64(acc, _mm256_add_epi64(lo, hi));
        }
        total = hsum4_u64(acc);
    }
#endif
    for (; i < n; ++i) {
        out[i] = fixed_exp((logit[i] - max_logit) / temperature, shift);
        total += out[i];
    }
    return total;
}
