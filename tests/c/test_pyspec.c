/*
 * test_pyspec.c - C-level tests of pyspec's public API (csrc/pyspec.h), meant to run under
 * AddressSanitizer + UndefinedBehaviorSanitizer (cmake -DPYSPEC_SANITIZE=ON).
 *
 * No framework: every CHECK counts one pass or one failure, the last line printed is
 * "N passed, M failed", and the exit status is non-zero when anything failed.
 *
 * Every buffer handed to the library is malloc'ed at its exact size, and the last logits
 * row of a sequence ends exactly where its allocation ends, so ASan reports any read or
 * write past an end. Padding that the library must never read (between logits rows, after
 * n_vocab in dense draft rows, after n_per_row in sparse draft rows) holds NaN or invalid
 * token ids, so a stray read also shows up as a wrong status or a wrong result without ASan.
 *
 * Only C11, libm, the public header and draw.h (for the fixed-point resolution) are used:
 * the half and bfloat16 conversions are the test's own, so the library's readers are
 * checked against an independent implementation.
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pyspec.h"
#include "draw.h" /* pyspec_weight_shift: the fixed-point resolution of the weights */

/* ==== harness ============================================================================ */

static long long g_passed, g_failed;
static char g_context[256]; /* what the running group is doing; printed with each failure */

/* A run that goes wrong in the randomised part can fail thousands of checks; the first few
 * dozen messages say everything, the rest would drown the summary line. */
#define MAX_PRINTED_FAILURES 80

static void set_context(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_context, sizeof g_context, fmt, ap);
    va_end(ap);
}

static int check_at(int ok, int line, const char *fmt, ...) {
    if (ok) {
        ++g_passed;
        return 1;
    }
    ++g_failed;
    if (g_failed <= MAX_PRINTED_FAILURES) {
        va_list ap;
        va_start(ap, fmt);
        printf("FAIL (test_pyspec.c:%d) [%s]: ", line, g_context);
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
        fflush(stdout);
    }
    return 0;
}

#define CHECK(cond, ...) check_at((cond) ? 1 : 0, __LINE__, __VA_ARGS__)

static double wall_seconds(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Allocations that cannot fail quietly: a NULL here is the test machine's problem, not a
 * library bug, and must not turn into a NULL-pointer test by accident. */
static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("out of memory allocating %zu bytes\n", bytes);
        exit(2);
    }
    return p;
}

/* ==== deterministic PRNG (xorshift64*) ==================================================== */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint64_t rng_u64(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}

static double rng_unit(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); }

static int64_t rng_range(int64_t lo, int64_t hi) { /* inclusive */
    return lo + (int64_t)(rng_u64() % (uint64_t)(hi - lo + 1));
}

static int rng_chance(double p) { return rng_unit() < p; }

/* ==== float <-> half / bfloat16 (round to nearest even) =================================== */

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rounds away the low `shift` bits of m to nearest, ties to even. */
static uint32_t round_shift_even(uint32_t m, uint32_t shift) {
    uint32_t kept = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (kept & 1u))) ++kept;
    return kept;
}

static uint16_t float_to_half(float f) {
    uint32_t x = float_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t exp = (x >> 23) & 0xFFu, mant = x & 0x7FFFFFu;
    if (exp == 0xFFu) return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0u)); /* inf, qNaN */
    int32_t e = (int32_t)exp - 127; /* unbiased */
    if (e > 15) return (uint16_t)(sign | 0x7C00u);
    if (e >= -14) { /* normal half; a carry out of the mantissa bumps the exponent, as it should */
        uint32_t h = ((uint32_t)(e + 15) << 10) | (mant >> 13);
        uint32_t rest = mant & 0x1FFFu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
        return (uint16_t)(sign | h);
    }
    /* half subnormal: value = m * 2^-24, m = (1.mant) * 2^(e + 24) */
    uint32_t shift = (uint32_t)(-e - 1);
    if (exp == 0 || shift > 24) return sign;
    return (uint16_t)(sign | round_shift_even(mant | 0x800000u, shift));
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0x1Fu) return bits_float(sign | 0x7F800000u | (mant << 13));
    if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
    float v = ldexpf((float)mant, -24);
    return sign ? -v : v;
}

static uint16_t float_to_bf16(float f) {
    uint32_t x = float_bits(f);
    if (isnan(f)) return (uint16_t)((x >> 16) | 0x40u); /* keep it a (quiet) NaN */
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

static float bf16_to_float(uint16_t h) { return bits_float((uint32_t)h << 16); }

static const char *dtype_name(int32_t dtype) {
    return dtype == PYSPEC_F32 ? "F32" : dtype == PYSPEC_F16 ? "F16" : "BF16";
}

static size_t dtype_size(int32_t dtype) { return dtype == PYSPEC_F32 ? 4 : 2; }

static void check_conversions(void) {
    set_context("test's own half/bfloat16 conversions");
    const float exact[] = { 0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604645e-08f };
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; ++i)
        CHECK(half_to_float(float_to_half(exact[i])) == exact[i], "half round trip of %g", exact[i]);
    CHECK(float_to_half(1.0f + 1.0f / 2048.0f) == 0x3C00u, "half: a tie rounds to even");
    CHECK(float_to_half(1e6f) == 0x7C00u, "half: overflow gives +inf");
    CHECK(isnan(half_to_float(float_to_half(NAN))), "half: NaN stays NaN");
    CHECK(float_to_half(-INFINITY) == 0xFC00u, "half: -inf");
    CHECK(bf16_to_float(float_to_bf16(3.0f)) == 3.0f, "bf16 round trip of 3");
    CHECK(float_to_bf16(1.0f + 1.0f / 256.0f) == 0x3F80u, "bf16: a tie rounds to even");
    CHECK(isnan(bf16_to_float(float_to_bf16(NAN))), "bf16: NaN stays NaN");
    CHECK(float_to_bf16(-INFINITY) == 0xFF80u, "bf16: -inf");
}

/* ==== logits buffers ====================================================================== */

/* n_rows rows of n_vocab logits, `stride` elements apart, in one allocation that ends exactly
 * where the last row ends. `value` holds what the library should read, as float (after the
 * round trip through the dtype), for the test's own reference computations. */
typedef struct logits_rows {
    int32_t dtype;
    int64_t n_rows, n_vocab, stride;
    void   *data;
    float  *value; /* [n_rows][n_vocab] */
} logits_rows;

static void store_encoded(logits_rows *l, int64_t element, float v) {
    switch (l->dtype) {
    case PYSPEC_F16: ((uint16_t *)l->data)[element] = float_to_half(v); break;
    case PYSPEC_BF16: ((uint16_t *)l->data)[element] = float_to_bf16(v); break;
    default: ((float *)l->data)[element] = v; break;
    }
}

static float decode(int32_t dtype, float v) {
    switch (dtype) {
    case PYSPEC_F16: return half_to_float(float_to_half(v));
    case PYSPEC_BF16: return bf16_to_float(float_to_bf16(v));
    default: return v;
    }
}

static void logits_set(logits_rows *l, int64_t row, int64_t t, float v) {
    store_encoded(l, row * l->stride + t, v);
    l->value[row * l->n_vocab + t] = decode(l->dtype, v);
}

static const void *logits_row(const logits_rows *l, int64_t row) {
    return (const char *)l->data + (size_t)(row * l->stride) * dtype_size(l->dtype);
}

static const float *row_values(const logits_rows *l, int64_t row) {
    return l->value + row * l->n_vocab;
}

/* Allocates the rows (contents zero) and poisons the padding between rows with NaN. */
static void logits_alloc(logits_rows *l, int32_t dtype, int64_t n_rows, int64_t n_vocab,
                         int64_t stride) {
    l->dtype = dtype;
    l->n_rows = n_rows;
    l->n_vocab = n_vocab;
    l->stride = stride;
    const int64_t elements = (n_rows - 1) * stride + n_vocab;
    l->data = xmalloc((size_t)elements * dtype_size(dtype));
    l->value = xmalloc((size_t)(n_rows * n_vocab) * sizeof(float));
    for (int64_t r = 0; r < n_rows; ++r) {
        for (int64_t t = 0; t < n_vocab; ++t) logits_set(l, r, t, 0.0f);
        if (r + 1 < n_rows)
            for (int64_t t = n_vocab; t < stride; ++t) store_encoded(l, r * stride + t, NAN);
    }
}

static void logits_free(logits_rows *l) {
    free(l->data);
    free(l->value);
    l->data = NULL;
    l->value = NULL;
}

/* A random row: uniform logits, sometimes coarsely quantised (ties, and ties across SIMD
 * blocks), sometimes with a dominant token (so drafts get accepted), sometimes with many
 * -inf entries; at least one entry is always finite. */
static void fill_random_row(logits_rows *l, int64_t row, float spread) {
    const int64_t V = l->n_vocab;
    const int quantise = rng_chance(0.3);
    const double neg_inf_density = rng_chance(0.3) ? 0.6 * rng_unit() : 0.0;
    for (int64_t t = 0; t < V; ++t) {
        float v = (float)((2.0 * rng_unit() - 1.0) * spread);
        if (quantise) v = floorf(v * 2.0f) * 0.5f;
        if (rng_chance(neg_inf_density)) v = -INFINITY;
        logits_set(l, row, t, v);
    }
    if (rng_chance(0.4)) logits_set(l, row, rng_range(0, V - 1), spread + 1.0f + 4.0f * (float)rng_unit());
    logits_set(l, row, rng_range(0, V - 1), (float)(spread * rng_unit())); /* one finite entry */
}

static int64_t argmax_lowest_id(const float *value, int64_t V) {
    int64_t best = 0;
    for (int64_t t = 1; t < V; ++t)
        if (value[t] > value[best]) best = t;
    return best;
}

/* log-softmax of the raw row at token, in double: what out_logprobs must report. */
static double reference_logprob(const float *value, int64_t V, int64_t token) {
    const float max = value[argmax_lowest_id(value, V)];
    double z = 0.0;
    for (int64_t t = 0; t < V; ++t) z += exp((double)value[t] - (double)max);
    return (double)value[token] - (double)max - log(z);
}

/* ==== sampling parameters ================================================================= */

static pyspec_sampling_params plain_params(float temperature) {
    pyspec_sampling_params p = { temperature, 0, 1.0f, 0.0f, 12345u };
    return p;
}

static int is_greedy(const pyspec_sampling_params *p) { return !(p->temperature > 0.0f); }

/* Random but valid: every transform independently on or off, greedy one time in five. */
static pyspec_sampling_params random_params(int64_t V, float min_temperature) {
    pyspec_sampling_params p = { 0 };
    p.seed = rng_u64();
    if (rng_chance(0.2)) p.temperature = rng_chance(0.5) ? 0.0f : -1.0f;
    else p.temperature = min_temperature + (float)((2.0 - min_temperature) * rng_unit());
    if (rng_chance(0.5)) p.top_k = rng_chance(0.5) ? 0 : -3;
    else p.top_k = (int32_t)rng_range(1, rng_chance(0.8) ? 50 : V + 10);
    p.top_p = rng_chance(0.5) ? 1.0f : 0.05f + 0.95f * (float)rng_unit();
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) p.top_p = 1.0f;
    if (rng_chance(0.5)) p.min_p = rng_chance(0.5) ? 0.0f : -0.5f;
    else p.min_p = 0.005f + 0.4f * (float)rng_unit();
    return p;
}

/* ==== create / free ======================================================================= */

static pyspec_verifier *make_verifier(int64_t max_vocab, int32_t max_threads) {
    pyspec_verifier *v = NULL;
    pyspec_error err;
    pyspec_status st = pyspec_verifier_create(max_vocab, max_threads, &v, &err);
    if (st != PYSPEC_OK || !v) {
        printf("cannot create a verifier (%lld, %d): %s\n", (long long)max_vocab, max_threads,
               st != PYSPEC_OK ? err.message : "NULL handle");
        exit(2);
    }
    return v;
}

/* ==== 1. Philox known answers and the uniform ============================================= */

static void test_philox_known_answers(void) {
    set_context("Philox4x32-10 known answers (Random123 kat_vectors)");
    static const struct {
        uint32_t counter[4], key[2], out[4];
    } kat[] = {
        { { 0u, 0u, 0u, 0u }, { 0u, 0u }, { 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u } },
        { { 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu },
          { 0xffffffffu, 0xffffffffu },
          { 0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu } },
        { { 0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u },
          { 0xa4093822u, 0x299f31d0u },
          { 0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u } },
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; ++i) {
        uint32_t out[4] = { 0, 0, 0, 0 };
        pyspec_philox4x32_10(kat[i].counter, kat[i].key, out);
        CHECK(memcmp(out, kat[i].out, sizeof out) == 0,
              "vector %zu: got %08x %08x %08x %08x, want %08x %08x %08x %08x", i, out[0], out[1],
              out[2], out[3], kat[i].out[0], kat[i].out[1], kat[i].out[2], kat[i].out[3]);
    }
    /* No status to return, so NULL must simply be survived. */
    uint32_t c[4] = { 0 }, k[2] = { 0 }, o[4];
    pyspec_philox4x32_10(NULL, k, o);
    pyspec_philox4x32_10(c, NULL, o);
    pyspec_philox4x32_10(c, k, NULL);
    CHECK(1, "NULL arguments to pyspec_philox4x32_10 did not crash");
}

static void test_uniform(void) {
    set_context("pyspec_uniform");
    const int n = 20000;
    double sum = 0.0;
    int in_range = 1, deterministic = 1;
    for (int i = 0; i < n; ++i) {
        double u = pyspec_uniform(0xDEADBEEFull, i, PYSPEC_PURPOSE_SAMPLE);
        in_range &= u >= 0.0 && u < 1.0;
        deterministic &= u == pyspec_uniform(0xDEADBEEFull, i, PYSPEC_PURPOSE_SAMPLE);
        sum += u;
    }
    CHECK(in_range, "a draw fell outside [0, 1)");
    CHECK(deterministic, "the same (seed, position, purpose) gave two different draws");
    CHECK(fabs(sum / n - 0.5) < 0.01, "mean of %d draws is %g", n, sum / n);
    const int64_t extremes[] = { 0, 1, INT64_MAX, (int64_t)1 << 40 };
    for (size_t i = 0; i < sizeof extremes / sizeof extremes[0]; ++i) {
        double u = pyspec_uniform(UINT64_MAX, extremes[i], PYSPEC_PURPOSE_DRAFT);
        CHECK(u >= 0.0 && u < 1.0, "position %lld gave %g", (long long)extremes[i], u);
    }

    /* Each purpose is its own stream: the acceptance draw must never equal the residual or
     * the sample draw at the same position. */
    const int32_t purposes[] = { PYSPEC_PURPOSE_SAMPLE, PYSPEC_PURPOSE_ACCEPT,
                                 PYSPEC_PURPOSE_RESIDUAL, PYSPEC_PURPOSE_DRAFT };
    for (int a = 0; a < 4; ++a)
        for (int b = a + 1; b < 4; ++b)
            CHECK(pyspec_uniform(7, 100, purposes[a]) != pyspec_uniform(7, 100, purposes[b]),
                  "purposes %d and %d gave the same draw", purposes[a], purposes[b]);
    CHECK(pyspec_uniform(7, 100, 1) != pyspec_uniform(7, 101, 1), "positions 100 and 101 agree");
    CHECK(pyspec_uniform(7, 5, 1) != pyspec_uniform(7, 5 + ((int64_t)1 << 32), 1),
          "the high half of the position is ignored");
    CHECK(pyspec_uniform(7, 100, 1) != pyspec_uniform(8, 100, 1), "seeds 7 and 8 agree");
    CHECK(pyspec_uniform(7, 100, 1) != pyspec_uniform(7 + ((uint64_t)1 << 32), 100, 1),
          "the high half of the seed is ignored");
}

/* ==== 2. argument errors ================================================================== */

/* One failing call, run twice: with an error struct (which must then carry the status and a
 * message naming the argument) and with err == NULL (which must give the same status). */
typedef pyspec_status (*api_call_fn)(const void *call, pyspec_error *err);

static void expect_status_either(api_call_fn fn, const void *call, pyspec_status want_a,
                                 pyspec_status want_b, const char *arg_name, const char *what) {
    pyspec_error err;
    err.status = -12345;
    memset(err.message, 0, sizeof err.message);
    pyspec_status got = fn(call, &err);
    CHECK(got == want_a || got == want_b, "%s: status %d (%s), want %d (%s)", what, (int)got,
          pyspec_status_string(got), (int)want_a, pyspec_status_string(want_a));
    if (got != PYSPEC_OK) {
        CHECK(err.status == (int32_t)got, "%s: err.status %d but returned %d", what,
              (int)err.status, (int)got);
        CHECK(err.message[0] != '\0' && memchr(err.message, '\0', sizeof err.message) != NULL,
              "%s: err.message is empty or not NUL-terminated", what);
        if (arg_name)
            CHECK(strstr(err.message, arg_name) != NULL, "%s: message \"%s\" does not name %s",
                  what, err.message, arg_name);
    }
    pyspec_status got_null = fn(call, NULL);
    CHECK(got_null == got, "%s: status %d with err == NULL but %d with err", what,
          (int)got_null, (int)got);
}

static void expect_status(api_call_fn fn, const void *call, pyspec_status want,
                          const char *arg_name, const char *what) {
    expect_status_either(fn, call, want, want, arg_name, what);
}

typedef struct create_call {
    int64_t max_vocab;
    int32_t max_threads;
    int     null_out;
} create_call;

static pyspec_status call_create(const void *c_, pyspec_error *err) {
    const create_call *c = c_;
    pyspec_verifier *v = NULL;
    pyspec_status st = pyspec_verifier_create(c->max_vocab, c->max_threads,
                                              c->null_out ? NULL : &v, err);
    pyspec_verifier_free(v); /* in case it succeeded */
    return st;
}

typedef struct sample_call {
    pyspec_verifier              *v;
    const void                   *logits;
    int64_t                       n_vocab;
    int32_t                       dtype;
    const pyspec_sampling_params *params;
    int64_t                       position;
    int32_t                      *out_token;
    float                        *out_prob;
} sample_call;

static pyspec_status call_sample(const void *c_, pyspec_error *err) {
    const sample_call *c = c_;
    return pyspec_sample(c->v, c->logits, c->n_vocab, c->dtype, c->params, c->position,
                         c->out_token, c->out_prob, err);
}

typedef struct distribution_call {
    pyspec_verifier              *v;
    const void                   *logits;
    int64_t                       n_vocab;
    int32_t                       dtype;
    const pyspec_sampling_params *params;
    float                        *out_probs;
} distribution_call;

static pyspec_status call_distribution(const void *c_, pyspec_error *err) {
    const distribution_call *c = c_;
    return pyspec_distribution(c->v, c->logits, c->n_vocab, c->dtype, c->params, c->out_probs, err);
}

typedef struct sparse_call {
    pyspec_verifier              *v;
    const void                   *logits;
    int64_t                       n_vocab;
    int32_t                       dtype;
    const pyspec_sampling_params *params;
    int32_t                      *out_tokens;
    float                        *out_probs;
    int64_t                       capacity;
    int64_t                      *out_n;
} sparse_call;

static pyspec_status call_sparse(const void *c_, pyspec_error *err) {
    const sparse_call *c = c_;
    return pyspec_distribution_sparse(c->v, c->logits, c->n_vocab, c->dtype, c->params,
                                      c->out_tokens, c->out_probs, c->capacity, c->out_n, err);
}

typedef struct batch_call {
    pyspec_verifier       *v;
    const pyspec_sequence *seqs;
    int64_t                n_seqs;
    int64_t                n_vocab;
    int32_t                dtype;
    int32_t                n_threads;
} batch_call;

static pyspec_status call_batch(const void *c_, pyspec_error *err) {
    const batch_call *c = c_;
    return pyspec_verify_batch(c->v, c->seqs, c->n_seqs, c->n_vocab, c->dtype, c->n_threads, err);
}

/* The invalid sampling parameters, one per case; returns 0 past the last case. */
static int bad_params_case(int which, pyspec_sampling_params *p, const char **arg) {
    *p = plain_params(0.8f);
    switch (which) {
    case 0: p->top_p = 0.0f; *arg = "top_p"; return 1;
    case 1: p->top_p = -0.5f; *arg = "top_p"; return 1;
    case 2: p->top_p = 1.5f; *arg = "top_p"; return 1;
    case 3: p->top_p = NAN; *arg = "top_p"; return 1;
    case 4: p->temperature = NAN; *arg = "temperature"; return 1;
    case 5: p->temperature = INFINITY; *arg = "temperature"; return 1;
    case 6: p->temperature = -INFINITY; *arg = "temperature"; return 1;
    case 7: p->min_p = 1.5f; *arg = "min_p"; return 1;
    case 8: p->min_p = NAN; *arg = "min_p"; return 1;
    default: return 0;
    }
}

/* Parameters at the edge of their range, all valid. */
static int edge_params_case(int which, pyspec_sampling_params *p) {
    *p = plain_params(0.8f);
    switch (which) {
    case 0: p->top_p = 1.0f; return 1;
    case 1: p->min_p = 1.0f; return 1;
    case 2: p->min_p = -INFINITY; return 1;
    case 3: p->temperature = -1.0f; return 1;
    case 4: p->temperature = -0.0f; return 1;
    case 5: p->top_k = -5; return 1;
    case 6: p->top_k = INT32_MAX; return 1;
    case 7: p->top_p = FLT_MIN; return 1;
    default: return 0;
    }
}

static void test_info_functions(void) {
    set_context("status strings, version, SIMD name");
    for (int32_t s = -3; s <= 12; ++s) {
        const char *str = pyspec_status_string(s);
        CHECK(str != NULL && str[0] != '\0', "pyspec_status_string(%d) is NULL or empty", s);
    }
    CHECK(pyspec_status_string(INT32_MAX) != NULL, "pyspec_status_string(INT32_MAX) is NULL");
    CHECK(pyspec_version() != NULL && pyspec_version()[0] != '\0', "pyspec_version is empty");
    const char *simd = pyspec_simd_name();
    CHECK(simd && (!strcmp(simd, "avx512") || !strcmp(simd, "avx2") || !strcmp(simd, "scalar")),
          "pyspec_simd_name gave \"%s\"", simd ? simd : "(null)");
    int32_t cuda = pyspec_has_cuda();
    CHECK(cuda == 0 || cuda == 1, "pyspec_has_cuda gave %d", cuda);
}

static void test_create_errors(void) {
    set_context("pyspec_verifier_create arguments");
    const struct {
        create_call call;
        pyspec_status want;
        const char *arg, *what;
    } cases[] = {
        { { 16, 1, 1 }, PYSPEC_ERR_NULL, "out", "out == NULL" },
        { { 0, 1, 0 }, PYSPEC_ERR_SHAPE, "max_vocab", "max_vocab 0" },
        { { -1, 1, 0 }, PYSPEC_ERR_SHAPE, "max_vocab", "max_vocab -1" },
        { { (int64_t)INT32_MAX + 1, 1, 0 }, PYSPEC_ERR_SHAPE, "max_vocab", "max_vocab 2^31" },
        { { 16, 0, 0 }, PYSPEC_ERR_SHAPE, "max_threads", "max_threads 0" },
        { { 16, -1, 0 }, PYSPEC_ERR_SHAPE, "max_threads", "max_threads -1" },
        { { 16, 1025, 0 }, PYSPEC_ERR_SHAPE, "max_threads", "max_threads 1025" },
        { { 1, 1, 0 }, PYSPEC_OK, NULL, "max_vocab 1, max_threads 1" },
        { { 16, 4, 0 }, PYSPEC_OK, NULL, "max_vocab 16, max_threads 4" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        expect_status(call_create, &cases[i].call, cases[i].want, cases[i].arg, cases[i].what);
    pyspec_verifier_free(NULL); /* documented as allowed */
    CHECK(1, "pyspec_verifier_free(NULL) did not crash");
}

static void test_sample_and_distribution_errors(void) {
    enum { V = 40 };
    pyspec_verifier *v = make_verifier(V, 2);
    logits_rows l;
    logits_alloc(&l, PYSPEC_F32, 1, V, V);
    fill_random_row(&l, 0, 5.0f);
    pyspec_sampling_params good = plain_params(0.8f);
    int32_t *token = xmalloc(sizeof *token);
    float *prob = xmalloc(sizeof *prob);
    float *probs = xmalloc(V * sizeof *probs);

    set_context("pyspec_sample arguments");
    const sample_call base = { v, l.data, V, PYSPEC_F32, &good, 3, token, prob };
    sample_call c;
    expect_status(call_sample, &base, PYSPEC_OK, NULL, "valid call");
    c = base; c.out_prob = NULL;   expect_status(call_sample, &c, PYSPEC_OK, NULL, "out_prob NULL is allowed");
    c = base; c.v = NULL;          expect_status(call_sample, &c, PYSPEC_ERR_NULL, "verifier", "verifier NULL");
    c = base; c.logits = NULL;     expect_status(call_sample, &c, PYSPEC_ERR_NULL, "logits", "logits NULL");
    c = base; c.params = NULL;     expect_status(call_sample, &c, PYSPEC_ERR_NULL, "params", "params NULL");
    c = base; c.out_token = NULL;  expect_status(call_sample, &c, PYSPEC_ERR_NULL, "out_token", "out_token NULL");
    c = base; c.n_vocab = 0;       expect_status(call_sample, &c, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab 0");
    c = base; c.n_vocab = -1;      expect_status(call_sample, &c, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab -1");
    c = base; c.n_vocab = V + 1;   expect_status(call_sample, &c, PYSPEC_ERR_CAPACITY, "n_vocab", "n_vocab > max_vocab");
    c = base; c.dtype = 7;         expect_status(call_sample, &c, PYSPEC_ERR_DTYPE, "dtype", "dtype 7");
    c = base; c.dtype = -1;        expect_status(call_sample, &c, PYSPEC_ERR_DTYPE, "dtype", "dtype -1");
    c = base; c.position = -1;     expect_status(call_sample, &c, PYSPEC_ERR_SHAPE, "position", "position -1");
    c = base; c.position = INT64_MAX; expect_status(call_sample, &c, PYSPEC_OK, NULL, "position INT64_MAX");
    pyspec_sampling_params p = { 0 };
    const char *arg;
    char what[96];
    for (int i = 0; bad_params_case(i, &p, &arg); ++i) {
        snprintf(what, sizeof what, "bad params case %d (%s)", i, arg);
        c = base; c.params = &p;
        expect_status(call_sample, &c, PYSPEC_ERR_PARAM, arg, what);
    }
    for (int i = 0; edge_params_case(i, &p); ++i) {
        snprintf(what, sizeof what, "edge params case %d", i);
        c = base; c.params = &p;
        expect_status(call_sample, &c, PYSPEC_OK, NULL, what);
    }

    set_context("pyspec_distribution arguments");
    const distribution_call dbase = { v, l.data, V, PYSPEC_F32, &good, probs };
    distribution_call d;
    expect_status(call_distribution, &dbase, PYSPEC_OK, NULL, "valid call");
    d = dbase; d.v = NULL;         expect_status(call_distribution, &d, PYSPEC_ERR_NULL, "verifier", "verifier NULL");
    d = dbase; d.logits = NULL;    expect_status(call_distribution, &d, PYSPEC_ERR_NULL, "logits", "logits NULL");
    d = dbase; d.params = NULL;    expect_status(call_distribution, &d, PYSPEC_ERR_NULL, "params", "params NULL");
    d = dbase; d.out_probs = NULL; expect_status(call_distribution, &d, PYSPEC_ERR_NULL, "out_probs", "out_probs NULL");
    d = dbase; d.n_vocab = 0;      expect_status(call_distribution, &d, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab 0");
    d = dbase; d.n_vocab = V + 1;  expect_status(call_distribution, &d, PYSPEC_ERR_CAPACITY, "n_vocab", "n_vocab > max_vocab");
    d = dbase; d.dtype = 7;        expect_status(call_distribution, &d, PYSPEC_ERR_DTYPE, "dtype", "dtype 7");
    for (int i = 0; bad_params_case(i, &p, &arg); ++i) {
        snprintf(what, sizeof what, "bad params case %d (%s)", i, arg);
        d = dbase; d.params = &p;
        expect_status(call_distribution, &d, PYSPEC_ERR_PARAM, arg, what);
    }
    for (int i = 0; edge_params_case(i, &p); ++i) {
        snprintf(what, sizeof what, "edge params case %d", i);
        d = dbase; d.params = &p;
        expect_status(call_distribution, &d, PYSPEC_OK, NULL, what);
    }

    set_context("pyspec_distribution_sparse arguments");
    int32_t *sp_tokens = xmalloc(V * sizeof *sp_tokens);
    int64_t *sp_n = xmalloc(sizeof *sp_n);
    const sparse_call sbase = { v, l.data, V, PYSPEC_F32, &good, sp_tokens, probs, V, sp_n };
    sparse_call sc;
    expect_status(call_sparse, &sbase, PYSPEC_OK, NULL, "valid call");
    sc = sbase; sc.v = NULL;          expect_status(call_sparse, &sc, PYSPEC_ERR_NULL, "verifier", "verifier NULL");
    sc = sbase; sc.logits = NULL;     expect_status(call_sparse, &sc, PYSPEC_ERR_NULL, "logits", "logits NULL");
    sc = sbase; sc.params = NULL;     expect_status(call_sparse, &sc, PYSPEC_ERR_NULL, "params", "params NULL");
    sc = sbase; sc.out_tokens = NULL; expect_status(call_sparse, &sc, PYSPEC_ERR_NULL, "out_tokens", "out_tokens NULL");
    sc = sbase; sc.out_probs = NULL;  expect_status(call_sparse, &sc, PYSPEC_ERR_NULL, "out_probs", "out_probs NULL");
    sc = sbase; sc.out_n = NULL;      expect_status(call_sparse, &sc, PYSPEC_ERR_NULL, "out_n", "out_n NULL");
    sc = sbase; sc.n_vocab = 0;       expect_status(call_sparse, &sc, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab 0");
    sc = sbase; sc.n_vocab = V + 1;   expect_status(call_sparse, &sc, PYSPEC_ERR_CAPACITY, "n_vocab", "n_vocab > max_vocab");
    sc = sbase; sc.dtype = 7;         expect_status(call_sparse, &sc, PYSPEC_ERR_DTYPE, "dtype", "dtype 7");
    sc = sbase; sc.capacity = 0;      expect_status(call_sparse, &sc, PYSPEC_ERR_CAPACITY, "capacity", "capacity 0");
    sc = sbase; sc.capacity = -1;     expect_status_either(call_sparse, &sc, PYSPEC_ERR_CAPACITY, PYSPEC_ERR_SHAPE, "capacity", "capacity -1");
    for (int i = 0; bad_params_case(i, &p, &arg); ++i) {
        snprintf(what, sizeof what, "bad params case %d (%s)", i, arg);
        sc = sbase; sc.params = &p;
        expect_status(call_sparse, &sc, PYSPEC_ERR_PARAM, arg, what);
    }
    for (int i = 0; edge_params_case(i, &p); ++i) {
        snprintf(what, sizeof what, "edge params case %d", i);
        sc = sbase; sc.params = &p;
        expect_status(call_sparse, &sc, PYSPEC_OK, NULL, what);
    }
    free(sp_tokens);
    free(sp_n);

    free(token);
    free(prob);
    free(probs);
    logits_free(&l);
    pyspec_verifier_free(v);
}

/* A small valid two-sequence batch that the argument tests break one field at a time. */
typedef struct error_batch {
    logits_rows        logits;
    int32_t           *drafts;     /* [N_DRAFT] */
    float             *dense_q;    /* [N_DRAFT][V] */
    float             *sparse_q;   /* [N_DRAFT][SPARSE_STRIDE] */
    int32_t           *sparse_tok; /* [N_DRAFT][SPARSE_STRIDE] */
    pyspec_draft_probs dense, sparse;
    int32_t           *out_tokens[2];
    int64_t           *out_n[2];
    pyspec_sequence    seqs[2];
} error_batch;

enum { EB_V = 40, EB_N_DRAFT = 2, EB_SPARSE_STRIDE = 3 };

static void error_batch_init(error_batch *b) {
    logits_alloc(&b->logits, PYSPEC_F32, EB_N_DRAFT + 1, EB_V, EB_V + 2);
    for (int64_t r = 0; r < EB_N_DRAFT + 1; ++r) fill_random_row(&b->logits, r, 4.0f);
    b->drafts = xmalloc(EB_N_DRAFT * sizeof(int32_t));
    b->dense_q = xmalloc(EB_N_DRAFT * EB_V * sizeof(float));
    b->sparse_q = xmalloc(EB_N_DRAFT * EB_SPARSE_STRIDE * sizeof(float));
    b->sparse_tok = xmalloc(EB_N_DRAFT * EB_SPARSE_STRIDE * sizeof(int32_t));
    for (int i = 0; i < EB_N_DRAFT; ++i) {
        b->drafts[i] = 3 + i;
        for (int t = 0; t < EB_V; ++t) b->dense_q[i * EB_V + t] = 1.0f / EB_V;
        for (int j = 0; j < EB_SPARSE_STRIDE; ++j) {
            b->sparse_tok[i * EB_SPARSE_STRIDE + j] = b->drafts[i] + j;
            b->sparse_q[i * EB_SPARSE_STRIDE + j] = 1.0f / EB_SPARSE_STRIDE;
        }
    }
    b->dense = (pyspec_draft_probs){ b->dense_q, NULL, EB_V, 0 };
    b->sparse = (pyspec_draft_probs){ b->sparse_q, b->sparse_tok, EB_SPARSE_STRIDE, EB_SPARSE_STRIDE };
    for (int s = 0; s < 2; ++s) {
        b->out_tokens[s] = xmalloc((EB_N_DRAFT + 1) * sizeof(int32_t));
        b->out_n[s] = xmalloc(sizeof(int64_t));
        b->seqs[s] = (pyspec_sequence){ b->logits.data, b->logits.stride, b->drafts, EB_N_DRAFT,
                                        s == 0 ? NULL : &b->dense, plain_params(0.7f), 10 * s,
                                        b->out_tokens[s], NULL, b->out_n[s] };
    }
}

static void error_batch_free(error_batch *b) {
    logits_free(&b->logits);
    free(b->drafts);
    free(b->dense_q);
    free(b->sparse_q);
    free(b->sparse_tok);
    for (int s = 0; s < 2; ++s) {
        free(b->out_tokens[s]);
        free(b->out_n[s]);
    }
}

/* Runs the batch with sequence `which` replaced by `broken`; the error must name the field
 * and (through "seqs[i]") the sequence. */
static void expect_sequence_error(pyspec_verifier *v, const error_batch *b, int which,
                                  pyspec_sequence broken, pyspec_status want,
                                  const char *arg, const char *what) {
    pyspec_sequence seqs[2] = { b->seqs[0], b->seqs[1] };
    seqs[which] = broken;
    const batch_call c = { v, seqs, 2, EB_V, PYSPEC_F32, 1 };
    char where[16], full_what[160];
    snprintf(where, sizeof where, "seqs[%d]", which);
    snprintf(full_what, sizeof full_what, "%s in seqs[%d]", what, which);
    expect_status(call_batch, &c, want, arg, full_what);
    if (want != PYSPEC_OK) expect_status(call_batch, &c, want, where, full_what);
}

static void test_verify_batch_errors(void) {
    set_context("pyspec_verify_batch arguments");
    pyspec_verifier *v = make_verifier(EB_V, 2);
    error_batch b;
    error_batch_init(&b);
    const batch_call base = { v, b.seqs, 2, EB_V, PYSPEC_F32, 1 };
    batch_call c;
    expect_status(call_batch, &base, PYSPEC_OK, NULL, "valid batch");
    c = base; c.v = NULL;       expect_status(call_batch, &c, PYSPEC_ERR_NULL, "verifier", "verifier NULL");
    c = base; c.seqs = NULL;    expect_status(call_batch, &c, PYSPEC_ERR_NULL, "seqs", "seqs NULL");
    c = base; c.seqs = NULL; c.n_seqs = 0; expect_status(call_batch, &c, PYSPEC_OK, NULL, "no sequences");
    c = base; c.n_seqs = -1;    expect_status(call_batch, &c, PYSPEC_ERR_SHAPE, "n_seqs", "n_seqs -1");
    c = base; c.n_vocab = 0;    expect_status(call_batch, &c, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab 0");
    c = base; c.n_vocab = -7;   expect_status(call_batch, &c, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab -7");
    c = base; c.n_vocab = EB_V + 1; expect_status(call_batch, &c, PYSPEC_ERR_CAPACITY, "n_vocab", "n_vocab > max_vocab");
    /* 0 threads is not "more than the verifier was created for"; SHAPE would fit the header's
     * wording better, CAPACITY is what the range check gives: accept either. */
    c = base; c.n_threads = 0;  expect_status_either(call_batch, &c, PYSPEC_ERR_CAPACITY, PYSPEC_ERR_SHAPE, "n_threads", "n_threads 0");
    c = base; c.n_threads = -1; expect_status_either(call_batch, &c, PYSPEC_ERR_CAPACITY, PYSPEC_ERR_SHAPE, "n_threads", "n_threads -1");
    c = base; c.n_threads = 3;  expect_status(call_batch, &c, PYSPEC_ERR_CAPACITY, "n_threads", "n_threads > max_threads");
    c = base; c.n_threads = 2;  expect_status(call_batch, &c, PYSPEC_OK, NULL, "n_threads == max_threads");
    c = base; c.dtype = 7;      expect_status(call_batch, &c, PYSPEC_ERR_DTYPE, "dtype", "dtype 7");
    c = base; c.dtype = 3;      expect_status(call_batch, &c, PYSPEC_ERR_DTYPE, "dtype", "dtype 3");

    for (int which = 0; which < 2; ++which) {
        const pyspec_sequence good = b.seqs[which];
        pyspec_sequence s;
        s = good; s.target_logits = NULL;  expect_sequence_error(v, &b, which, s, PYSPEC_ERR_NULL, "target_logits", "target_logits NULL");
        s = good; s.out_tokens = NULL;     expect_sequence_error(v, &b, which, s, PYSPEC_ERR_NULL, "out_tokens", "out_tokens NULL");
        s = good; s.out_n_accepted = NULL; expect_sequence_error(v, &b, which, s, PYSPEC_ERR_NULL, "out_n_accepted", "out_n_accepted NULL");
        s = good; s.draft_tokens = NULL;   expect_sequence_error(v, &b, which, s, PYSPEC_ERR_NULL, "draft_tokens", "draft_tokens NULL with n_draft 2");
        s = good; s.n_draft = -1;          expect_sequence_error(v, &b, which, s, PYSPEC_ERR_SHAPE, "n_draft", "n_draft -1");
        s = good; s.n_draft = 0; s.draft_tokens = NULL; expect_sequence_error(v, &b, which, s, PYSPEC_OK, NULL, "n_draft 0, draft_tokens NULL");
        s = good; s.logits_row_stride = EB_V - 1; expect_sequence_error(v, &b, which, s, PYSPEC_ERR_SHAPE, "logits_row_stride", "logits_row_stride < n_vocab");
        s = good; s.logits_row_stride = 0; expect_sequence_error(v, &b, which, s, PYSPEC_ERR_SHAPE, "logits_row_stride", "logits_row_stride 0");
        s = good; s.position = -1;         expect_sequence_error(v, &b, which, s, PYSPEC_ERR_SHAPE, "position", "position -1");
        s = good; s.position = INT64_MAX;  expect_sequence_error(v, &b, which, s, PYSPEC_ERR_SHAPE, "position", "position + n_draft overflows");
        pyspec_sampling_params p = { 0 };
        const char *arg;
        char what[96];
        for (int i = 0; bad_params_case(i, &p, &arg); ++i) {
            snprintf(what, sizeof what, "bad params case %d (%s)", i, arg);
            s = good; s.params = p;
            expect_sequence_error(v, &b, which, s, PYSPEC_ERR_PARAM, arg, what);
        }
    }

    /* Token ids: checked up front, whatever row they sit in. */
    int32_t *bad_drafts = xmalloc(EB_N_DRAFT * sizeof(int32_t));
    const int32_t bad_ids[] = { -1, EB_V, INT32_MIN, INT32_MAX };
    for (size_t k = 0; k < sizeof bad_ids / sizeof bad_ids[0]; ++k) {
        char what[64];
        snprintf(what, sizeof what, "draft token %d in the last draft row", bad_ids[k]);
        memcpy(bad_drafts, b.drafts, EB_N_DRAFT * sizeof(int32_t));
        bad_drafts[EB_N_DRAFT - 1] = bad_ids[k];
        pyspec_sequence s = b.seqs[0];
        s.draft_tokens = bad_drafts;
        expect_sequence_error(v, &b, 0, s, PYSPEC_ERR_TOKEN, "draft_tokens", what);
        s.draft_probs = &b.dense;
        expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_TOKEN, "draft_tokens", what);
    }
    free(bad_drafts);

    /* Draft probability layouts. */
    pyspec_sequence s = b.seqs[1];
    pyspec_draft_probs dp;
    s.draft_probs = &dp;
    dp = b.dense; dp.row_stride = EB_V - 1;
    expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_SHAPE, "row_stride", "dense draft_probs row_stride < n_vocab");
    dp = b.dense; dp.probs = NULL;
    expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_NULL, "probs", "dense draft_probs->probs NULL");
    dp = b.sparse;
    expect_sequence_error(v, &b, 1, s, PYSPEC_OK, NULL, "valid sparse draft_probs");
    dp = b.sparse; dp.probs = NULL;
    expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_NULL, "probs", "sparse draft_probs->probs NULL");
    dp = b.sparse; dp.n_per_row = -1;
    expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_SHAPE, "n_per_row", "sparse n_per_row -1");
    dp = b.sparse; dp.n_per_row = EB_SPARSE_STRIDE + 1;
    expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_SHAPE, "n_per_row", "sparse n_per_row > row_stride");
    const int32_t saved = b.sparse_tok[EB_SPARSE_STRIDE + 2]; /* row 1, last entry */
    for (size_t k = 0; k < 2; ++k) {
        b.sparse_tok[EB_SPARSE_STRIDE + 2] = k == 0 ? -1 : EB_V;
        dp = b.sparse;
        expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_TOKEN, "draft_probs",
                              k == 0 ? "sparse token -1" : "sparse token == n_vocab");
    }
    b.sparse_tok[EB_SPARSE_STRIDE + 2] = saved;

    error_batch_free(&b);
    pyspec_verifier_free(v);
}

/* ==== 3. bad logits ======================================================================= */

static const int64_t k_tail_vocabs[] = { 1, 7, 31, 32, 33, 63, 64, 65, 1000, 4099 };
#define N_TAIL_VOCABS ((int)(sizeof k_tail_vocabs / sizeof k_tail_vocabs[0]))
static const int32_t k_dtypes[] = { PYSPEC_F32, PYSPEC_F16, PYSPEC_BF16 };

/* Row 0 holds the bad value; every reader of a row must refuse it, whatever the params
 * (greedy scans for the max, top-k keeps a heap, top-k off gathers a second pass). */
/* `says`: the words the message must hold (the row, the value's kind and its vocabulary
 * index), checked at every SIMD-tail size by the callers. */
static void expect_row_rejected(pyspec_verifier *v, const logits_rows *l, const char *what, const char *says) {
    int32_t *token = xmalloc(sizeof *token);
    float *probs = xmalloc((size_t)l->n_vocab * sizeof *probs);
    int32_t *sparse_tokens = xmalloc((size_t)l->n_vocab * sizeof *sparse_tokens);
    int32_t *out_tokens = xmalloc(sizeof *out_tokens);
    int64_t *out_n = xmalloc(sizeof *out_n);
    pyspec_sampling_params params[3] = { plain_params(0.0f), plain_params(1.0f), plain_params(1.0f) };
    params[1].top_k = 5;
    params[2].top_p = 0.9f;
    params[2].min_p = 0.01f;
    char full[160];
    for (int k = 0; k < 3; ++k) {
        snprintf(full, sizeof full, "%s, params %d, pyspec_sample", what, k);
        const sample_call sc = { v, l->data, l->n_vocab, l->dtype, &params[k], 0, token, NULL };
        expect_status(call_sample, &sc, PYSPEC_ERR_LOGITS, says, full);
        snprintf(full, sizeof full, "%s, params %d, pyspec_distribution", what, k);
        const distribution_call dc = { v, l->data, l->n_vocab, l->dtype, &params[k], probs };
        expect_status(call_distribution, &dc, PYSPEC_ERR_LOGITS, says, full);
        snprintf(full, sizeof full, "%s, params %d, pyspec_distribution_sparse", what, k);
        const sparse_call spc = { v, l->data, l->n_vocab, l->dtype, &params[k], sparse_tokens,
                                  probs, l->n_vocab, out_n };
        expect_status(call_sparse, &spc, PYSPEC_ERR_LOGITS, says, full);
        snprintf(full, sizeof full, "%s, params %d, pyspec_verify_batch", what, k);
        const pyspec_sequence seq = { l->data, l->stride, NULL, 0, NULL, params[k], 0,
                                      out_tokens, NULL, out_n };
        const batch_call bc = { v, &seq, 1, l->n_vocab, l->dtype, 1 };
        expect_status(call_batch, &bc, PYSPEC_ERR_LOGITS, says, full);
    }
    free(token);
    free(probs);
    free(sparse_tokens);
    free(out_tokens);
    free(out_n);
}

/* Row 1 holds the bad value; it is read only when the greedy draft for row 0 is accepted. */
static void check_bad_row_only_when_reached(pyspec_verifier *v, const logits_rows *l, const char *what,
                                            const char *says) {
    const int64_t V = l->n_vocab;
    const int32_t best = (int32_t)argmax_lowest_id(row_values(l, 0), V);
    int32_t *draft = xmalloc(sizeof *draft);
    int32_t *out_tokens = xmalloc(2 * sizeof *out_tokens);
    int64_t *out_n = xmalloc(sizeof *out_n);
    for (int32_t threads = 1; threads <= 2; ++threads) {
        pyspec_sequence seq = { l->data, l->stride, draft, 1, NULL, plain_params(0.0f), 5,
                                out_tokens, NULL, out_n };
        const batch_call bc = { v, &seq, 1, V, l->dtype, threads };
        char full[160];
        *draft = best;
        snprintf(full, sizeof full, "%s, row 0 accepted, %d threads", what, threads);
        expect_status(call_batch, &bc, PYSPEC_ERR_LOGITS, says, full);
        if (V > 1) {
            *draft = (int32_t)((best + 1) % V);
            snprintf(full, sizeof full, "%s, row 0 rejected, %d threads", what, threads);
            expect_status(call_batch, &bc, PYSPEC_OK, NULL, full);
            pyspec_status st = pyspec_verify_batch(v, &seq, 1, V, l->dtype, threads, NULL);
            CHECK(st == PYSPEC_OK && *out_n == 0 && out_tokens[0] == best,
                  "%s: rejected greedy draft gave n_accepted %lld, token %d (want 0, %d)", full,
                  (long long)*out_n, out_tokens[0], best);
        }
    }
    free(draft);
    free(out_tokens);
    free(out_n);
}

static void test_bad_logits(void) {
    pyspec_verifier *v = make_verifier(5000, 2);
    const float bad_values[] = { NAN, INFINITY };
    for (int d = 0; d < 3; ++d)
        for (int vi = 0; vi < N_TAIL_VOCABS; ++vi)
            for (int b = 0; b < 2; ++b) {
                const int64_t V = k_tail_vocabs[vi];
                const int64_t where[] = { 0, V / 2, V - 1 };
                for (int w = 0; w < 3; ++w) {
                    set_context("bad logits: %s, n_vocab %lld, %s at index %lld",
                                dtype_name(k_dtypes[d]), (long long)V, b ? "+inf" : "NaN",
                                (long long)where[w]);
                    logits_rows l;
                    logits_alloc(&l, k_dtypes[d], 1, V, V);
                    fill_random_row(&l, 0, 5.0f);
                    logits_set(&l, 0, where[w], bad_values[b]);
                    char says[96];
                    snprintf(says, sizeof says, "row 0 holds %s at vocabulary index %lld", b ? "+inf" : "NaN",
                             (long long)where[w]);
                    expect_row_rejected(v, &l, g_context, says);
                    logits_free(&l);

                    logits_alloc(&l, k_dtypes[d], 2, V, V + 3);
                    for (int64_t t = 0; t < V; ++t) logits_set(&l, 0, t, (float)((t * 7) % 11) - 5.0f);
                    fill_random_row(&l, 1, 5.0f);
                    logits_set(&l, 1, where[w], bad_values[b]);
                    snprintf(says, sizeof says, "row 1 holds %s at vocabulary index %lld", b ? "+inf" : "NaN",
                             (long long)where[w]);
                    check_bad_row_only_when_reached(v, &l, g_context, says);
                    logits_free(&l);
                }
            }
    pyspec_verifier_free(v);
}

static void test_all_neg_inf_rows(void) {
    pyspec_verifier *v = make_verifier(5000, 1);
    for (int d = 0; d < 3; ++d)
        for (int vi = 0; vi < N_TAIL_VOCABS; ++vi) {
            const int64_t V = k_tail_vocabs[vi];
            set_context("all -inf row: %s, n_vocab %lld", dtype_name(k_dtypes[d]), (long long)V);
            logits_rows l;
            logits_alloc(&l, k_dtypes[d], 1, V, V);
            for (int64_t t = 0; t < V; ++t) logits_set(&l, 0, t, -INFINITY);
            expect_row_rejected(v, &l, g_context, "row 0 has no finite logit");
            logits_free(&l);
        }
    pyspec_verifier_free(v);
}

/* -inf marks a banned token: allowed anywhere, never drawn. The single finite entry at the
 * first or last index checks the SIMD body and tail; the sparse rows check every path. */
static void test_neg_inf_never_sampled(void) {
    pyspec_verifier *v = make_verifier(5000, 1);
    int32_t *token = xmalloc(sizeof *token);
    float *prob = xmalloc(sizeof *prob);
    for (int d = 0; d < 3; ++d)
        for (int vi = 0; vi < N_TAIL_VOCABS; ++vi) {
            const int64_t V = k_tail_vocabs[vi];
            float *probs = xmalloc((size_t)V * sizeof *probs);
            for (int only = 0; only < 2; ++only) { /* one finite entry: first, then last */
                set_context("-inf: %s, n_vocab %lld, only index %s finite", dtype_name(k_dtypes[d]),
                            (long long)V, only ? "last" : "0");
                const int64_t finite = only ? V - 1 : 0;
                logits_rows l;
                logits_alloc(&l, k_dtypes[d], 1, V, V);
                for (int64_t t = 0; t < V; ++t) logits_set(&l, 0, t, t == finite ? -3.0f : -INFINITY);
                for (int k = 0; k < 4; ++k) {
                    pyspec_sampling_params p = plain_params(k == 0 ? 0.0f : 3.0f);
                    if (k == 2) p.top_k = 10;
                    if (k == 3) p.top_p = 0.5f, p.min_p = 0.2f;
                    pyspec_status st = pyspec_sample(v, l.data, V, k_dtypes[d], &p, 11, token, prob, NULL);
                    CHECK(st == PYSPEC_OK && *token == finite && *prob == 1.0f,
                          "params %d: status %d token %d prob %g, want token %lld prob 1", k, st,
                          *token, *prob, (long long)finite);
                }
                logits_free(&l);
            }
            set_context("-inf: %s, n_vocab %lld, mostly -inf", dtype_name(k_dtypes[d]), (long long)V);
            logits_rows l;
            logits_alloc(&l, k_dtypes[d], 1, V, V);
            for (int64_t t = 0; t < V; ++t)
                logits_set(&l, 0, t, (t == 0 || t == V - 1 || rng_chance(0.7)) ? -INFINITY : (float)(rng_unit() * 2.0));
            logits_set(&l, 0, V / 2, 1.0f);
            const float *value = row_values(&l, 0);
            pyspec_sampling_params p = plain_params(50.0f);
            int never_inf = 1;
            for (int64_t pos = 0; pos < 200; ++pos) {
                p.top_k = pos % 3 == 0 ? 0 : (int32_t)(pos % 17);
                pyspec_status st = pyspec_sample(v, l.data, V, k_dtypes[d], &p, pos, token, NULL, NULL);
                never_inf &= st == PYSPEC_OK && *token >= 0 && *token < V && value[*token] > -INFINITY;
            }
            CHECK(never_inf, "a -inf token was sampled (or a sample failed)");
            p.top_k = 0;
            pyspec_status st = pyspec_distribution(v, l.data, V, k_dtypes[d], &p, probs, NULL);
            int zero_on_inf = st == PYSPEC_OK;
            for (int64_t t = 0; t < V; ++t) zero_on_inf &= value[t] > -INFINITY || probs[t] == 0.0f;
            CHECK(zero_on_inf, "the distribution gives a -inf token mass (status %d)", st);
            logits_free(&l);
            free(probs);
        }
    free(token);
    free(prob);
    pyspec_verifier_free(v);
}

/* ==== 5. the transformed distribution ===================================================== */

static const float *g_rank_values; /* qsort has no context argument */

/* llama.cpp's order: descending logit, ties to the lower token id. */
static int compare_rank(const void *a, const void *b) {
    const int32_t ta = *(const int32_t *)a, tb = *(const int32_t *)b;
    const float la = g_rank_values[ta], lb = g_rank_values[tb];
    if (la != lb) return la > lb ? -1 : 1;
    return (ta > tb) - (ta < tb);
}

/* Smallest prefix of the ranked tokens whose softmax mass (over the first n) reaches
 * target_fraction; n when none does. */
static int64_t nucleus_size(const float *value, const int32_t *rank, int64_t n, double target_fraction) {
    const double max = value[rank[0]];
    double z = 0.0, cum = 0.0;
    for (int64_t j = 0; j < n; ++j) z += exp((double)value[rank[j]] - max);
    for (int64_t j = 0; j < n; ++j) {
        cum += exp((double)value[rank[j]] - max);
        if (cum >= target_fraction * z) return j + 1;
    }
    return n;
}

static int64_t min3(int64_t a, int64_t b, int64_t c) {
    int64_t m = a < b ? a : b;
    return m < c ? m : c;
}

/* Checks pyspec_distribution's `probs` for one row against llama.cpp's chain computed here
 * independently: the kept set is the shortest of the top-k, top-p and min-p prefixes of the
 * ranked tokens, and its probabilities are softmax(logit / T) over that set. The top-p and
 * min-p cuts get a small tolerance, as a cut can move by one token when float rounding puts
 * the cumulative mass a hair either side of the target. A kept token whose weight
 * exp((l - max) / T) is below the fixed-point resolution 2^-shift (draw.h) may come out with
 * probability 0: such tokens at the end of the kept prefix count as kept. */
static void check_against_reference(const float *value, int64_t V, const pyspec_sampling_params *p,
                                    const float *probs) {
    int32_t *rank = xmalloc((size_t)V * sizeof *rank);
    int64_t n_finite = 0;
    for (int64_t t = 0; t < V; ++t)
        if (value[t] > -INFINITY) rank[n_finite++] = (int32_t)t;
    g_rank_values = value;
    qsort(rank, (size_t)n_finite, sizeof *rank, compare_rank);

    double sum = 0.0;
    int64_t kept = 0, bad_entries = 0;
    for (int64_t t = 0; t < V; ++t) {
        if (!(probs[t] >= 0.0f && probs[t] <= 1.0f)) ++bad_entries;
        sum += probs[t];
        kept += probs[t] > 0.0f;
    }
    CHECK(bad_entries == 0, "%lld entries are NaN or outside [0, 1]", (long long)bad_entries);
    CHECK(fabs(sum - 1.0) <= 1e-4, "probabilities sum to %.8f", sum);

    if (is_greedy(p)) {
        CHECK(kept == 1 && probs[rank[0]] == 1.0f, "greedy: not one-hot at token %d", rank[0]);
        free(rank);
        return;
    }
    int prefix = 1;
    for (int64_t j = 0; j < kept && j < n_finite; ++j) prefix &= probs[rank[j]] > 0.0f;
    CHECK(prefix, "the kept set is not a prefix of the tokens ranked by logit (ties by id)");

    const int top_k_on = p->top_k > 0 && p->top_k < V;
    const int64_t m_k = top_k_on && p->top_k < n_finite ? p->top_k : n_finite;
    int64_t m_p_lo = m_k, m_p_hi = m_k, m_m_lo = n_finite, m_m_hi = n_finite;
    if (p->top_p < 1.0f) {
        m_p_lo = nucleus_size(value, rank, m_k, (double)p->top_p * (1.0 - 1e-5));
        m_p_hi = nucleus_size(value, rank, m_k, (double)p->top_p * (1.0 + 1e-5));
    }
    if (p->min_p > 0.0f) {
        const float threshold = value[rank[0]] + logf(p->min_p);
        const float tol = 1e-5f * (1.0f + fabsf(threshold));
        m_m_lo = m_m_hi = 0;
        for (int64_t j = 0; j < n_finite; ++j) {
            m_m_lo += value[rank[j]] >= threshold + tol;
            m_m_hi += value[rank[j]] >= threshold - tol;
        }
        if (m_m_lo < 1) m_m_lo = 1;
    }
    const int64_t lo = min3(m_k, m_p_lo, m_m_lo), hi = min3(m_k, m_p_hi, m_m_hi);
    /* Ranked tokens after the positive ones, too light for the fixed-point weights. */
    const double resolution = ldexp(1.01, -pyspec_weight_shift(V));
    int64_t kept_light = kept;
    while (kept_light < hi && kept_light < n_finite &&
           exp(((double)value[rank[kept_light]] - value[rank[0]]) / p->temperature) < resolution)
        ++kept_light;
    CHECK(kept_light >= lo && kept <= hi,
          "kept %lld tokens, want [%lld, %lld] (top-k %lld, top-p [%lld, %lld], min-p [%lld, %lld];"
          " T %g k %d p %g min_p %g)",
          (long long)kept, (long long)lo, (long long)hi, (long long)m_k, (long long)m_p_lo,
          (long long)m_p_hi, (long long)m_m_lo, (long long)m_m_hi, (double)p->temperature,
          p->top_k, (double)p->top_p, (double)p->min_p);
    if (top_k_on) CHECK(kept <= p->top_k, "kept %lld tokens with top_k %d", (long long)kept, p->top_k);

    double z = 0.0, worst = 0.0;
    const double max = value[rank[0]];
    for (int64_t j = 0; j < kept; ++j) z += exp(((double)value[rank[j]] - max) / p->temperature);
    for (int64_t j = 0; j < kept; ++j) {
        const double want = exp(((double)value[rank[j]] - max) / p->temperature) / z;
        const double err = fabs((double)probs[rank[j]] - want) / (1e-5 + 1e-3 * want);
        if (err > worst) worst = err;
    }
    CHECK(worst <= 1.0, "a kept probability is off softmax(logit / T) by %g tolerances", worst);
    free(rank);
}

/* pyspec_distribution_sparse must list exactly the dense distribution's kept set, with the
 * same probabilities, into buffers of exactly `capacity` entries; most likely first when
 * top-k is on; and one entry too few is PYSPEC_ERR_CAPACITY. */
static void check_sparse_matches_dense(pyspec_verifier *v, const logits_rows *l,
                                       const pyspec_sampling_params *p, const float *probs) {
    const int64_t V = l->n_vocab;
    int64_t kept = 0;
    for (int64_t t = 0; t < V; ++t) kept += probs[t] > 0.0f;
    int32_t *tokens = xmalloc((size_t)kept * sizeof *tokens);
    float *sparse = xmalloc((size_t)kept * sizeof *sparse);
    int64_t *n = xmalloc(sizeof *n);
    unsigned char *seen = xmalloc((size_t)V);
    memset(seen, 0, (size_t)V);
    pyspec_error err = { 0, { 0 } };
    pyspec_status st = pyspec_distribution_sparse(v, l->data, V, l->dtype, p, tokens, sparse, kept, n, &err);
    if (CHECK(st == PYSPEC_OK && *n == kept, "sparse: status %d (%s), n %lld, want %lld kept tokens",
              st, st ? err.message : "ok", st ? -1LL : (long long)*n, (long long)kept)) {
        int same = 1, sorted = 1;
        for (int64_t j = 0; j < kept; ++j) {
            const int32_t t = tokens[j];
            if (t < 0 || t >= V || seen[t]) { same = 0; break; }
            seen[t] = 1;
            same &= sparse[j] == probs[t];
            if (j > 0) sorted &= sparse[j] <= sparse[j - 1];
        }
        CHECK(same, "sparse pairs are not the dense kept set with the same probabilities");
        if (p->top_k > 0 && p->top_k < V && !is_greedy(p))
            CHECK(sorted, "top-k on: sparse pairs are not most likely first");
    }
    if (kept > 0) {
        st = pyspec_distribution_sparse(v, l->data, V, l->dtype, p, tokens, sparse, kept - 1, n, &err);
        CHECK(st == PYSPEC_ERR_CAPACITY && strstr(err.message, "capacity"),
              "sparse with capacity %lld < %lld kept: status %d", (long long)(kept - 1), (long long)kept, st);
    }
    free(tokens);
    free(sparse);
    free(n);
    free(seen);
}

static void test_distribution_random_rows(pyspec_verifier *v) {
    int32_t *token = xmalloc(sizeof *token);
    float *prob = xmalloc(sizeof *prob);
    for (int trial = 0; trial < 300; ++trial) {
        const int32_t dtype = k_dtypes[trial % 3];
        const int64_t V = trial < 30 ? k_tail_vocabs[trial % N_TAIL_VOCABS] : rng_range(1, 5000);
        set_context("distribution trial %d: %s, n_vocab %lld", trial, dtype_name(dtype), (long long)V);
        logits_rows l;
        logits_alloc(&l, dtype, 1, V, V);
        fill_random_row(&l, 0, 8.0f);
        /* fill_random_row may add a peak above the spread; keep (max - min) / T bounded */
        for (int64_t t = 0; t < V; ++t)
            if (row_values(&l, 0)[t] > 12.0f) logits_set(&l, 0, t, 12.0f);
        float *probs = xmalloc((size_t)V * sizeof *probs);
        pyspec_sampling_params p = random_params(V, 0.3f);
        pyspec_error err;
        pyspec_status st = pyspec_distribution(v, l.data, V, dtype, &p, probs, &err);
        if (CHECK(st == PYSPEC_OK, "status %d: %s", st, err.message)) {
            check_against_reference(row_values(&l, 0), V, &p, probs);
            check_sparse_matches_dense(v, &l, &p, probs);
            st = pyspec_sample(v, l.data, V, dtype, &p, trial, token, prob, &err);
            CHECK(st == PYSPEC_OK && *token >= 0 && *token < V && probs[*token] > 0.0f &&
                      fabsf(*prob - probs[*token]) <= 1e-6f + 1e-5f * probs[*token],
                  "pyspec_sample: status %d token %d prob %g; distribution gives it %g", st,
                  *token, *prob, *token >= 0 && *token < V ? probs[*token] : -1.0f);
        }
        free(probs);
        logits_free(&l);
    }
    free(token);
    free(prob);
}

/* Greedy: one-hot at the argmax, ties to the lowest id, whichever SIMD block or tail the
 * tied maxima fall in. */
static void test_greedy_ties(pyspec_verifier *v) {
    int32_t *token = xmalloc(sizeof *token);
    int32_t *out_tokens = xmalloc(sizeof *out_tokens);
    int64_t *out_n = xmalloc(sizeof *out_n);
    for (int d = 0; d < 3; ++d)
        for (int vi = 0; vi < N_TAIL_VOCABS; ++vi) {
            const int64_t V = k_tail_vocabs[vi];
            const int64_t first = rng_range(0, V - 1);
            set_context("greedy ties: %s, n_vocab %lld, first maximum at %lld",
                        dtype_name(k_dtypes[d]), (long long)V, (long long)first);
            logits_rows l;
            logits_alloc(&l, k_dtypes[d], 1, V, V);
            for (int64_t t = 0; t < V; ++t) logits_set(&l, 0, t, (float)(t % 5) - 4.0f);
            for (int64_t t = first; t < V; t += 1 + rng_range(0, 40)) logits_set(&l, 0, t, 2.0f);
            logits_set(&l, 0, V - 1, 2.0f); /* a tie in the tail too */
            float *probs = xmalloc((size_t)V * sizeof *probs);
            const pyspec_sampling_params p = plain_params(0.0f);
            pyspec_status st = pyspec_distribution(v, l.data, V, k_dtypes[d], &p, probs, NULL);
            int one_hot = st == PYSPEC_OK;
            for (int64_t t = 0; t < V; ++t) one_hot &= probs[t] == (t == first ? 1.0f : 0.0f);
            CHECK(one_hot, "distribution is not one-hot at %lld (status %d)", (long long)first, st);
            if (st == PYSPEC_OK) check_sparse_matches_dense(v, &l, &p, probs);
            st = pyspec_sample(v, l.data, V, k_dtypes[d], &p, 0, token, NULL, NULL);
            CHECK(st == PYSPEC_OK && *token == first, "sample gave %d, want %lld", *token, (long long)first);
            pyspec_sequence seq = { l.data, V, NULL, 0, NULL, p, 0, out_tokens, NULL, out_n };
            st = pyspec_verify_batch(v, &seq, 1, V, k_dtypes[d], 1, NULL);
            CHECK(st == PYSPEC_OK && *out_n == 0 && *out_tokens == first,
                  "verify (bonus row only) gave %d, want %lld", *out_tokens, (long long)first);
            free(probs);
            logits_free(&l);
        }
    free(token);
    free(out_tokens);
    free(out_n);
}

/* A constant row makes every cut fall among equal logits: the kept set must be exactly the
 * lowest ids, for top-k (heap), top-p with top-k on (sorted path) and top-p with top-k off
 * (the quickselect path, n > 32). */
static void test_cuts_among_ties(pyspec_verifier *v) {
    enum { V = 100 };
    struct {
        int32_t top_k;
        float top_p, min_p;
        int64_t want_kept;
    } cases[] = {
        { 3, 1.0f, 0.0f, 3 },    /* top-k alone */
        { 0, 0.5f, 0.0f, 50 },   /* top-p over the whole row: 50 of 100 equal tokens */
        { 80, 0.5f, 0.0f, 40 },  /* top-p normalised over the 80 top-k survivors */
        { 0, 1.0f, 1.0f, V },    /* min-p 1 keeps every token equal to the max (gather path) */
        { 60, 1.0f, 1.0f, 60 },  /* the same on the top-k survivors (sorted path) */
        { 0, 0.25f, 1.0f, 25 },  /* top-p shorter than min-p */
    };
    float *probs = xmalloc(V * sizeof *probs);
    for (int d = 0; d < 3; ++d)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
            set_context("cuts among ties: %s, case %zu (top_k %d top_p %g min_p %g)",
                        dtype_name(k_dtypes[d]), c, cases[c].top_k, (double)cases[c].top_p,
                        (double)cases[c].min_p);
            logits_rows l;
            logits_alloc(&l, k_dtypes[d], 1, V, V);
            for (int64_t t = 0; t < V; ++t) logits_set(&l, 0, t, 1.5f);
            pyspec_sampling_params p = plain_params(0.9f);
            p.top_k = cases[c].top_k;
            p.top_p = cases[c].top_p;
            p.min_p = cases[c].min_p;
            pyspec_status st = pyspec_distribution(v, l.data, V, k_dtypes[d], &p, probs, NULL);
            const float want = 1.0f / (float)cases[c].want_kept;
            int ok = st == PYSPEC_OK;
            for (int64_t t = 0; t < V; ++t)
                ok &= t < cases[c].want_kept ? fabsf(probs[t] - want) < 1e-6f : probs[t] == 0.0f;
            if (st == PYSPEC_OK) check_sparse_matches_dense(v, &l, &p, probs);
            CHECK(ok, "want ids [0, %lld) kept at %g each (status %d, probs[0] %g, probs[%lld] %g)",
                  (long long)cases[c].want_kept, (double)want, st, (double)probs[0],
                  (long long)cases[c].want_kept, cases[c].want_kept < V ? (double)probs[cases[c].want_kept] : 0.0);
            logits_free(&l);
        }
    free(probs);
}

/* Any finite positive temperature is a valid (non-greedy) temperature. A tiny one must give
 * (up to ties) the greedy answer, not NaN: 1 / T overflows float for subnormal T, and then
 * (logit - max) * (1 / T) is 0 * inf = NaN at the maximum itself. Extreme but finite logits
 * must not overflow either. */
static void test_extreme_values(pyspec_verifier *v) {
    enum { V = 37 };
    float *probs = xmalloc(V * sizeof *probs);
    int32_t *token = xmalloc(sizeof *token);
    float *prob = xmalloc(sizeof *prob);
    const float temperatures[] = { 1e-30f, FLT_MIN, 1e-40f, 1e-45f };
    for (size_t i = 0; i < sizeof temperatures / sizeof temperatures[0]; ++i)
        for (int top_k = 0; top_k <= 4; top_k += 4) {
            set_context("temperature %g, top_k %d", (double)temperatures[i], top_k);
            logits_rows l;
            logits_alloc(&l, PYSPEC_F32, 1, V, V);
            for (int64_t t = 0; t < V; ++t) logits_set(&l, 0, t, (float)(t % 7));
            logits_set(&l, 0, 20, 9.0f);
            pyspec_sampling_params p = plain_params(temperatures[i]);
            p.top_k = top_k;
            pyspec_status st = pyspec_distribution(v, l.data, V, PYSPEC_F32, &p, probs, NULL);
            CHECK(st == PYSPEC_OK && probs[20] == 1.0f,
                  "status %d, probs[argmax = 20] = %g (want 1)", st, (double)probs[20]);
            st = pyspec_sample(v, l.data, V, PYSPEC_F32, &p, 3, token, prob, NULL);
            CHECK(st == PYSPEC_OK && *token == 20 && *prob == 1.0f,
                  "sample: status %d token %d prob %g (want 20, 1)", st, *token, (double)*prob);
            logits_free(&l);
        }

    set_context("logits of magnitude FLT_MAX");
    logits_rows l;
    logits_alloc(&l, PYSPEC_F32, 1, V, V);
    for (int64_t t = 0; t < V; ++t) logits_set(&l, 0, t, t % 2 ? -FLT_MAX : 0.0f);
    logits_set(&l, 0, 4, FLT_MAX);
    logits_set(&l, 0, 30, FLT_MAX);
    pyspec_sampling_params p = plain_params(1.0f);
    for (int k = 0; k < 3; ++k) {
        p.top_k = k == 1 ? 5 : 0;
        p.top_p = k == 2 ? 0.9f : 1.0f;
        pyspec_status st = pyspec_distribution(v, l.data, V, PYSPEC_F32, &p, probs, NULL);
        CHECK(st == PYSPEC_OK && fabsf(probs[4] - 0.5f) < 1e-6f && fabsf(probs[30] - 0.5f) < 1e-6f,
              "case %d: status %d, probs[4] %g probs[30] %g (want 0.5 each)", k, st,
              (double)probs[4], (double)probs[30]);
    }
    logits_free(&l);
    free(probs);
    free(token);
    free(prob);
}

static void test_distribution(void) {
    pyspec_verifier *v = make_verifier(5000, 1);
    test_distribution_random_rows(v);
    test_greedy_ties(v);
    test_cuts_among_ties(v);
    test_extreme_values(v);
    pyspec_verifier_free(v);
}

/* ==== 6. draft probability errors ========================================================= */

enum { DP_V = 50 };

typedef struct draft_probs_case {
    logits_rows        logits; /* 3 rows */
    int32_t           *drafts; /* [2] */
    float             *dense;  /* [2][DP_V] */
    pyspec_draft_probs dp;
    int32_t           *out_tokens;
    int64_t           *out_n;
    int32_t            best[3];
} draft_probs_case;

static void draft_probs_case_init(draft_probs_case *c) {
    logits_alloc(&c->logits, PYSPEC_F32, 3, DP_V, DP_V);
    for (int64_t r = 0; r < 3; ++r) {
        for (int64_t t = 0; t < DP_V; ++t) logits_set(&c->logits, r, t, (float)((t * 13 + r) % 17) * 0.25f);
        logits_set(&c->logits, r, 10 + r, 8.0f); /* a clear argmax per row */
        c->best[r] = (int32_t)(10 + r);
    }
    c->drafts = xmalloc(2 * sizeof(int32_t));
    c->dense = xmalloc(2 * DP_V * sizeof(float));
    for (int i = 0; i < 2 * DP_V; ++i) c->dense[i] = 1.0f / DP_V;
    c->dp = (pyspec_draft_probs){ c->dense, NULL, DP_V, 0 };
    c->out_tokens = xmalloc(3 * sizeof(int32_t));
    c->out_n = xmalloc(sizeof(int64_t));
}

static void draft_probs_case_free(draft_probs_case *c) {
    logits_free(&c->logits);
    free(c->drafts);
    free(c->dense);
    free(c->out_tokens);
    free(c->out_n);
}

static pyspec_status run_draft_case(draft_probs_case *c, pyspec_verifier *v, const pyspec_draft_probs *dp,
                                    pyspec_sampling_params params, int32_t threads, pyspec_error *err) {
    pyspec_sequence seq = { c->logits.data, DP_V, c->drafts, 2, dp, params, 100,
                            c->out_tokens, NULL, c->out_n };
    return pyspec_verify_batch(v, &seq, 1, DP_V, PYSPEC_F32, threads, err);
}

/* Expects `want` for 1, 2 and 4 threads: which rows are reached does not depend on them. */
static void expect_draft_case(draft_probs_case *c, pyspec_verifier *v, const pyspec_draft_probs *dp,
                              pyspec_sampling_params params, pyspec_status want, const char *what) {
    for (int32_t threads = 1; threads <= 4; threads *= 2) {
        pyspec_error err = { 0, { 0 } };
        pyspec_status st = run_draft_case(c, v, dp, params, threads, &err);
        CHECK(st == want, "%s, %d threads: status %d (%s), want %d", what, threads, st,
              st ? err.message : "ok", want);
        if (want != PYSPEC_OK && st == want)
            CHECK(strstr(err.message, "draft_probs") != NULL, "%s: message \"%s\" does not name draft_probs",
                  what, err.message);
        CHECK(run_draft_case(c, v, dp, params, threads, NULL) == st, "%s: err == NULL changes the status", what);
    }
}

static void test_draft_probs_errors(void) {
    pyspec_verifier *v = make_verifier(DP_V, 4);
    const float bad_q[] = { 0.0f, NAN, -0.25f, 1.5f };
    const char *bad_name[] = { "0", "NaN", "-0.25", "1.5" };
    const pyspec_sampling_params greedy = plain_params(0.0f), sampling = plain_params(1.0f);
    char what[160];
    for (int b = 0; b < 4; ++b) {
        draft_probs_case c;
        draft_probs_case_init(&c);
        set_context("draft probs q = %s", bad_name[b]);

        /* Row 0 is always reached: a bad q at its drafted token is always an error. */
        c.drafts[0] = c.best[0];
        c.drafts[1] = c.best[1];
        c.dense[c.drafts[0]] = bad_q[b];
        snprintf(what, sizeof what, "dense, q(draft) = %s in row 0, greedy", bad_name[b]);
        expect_draft_case(&c, v, &c.dp, greedy, PYSPEC_ERR_DRAFT_PROBS, what);
        snprintf(what, sizeof what, "dense, q(draft) = %s in row 0, sampling", bad_name[b]);
        expect_draft_case(&c, v, &c.dp, sampling, PYSPEC_ERR_DRAFT_PROBS, what);
        c.dense[c.drafts[0]] = 1.0f / DP_V;

        /* Row 1's bad q matters only when row 0's draft is accepted (greedy: draft = argmax). */
        c.dense[DP_V + c.drafts[1]] = bad_q[b];
        snprintf(what, sizeof what, "dense, q(draft) = %s in row 1, row 0 accepted", bad_name[b]);
        expect_draft_case(&c, v, &c.dp, greedy, PYSPEC_ERR_DRAFT_PROBS, what);
        c.drafts[0] = c.best[0] + 1;
        snprintf(what, sizeof what, "dense, q(draft) = %s in row 1, row 0 rejected", bad_name[b]);
        expect_draft_case(&c, v, &c.dp, greedy, PYSPEC_OK, what);
        CHECK(*c.out_n == 0 && c.out_tokens[0] == c.best[0], "%s: n_accepted %lld token %d, want 0, %d",
              what, (long long)*c.out_n, c.out_tokens[0], c.best[0]);
        c.dense[DP_V + c.drafts[1]] = 1.0f / DP_V;

        /* After a rejection the residual reads q over the target's kept set (greedy: the
         * argmax alone), so a bad q there is reached too. q = 0 there is valid. */
        c.drafts[0] = c.best[0] + 1;
        c.dense[c.best[0]] = bad_q[b];
        snprintf(what, sizeof what, "dense, q(kept token) = %s in row 0 after a rejection", bad_name[b]);
        expect_draft_case(&c, v, &c.dp, greedy, b == 0 ? PYSPEC_OK : PYSPEC_ERR_DRAFT_PROBS, what);
        c.dense[c.best[0]] = 1.0f / DP_V;

        /* Sparse rows: the drafted token absent (q = 0) or present with a bad q. */
        int32_t *tok = xmalloc(2 * 2 * sizeof(int32_t));
        float *q = xmalloc(2 * 2 * sizeof(float));
        const pyspec_draft_probs sparse = { q, tok, 2, 2 };
        c.drafts[0] = c.best[0];
        c.drafts[1] = c.best[1];
        for (int r = 0; r < 2; ++r) {
            tok[2 * r] = c.drafts[r];
            q[2 * r] = 0.75f;
            tok[2 * r + 1] = 0;
            q[2 * r + 1] = 0.25f; /* a sparse row must sum to 1 */
        }
        snprintf(what, sizeof what, "sparse, valid rows");
        expect_draft_case(&c, v, &sparse, greedy, PYSPEC_OK, what);
        if (b == 0) tok[0] = 1; /* drafted token absent from row 0: q = 0 */
        else q[0] = bad_q[b];
        snprintf(what, sizeof what, "sparse, q(draft) = %s in row 0", bad_name[b]);
        expect_draft_case(&c, v, &sparse, sampling, PYSPEC_ERR_DRAFT_PROBS, what);
        free(tok);
        free(q);
        draft_probs_case_free(&c);
    }
    pyspec_verifier_free(v);
}

/* The first error in a batch is reported with the sequence it belongs to. */
static void test_error_names_sequence(void) {
    set_context("bad logits in seqs[1] of a batch");
    enum { V = 33 };
    pyspec_verifier *v = make_verifier(V, 2);
    logits_rows good, bad;
    logits_alloc(&good, PYSPEC_BF16, 1, V, V);
    logits_alloc(&bad, PYSPEC_BF16, 1, V, V);
    fill_random_row(&good, 0, 3.0f);
    fill_random_row(&bad, 0, 3.0f);
    logits_set(&bad, 0, V - 1, NAN);
    int32_t *out_tokens[2] = { xmalloc(sizeof(int32_t)), xmalloc(sizeof(int32_t)) };
    int64_t *out_n[2] = { xmalloc(sizeof(int64_t)), xmalloc(sizeof(int64_t)) };
    pyspec_sequence seqs[2];
    for (int s = 0; s < 2; ++s)
        seqs[s] = (pyspec_sequence){ s ? bad.data : good.data, V, NULL, 0, NULL, plain_params(1.0f),
                                     0, out_tokens[s], NULL, out_n[s] };
    for (int32_t threads = 1; threads <= 2; ++threads) {
        const batch_call c = { v, seqs, 2, V, PYSPEC_BF16, threads };
        expect_status(call_batch, &c, PYSPEC_ERR_LOGITS, "seqs[1]", "NaN in seqs[1]");
    }
    for (int s = 0; s < 2; ++s) {
        free(out_tokens[s]);
        free(out_n[s]);
    }
    logits_free(&good);
    logits_free(&bad);
    pyspec_verifier_free(v);
}

/* ==== 4. randomised invariants of pyspec_verify_batch ===================================== */

typedef enum draft_kind { DRAFT_POINT_MASS, DRAFT_DENSE, DRAFT_SPARSE } draft_kind;
static const char *const k_draft_kind_name[] = { "point-mass", "dense", "sparse" };

typedef struct outputs {
    int32_t *tokens;   /* [n_draft + 1] */
    float   *logprobs; /* [n_draft + 1] or NULL */
    int64_t *n_accepted;
} outputs;

typedef struct test_seq {
    logits_rows        logits; /* n_draft + 1 rows */
    draft_kind         kind;
    int64_t            n_draft;
    int32_t           *drafts; /* [n_draft], NULL when n_draft == 0 */
    float             *q;      /* dense [n_draft][row_stride] or sparse [n_draft][row_stride] */
    int32_t           *q_tokens;
    pyspec_draft_probs dp;
    pyspec_sampling_params params;
    int64_t            position;
    outputs            ref, rerun; /* the n_threads = 1 batch run, and every later run */
} test_seq;

static void outputs_alloc(outputs *o, int64_t n_draft, int want_logprobs) {
    o->tokens = xmalloc((size_t)(n_draft + 1) * sizeof(int32_t));
    o->logprobs = want_logprobs ? xmalloc((size_t)(n_draft + 1) * sizeof(float)) : NULL;
    o->n_accepted = xmalloc(sizeof(int64_t));
}

static void outputs_free(outputs *o) {
    free(o->tokens);
    free(o->logprobs);
    free(o->n_accepted);
}

static pyspec_sequence as_sequence(const test_seq *s, const outputs *o) {
    pyspec_sequence seq = { s->logits.data, s->logits.stride, s->drafts, s->n_draft,
                            s->kind == DRAFT_POINT_MASS ? NULL : &s->dp, s->params, s->position,
                            o->tokens, o->logprobs, o->n_accepted };
    return seq;
}

/* Inverse-CDF pick among the positive entries of w; -1 when there are none. */
static int64_t pick_weighted(const float *w, int64_t n, double u) {
    double total = 0.0, cum = 0.0;
    int64_t last = -1;
    for (int64_t i = 0; i < n; ++i) total += w[i] > 0.0f ? w[i] : 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        if (!(w[i] > 0.0f)) continue;
        cum += w[i];
        last = i;
        if (u * total < cum) return i;
    }
    return last;
}

/* A dense draft row: q mixes the target's p with a random distribution over a random subset
 * (from q = p, where nearly every draft is accepted, to an unrelated q). */
static int32_t make_dense_row(const float *p, int64_t V, float *q_row, double *scratch) {
    static const double alphas[] = { 1.0, 0.9, 0.5, 0.0 };
    const double alpha = alphas[rng_range(0, 3)], density = 0.02 + 0.98 * rng_unit();
    double r_total = 0.0;
    for (int64_t t = 0; t < V; ++t) {
        scratch[t] = rng_chance(density) ? rng_unit() : 0.0;
        r_total += scratch[t];
    }
    if (r_total == 0.0) {
        scratch[rng_range(0, V - 1)] = 1.0;
        r_total = 1.0;
    }
    for (int64_t t = 0; t < V; ++t) q_row[t] = (float)(alpha * p[t] + (1.0 - alpha) * scratch[t] / r_total);
    return (int32_t)pick_weighted(q_row, V, rng_unit());
}

/* A sparse draft row: the drafted token (drawn from p, or anything) with q in (0.05, 1], a
 * few other distinct tokens sharing part of the rest, some q = 0 padding pairs, and garbage
 * after n_per_row that must never be read. */
static int32_t make_sparse_row(const float *p, int64_t V, int64_t n_per_row, int64_t stride,
                               int32_t *tok_row, float *q_row) {
    const int32_t x = (int32_t)(rng_chance(0.6) ? pick_weighted(p, V, rng_unit()) : rng_range(0, V - 1));
    const int64_t slot_x = rng_range(0, n_per_row - 1);
    double remaining = 1.0 - (0.05 + 0.95 * rng_unit());
    for (int64_t j = 0; j < n_per_row; ++j) {
        tok_row[j] = (int32_t)rng_range(0, V - 1);
        q_row[j] = 0.0f; /* padding unless made a real entry below */
    }
    tok_row[slot_x] = x;
    q_row[slot_x] = (float)(1.0 - remaining);
    for (int64_t j = 0; j < n_per_row; ++j) {
        if (j == slot_x || rng_chance(0.25)) continue;
        const int32_t t = (int32_t)rng_range(0, V - 1);
        int distinct = 1;
        for (int64_t k = 0; k < n_per_row; ++k) distinct &= !(q_row[k] > 0.0f && tok_row[k] == t);
        if (!distinct) continue;
        const double share = remaining * 0.5 * rng_unit();
        tok_row[j] = t;
        q_row[j] = (float)share;
        remaining -= share;
    }
    q_row[slot_x] = (float)(q_row[slot_x] + remaining); /* a sparse row sums to 1 (checked) */
    for (int64_t j = n_per_row; j < stride; ++j) {
        tok_row[j] = -7;
        q_row[j] = NAN;
    }
    return x;
}

/* A sparse draft row as a drafter would make it: pyspec_distribution_sparse of the row under
 * the drafter's own params (top-k = n_per_row, so it fits), written straight into the row's
 * slots, padded with q = 0 pairs; the draft is drawn from it. */
static int32_t make_drafter_sparse_row(pyspec_verifier *v, const void *row, int64_t V, int32_t dtype,
                                       const pyspec_sampling_params *drafter, int64_t n_per_row,
                                       int64_t stride, int32_t *tok_row, float *q_row) {
    int64_t n = 0;
    pyspec_error err = { 0, { 0 } };
    pyspec_status st = pyspec_distribution_sparse(v, row, V, dtype, drafter, tok_row, q_row,
                                                  n_per_row, &n, &err);
    if (!CHECK(st == PYSPEC_OK && n >= 1 && n <= n_per_row,
               "drafter's pyspec_distribution_sparse: status %d (%s), n %lld, capacity %lld", st,
               st ? err.message : "ok", (long long)n, (long long)n_per_row))
        n = 0;
    if (n == 0) { /* keep the sequence valid: one certain token */
        tok_row[0] = 0;
        q_row[0] = 1.0f;
        n = 1;
    }
    for (int64_t j = n; j < n_per_row; ++j) {
        tok_row[j] = (int32_t)rng_range(0, V - 1);
        q_row[j] = 0.0f;
    }
    for (int64_t j = n_per_row; j < stride; ++j) {
        tok_row[j] = -7;
        q_row[j] = NAN;
    }
    return tok_row[pick_weighted(q_row, n, rng_unit())];
}

static void build_drafts(pyspec_verifier *v, test_seq *s, int64_t V, int32_t dtype) {
    const int64_t n = s->n_draft;
    s->drafts = n > 0 ? xmalloc((size_t)n * sizeof(int32_t)) : NULL;
    s->q = NULL;
    s->q_tokens = NULL;
    if (n == 0) return;
    float *p = xmalloc((size_t)V * sizeof *p);
    double *scratch = xmalloc((size_t)V * sizeof *scratch);
    int64_t n_per_row = 0, stride = 0;
    const int from_drafter = s->kind == DRAFT_SPARSE && rng_chance(0.4);
    pyspec_sampling_params drafter = random_params(V, 0.2f);
    if (s->kind == DRAFT_DENSE) {
        stride = V + rng_range(0, 3);
        s->q = xmalloc((size_t)(n * stride) * sizeof(float));
        for (int64_t j = 0; j < n * stride; ++j) s->q[j] = NAN; /* padding after n_vocab */
    } else if (s->kind == DRAFT_SPARSE) {
        n_per_row = rng_range(1, 8);
        stride = n_per_row + rng_range(0, 2);
        s->q = xmalloc((size_t)(n * stride) * sizeof(float));
        s->q_tokens = xmalloc((size_t)(n * stride) * sizeof(int32_t));
        drafter.top_k = (int32_t)n_per_row;
    }
    for (int64_t i = 0; i < n; ++i) {
        const void *row = logits_row(&s->logits, i);
        if (s->kind == DRAFT_POINT_MASS) {
            int32_t sampled = -1;
            pyspec_status st = pyspec_sample(v, row, V, dtype, &s->params, s->position + i, &sampled, NULL, NULL);
            CHECK(st == PYSPEC_OK, "pyspec_sample for the draft of row %lld: status %d", (long long)i, st);
            s->drafts[i] = rng_chance(0.8) && st == PYSPEC_OK ? sampled : (int32_t)rng_range(0, V - 1);
            continue;
        }
        if (from_drafter) {
            s->drafts[i] = make_drafter_sparse_row(v, row, V, dtype, &drafter, n_per_row, stride,
                                                   s->q_tokens + i * stride, s->q + i * stride);
            continue;
        }
        pyspec_status st = pyspec_distribution(v, row, V, dtype, &s->params, p, NULL);
        CHECK(st == PYSPEC_OK, "pyspec_distribution for the draft of row %lld: status %d", (long long)i, st);
        if (s->kind == DRAFT_DENSE)
            s->drafts[i] = make_dense_row(p, V, s->q + i * stride, scratch);
        else
            s->drafts[i] = make_sparse_row(p, V, n_per_row, stride, s->q_tokens + i * stride, s->q + i * stride);
    }
    s->dp = (pyspec_draft_probs){ s->q, s->q_tokens, stride, n_per_row };
    free(p);
    free(scratch);
}

static void make_test_seq(pyspec_verifier *v, test_seq *s, int64_t V, int32_t dtype) {
    s->n_draft = rng_chance(0.1) ? 0 : rng_range(0, 16);
    s->kind = (draft_kind)rng_range(0, 2);
    s->params = random_params(V, 0.1f);
    s->position = rng_chance(0.5) ? rng_range(0, 100) : rng_range(0, (int64_t)1 << 40);
    logits_alloc(&s->logits, dtype, s->n_draft + 1, V, V + (rng_chance(0.5) ? 0 : rng_range(1, 9)));
    for (int64_t r = 0; r <= s->n_draft; ++r) fill_random_row(&s->logits, r, rng_chance(0.5) ? 3.0f : 12.0f);
    build_drafts(v, s, V, dtype);
    const int want_logprobs = rng_chance(0.5);
    outputs_alloc(&s->ref, s->n_draft, want_logprobs);
    outputs_alloc(&s->rerun, s->n_draft, want_logprobs);
}

static void free_test_seq(test_seq *s) {
    logits_free(&s->logits);
    free(s->drafts);
    free(s->q);
    free(s->q_tokens);
    outputs_free(&s->ref);
    outputs_free(&s->rerun);
}

/* What a run must reproduce exactly: n_accepted, and the emitted tokens and log-probs. */
static int same_outputs(const test_seq *s, const outputs *a, const outputs *b) {
    if (*a->n_accepted != *b->n_accepted) return 0;
    const int64_t n = *a->n_accepted;
    if (n < 0 || n > s->n_draft) return 0;
    if (memcmp(a->tokens, b->tokens, (size_t)(n + 1) * sizeof(int32_t)) != 0) return 0;
    return !a->logprobs || memcmp(a->logprobs, b->logprobs, (size_t)(n + 1) * sizeof(float)) == 0;
}

/* The invariants of one verified sequence (its reference outputs). */
static void check_verified_sequence(pyspec_verifier *v, const test_seq *s, int64_t V, int32_t dtype) {
    const int64_t n_acc = *s->ref.n_accepted;
    if (!CHECK(n_acc >= 0 && n_acc <= s->n_draft, "n_accepted %lld outside [0, n_draft = %lld]",
               (long long)n_acc, (long long)s->n_draft))
        return;
    float *p = xmalloc((size_t)V * sizeof *p);
    for (int64_t i = 0; i <= n_acc; ++i) {
        const int32_t t = s->ref.tokens[i];
        if (!CHECK(t >= 0 && t < V, "out_tokens[%lld] = %d outside [0, %lld)", (long long)i, t, (long long)V))
            continue;
        const float *value = row_values(&s->logits, i);
        if (i < n_acc) CHECK(t == s->drafts[i], "out_tokens[%lld] = %d but the accepted draft is %d",
                             (long long)i, t, s->drafts[i]);
        CHECK(value[t] > -INFINITY, "out_tokens[%lld] = %d has logit -inf", (long long)i, t);
        const void *row = logits_row(&s->logits, i);
        pyspec_status st = pyspec_distribution(v, row, V, dtype, &s->params, p, NULL);
        CHECK(st == PYSPEC_OK && p[t] > 0.0f,
              "out_tokens[%lld] = %d is outside the target's kept set (p = %g, status %d)",
              (long long)i, t, (double)p[t], st);
        if (is_greedy(&s->params))
            CHECK(t == argmax_lowest_id(value, V), "greedy: out_tokens[%lld] = %d, argmax is %lld",
                  (long long)i, t, (long long)argmax_lowest_id(value, V));
        if (s->kind == DRAFT_POINT_MASS) {
            int32_t sampled = -1;
            st = pyspec_sample(v, row, V, dtype, &s->params, s->position + i, &sampled, NULL, NULL);
            CHECK(st == PYSPEC_OK && sampled == t,
                  "point-mass: out_tokens[%lld] = %d but pyspec_sample at position %lld gives %d",
                  (long long)i, t, (long long)(s->position + i), sampled);
        }
        if (s->ref.logprobs) {
            const double want = reference_logprob(value, V, t);
            CHECK(fabs(s->ref.logprobs[i] - want) <= 1e-3 + 1e-4 * fabs(want),
                  "out_logprobs[%lld] = %g, want %g", (long long)i, (double)s->ref.logprobs[i], want);
        }
    }
    if (s->kind == DRAFT_POINT_MASS && n_acc < s->n_draft)
        CHECK(s->ref.tokens[n_acc] != s->drafts[n_acc],
              "point-mass: the sample equals the draft %d at row %lld, yet it was rejected",
              s->drafts[n_acc], (long long)n_acc);
    free(p);
}

static pyspec_status verify_into(pyspec_verifier *v, test_seq *seqs, int64_t n_seqs, int use_rerun,
                                 int64_t V, int32_t dtype, int32_t threads, pyspec_error *err) {
    pyspec_sequence *batch = xmalloc((size_t)n_seqs * sizeof *batch);
    for (int64_t k = 0; k < n_seqs; ++k) batch[k] = as_sequence(&seqs[k], use_rerun ? &seqs[k].rerun : &seqs[k].ref);
    pyspec_status st = pyspec_verify_batch(v, batch, n_seqs, V, dtype, threads, err);
    free(batch);
    return st;
}

/* Vocabulary sizes: mostly small and medium (cheap under ASan), some up to 5000, and the
 * SIMD-tail sizes now and then. */
static int64_t random_vocab(void) {
    const double u = rng_unit();
    if (u < 0.1) return k_tail_vocabs[rng_range(0, N_TAIL_VOCABS - 1)];
    if (u < 0.4) return rng_range(1, 70);
    if (u < 0.85) return rng_range(70, 1100);
    return rng_range(1100, 5000);
}

static void test_random_invariants(int iterations) {
    pyspec_verifier *v = make_verifier(5000, 4);
    long long accepted = 0, drafted = 0, calls = 0;
    for (int it = 0; it < iterations; ++it) {
        const int64_t V = random_vocab();
        const int32_t dtype = k_dtypes[rng_range(0, 2)];
        const int64_t n_seqs = rng_range(1, 4);
        test_seq seqs[4];
        set_context("random iteration %d: %s, n_vocab %lld, %lld sequences", it, dtype_name(dtype),
                    (long long)V, (long long)n_seqs);
        for (int64_t k = 0; k < n_seqs; ++k) make_test_seq(v, &seqs[k], V, dtype);

        pyspec_error err = { 0, { 0 } };
        pyspec_status st = verify_into(v, seqs, n_seqs, 0, V, dtype, 1, &err);
        ++calls;
        if (CHECK(st == PYSPEC_OK, "status %d: %s", st, err.message)) {
            for (int64_t k = 0; k < n_seqs; ++k) {
                set_context("random iteration %d: %s, n_vocab %lld, seq %lld of %lld (%s, n_draft %lld,"
                            " T %g k %d p %g min_p %g)", it, dtype_name(dtype), (long long)V,
                            (long long)k, (long long)n_seqs, k_draft_kind_name[seqs[k].kind],
                            (long long)seqs[k].n_draft, (double)seqs[k].params.temperature,
                            seqs[k].params.top_k, (double)seqs[k].params.top_p, (double)seqs[k].params.min_p);
                check_verified_sequence(v, &seqs[k], V, dtype);
                accepted += *seqs[k].ref.n_accepted;
                drafted += seqs[k].n_draft;
            }
            set_context("random iteration %d: %s, n_vocab %lld, %lld sequences", it, dtype_name(dtype),
                        (long long)V, (long long)n_seqs);
            for (int32_t threads = 2; threads <= 4; threads *= 2) {
                st = verify_into(v, seqs, n_seqs, 1, V, dtype, threads, NULL);
                ++calls;
                int same = st == PYSPEC_OK;
                for (int64_t k = 0; k < n_seqs; ++k) same = same && same_outputs(&seqs[k], &seqs[k].ref, &seqs[k].rerun);
                CHECK(same, "%d threads give a different result than 1 (status %d)", threads, st);
            }
            /* A fresh verifier sized to exactly this n_vocab: its scratch has no history (the
             * sparse scatter buffer must be left all zeros after every row), and ASan guards
             * the end of every scratch array. */
            pyspec_verifier *fresh = make_verifier(V, 1);
            st = verify_into(fresh, seqs, n_seqs, 1, V, dtype, 1, NULL);
            ++calls;
            int same = st == PYSPEC_OK;
            for (int64_t k = 0; k < n_seqs; ++k) same = same && same_outputs(&seqs[k], &seqs[k].ref, &seqs[k].rerun);
            CHECK(same, "a fresh verifier (max_vocab = n_vocab) gives a different result (status %d)", st);
            pyspec_verifier_free(fresh);
            /* One thread: batching, not threading, is what this compares (and on a 2-core
             * machine every extra OpenMP team costs spin-waiting time). */
            for (int64_t k = 0; k < n_seqs && n_seqs > 1; ++k) {
                st = verify_into(v, &seqs[k], 1, 1, V, dtype, 1, NULL);
                ++calls;
                CHECK(st == PYSPEC_OK && same_outputs(&seqs[k], &seqs[k].ref, &seqs[k].rerun),
                      "seq %lld verified alone differs from inside the batch", (long long)k);
            }
        }
        for (int64_t k = 0; k < n_seqs; ++k) free_test_seq(&seqs[k]);
    }
    printf("  random invariants: %d iterations, %lld verify calls, %lld of %lld drafts accepted\n",
           iterations, calls, accepted, drafted);
    pyspec_verifier_free(v);
}

/* ==== modified rejection sampling is exact ================================================ */

/* The first emitted token of a sequence with one draft x ~ q must be distributed as p, the
 * target's transformed distribution, whatever q is: that is the whole point of speculative
 * sampling. N sequences at distinct positions in one call give N independent draws.
 *
 * Three sharp z-tests per case (alpha 1e-4 each, N = 100,000), against the two biases a
 * library could plausibly have (issue 16): acceptance biased by 5% (accept when
 * u * q < 1.05 * p) and residual biased by 5% (draw from norm(max(0, p - 0.95 q)) after a
 * rejection):
 *   - the acceptance rate against sum_x min(p(x), q(x)) (binomial);
 *   - the log-likelihood ratio of the emitted tokens between each wrong library's exact
 *     emission distribution and p (the most powerful test against it).
 * The power of each test against each bias is computed (normal approximation under the wrong
 * library's own mean and variance) and printed; per bias, the best test's power must be
 * >= 0.9 (for point-mass drafts only the acceptance bias exists: their residual is p with x
 * taken out, the same for any q). The q's are chosen so that both biases show: some kept
 * tokens with q > p (acceptance) and some with q a little below p (residual), including for
 * top_k = 3, where a q <= p on the kept set would accept every kept draft whatever the bug.
 * A per-token 5-sigma check stays as the gross one (it catches accept-always). Here p is the
 * library's own pyspec_distribution; tests/test_exactness.py checks p against an
 * independent reference. */

enum { FT_V = 6, FT_N = 100000 };
#define FT_Z_CRIT 3.8906 /* two-sided normal quantile at alpha 1e-4 */

static double normal_cdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

/* Power of a two-sided z-test at FT_Z_CRIT over n draws of a statistic with mean m0 and
 * variance v0 per draw under the exact library, m1 and v1 under the wrong one. */
static double z_test_power(double m0, double v0, double m1, double v1, int64_t n) {
    if (v0 <= 0.0 || v1 <= 0.0) return 0.0;
    const double se0 = sqrt(v0 / (double)n), se1 = sqrt(v1 / (double)n), shift = m1 - m0;
    return (1.0 - normal_cdf((FT_Z_CRIT * se0 - shift) / se1)) + normal_cdf((-FT_Z_CRIT * se0 - shift) / se1);
}

/* Exact first-token distribution (and acceptance rate) of a verifier that accepts draft x
 * when u * q(x) < accept_bias * p(x) and otherwise draws from norm(max(0, p - residual_q * q)).
 * `point`: x ~ draw and the verifier sees q = one-hot(x). accept_bias = residual_q = 1 is the
 * exact library, which emits p. */
static double biased_emission(const float *p, const float *draw, int point, double accept_bias,
                              double residual_q, double *out) {
    double rate = 0.0;
    for (int t = 0; t < FT_V; ++t) out[t] = 0.0;
    for (int x = 0; x < FT_V; ++x) { /* x: the draft */
        if (draw[x] <= 0.0f) continue;
        double q[FT_V];
        for (int t = 0; t < FT_V; ++t) q[t] = point ? (t == x) : draw[t];
        const double accept = fmin(1.0, accept_bias * p[x] / q[x]);
        double residual[FT_V], total = 0.0;
        for (int t = 0; t < FT_V; ++t) total += residual[t] = fmax(0.0, p[t] - residual_q * q[t]);
        out[x] += draw[x] * accept;
        rate += draw[x] * accept;
        if (total > 0.0)
            for (int t = 0; t < FT_V; ++t) out[t] += draw[x] * (1.0 - accept) * residual[t] / total;
    }
    return rate;
}

/* The LLR statistic's weights log(wrong / p), and its mean and variance under `dist`. */
static void llr_moments(const float *p, const double *wrong, const double *dist, double *w,
                        double *mean, double *var) {
    *mean = *var = 0.0;
    for (int t = 0; t < FT_V; ++t) {
        w[t] = p[t] > 0.0f ? log(fmax(wrong[t], 1e-300) / p[t]) : 0.0;
        *mean += dist[t] * w[t];
    }
    for (int t = 0; t < FT_V; ++t) *var += dist[t] * (w[t] - *mean) * (w[t] - *mean);
}

static void test_first_token_distribution(void) {
    pyspec_verifier *v = make_verifier(FT_V, 2);
    logits_rows l;
    logits_alloc(&l, PYSPEC_F32, 2, FT_V, FT_V);
    const float logits[FT_V] = { 1.0f, 2.5f, 0.3f, 2.0f, -1.0f, 1.7f };
    for (int r = 0; r < 2; ++r)
        for (int t = 0; t < FT_V; ++t) logits_set(&l, r, t, logits[t]);
    /* [top_k == 3][kind]: dense q, sparse q (as dense, zeros off its support), point-mass
     * drafts drawn from this (the verifier sees one-hot q). At T = 1.3, p is
     * {.11 .36 .07 .24 .02 .19} (top_k 0) and {0 .45 0 .31 0 .24} (top_k 3). */
    static const float q_for[2][3][FT_V] = {
        { { 0.30f, 0.30f, 0.05f, 0.05f, 0.25f, 0.05f },
          { 0.50f, 0.30f, 0.00f, 0.00f, 0.20f, 0.00f },
          { 0.30f, 0.05f, 0.25f, 0.10f, 0.20f, 0.10f } },
        { { 0.05f, 0.40f, 0.05f, 0.35f, 0.05f, 0.10f },
          { 0.00f, 0.40f, 0.00f, 0.45f, 0.15f, 0.00f },
          { 0.05f, 0.15f, 0.05f, 0.55f, 0.05f, 0.15f } },
    };
    float *dense = xmalloc(FT_V * sizeof(float));
    int32_t *q_tok = xmalloc(FT_V * sizeof(int32_t));
    float *q_sparse = xmalloc(FT_V * sizeof(float));
    pyspec_sequence *seqs = xmalloc(FT_N * sizeof *seqs);
    int32_t *drafts = xmalloc(FT_N * sizeof(int32_t));
    int32_t *out_tokens = xmalloc(2 * FT_N * sizeof(int32_t));
    int64_t *out_n = xmalloc(FT_N * sizeof(int64_t));
    float p[FT_V];
    for (int kind = 0; kind < 3; ++kind)
        for (int k3 = 0; k3 < 2; ++k3) {
            const int top_k = 3 * k3;
            const float *q = q_for[k3][kind];
            const int point = kind == 2;
            set_context("first-token distribution: %s draft probs, top_k %d",
                        kind == 0 ? "dense" : kind == 1 ? "sparse" : "no (point-mass)", top_k);
            memcpy(dense, q, FT_V * sizeof(float));
            int64_t n_sparse = 0;
            for (int t = 0; t < FT_V; ++t)
                if (q[t] > 0.0f) { q_tok[n_sparse] = t; q_sparse[n_sparse++] = q[t]; }
            const pyspec_draft_probs dp = kind == 0 ? (pyspec_draft_probs){ dense, NULL, FT_V, 0 }
                                                    : (pyspec_draft_probs){ q_sparse, q_tok, n_sparse, n_sparse };
            pyspec_sampling_params params = plain_params(1.3f);
            params.top_k = top_k;
            params.seed = 0xC0FFEEull + (uint64_t)(kind * 10 + top_k);
            if (pyspec_distribution(v, l.data, FT_V, PYSPEC_F32, &params, p, NULL) != PYSPEC_OK) {
                CHECK(0, "pyspec_distribution failed");
                continue;
            }
            for (int s = 0; s < FT_N; ++s) {
                drafts[s] = (int32_t)pick_weighted(q, FT_V, rng_unit());
                seqs[s] = (pyspec_sequence){ l.data, FT_V, &drafts[s], 1, point ? NULL : &dp,
                                             params, 2 * (int64_t)s, &out_tokens[2 * s], NULL, &out_n[s] };
            }
            pyspec_error err = { 0, { 0 } };
            pyspec_status st = pyspec_verify_batch(v, seqs, FT_N, FT_V, PYSPEC_F32, 2, &err);
            if (!CHECK(st == PYSPEC_OK, "status %d: %s", st, err.message)) continue;
            long long count[FT_V] = { 0 };
            int64_t accepted = 0;
            for (int s = 0; s < FT_N; ++s) {
                if (out_tokens[2 * s] >= 0 && out_tokens[2 * s] < FT_V) ++count[out_tokens[2 * s]];
                accepted += out_n[s] == 1; /* n_accepted: the one draft was accepted */
            }
            /* gross: every token's frequency within 5 sigma of p */
            for (int t = 0; t < FT_V; ++t) {
                const double freq = (double)count[t] / FT_N, sigma = sqrt(p[t] * (1.0 - p[t]) / FT_N);
                CHECK(fabs(freq - p[t]) <= 5.0 * sigma + 1e-3, "token %d emitted with frequency %.4f, p = %.4f",
                      t, freq, (double)p[t]);
            }
            double exact[FT_V];
            const double rate = biased_emission(p, q, point, 1.0, 1.0, exact);
            for (int t = 0; t < FT_V; ++t)
                CHECK(fabs(exact[t] - p[t]) < 1e-6, "the exact emission formula gives %.6f for token %d, p = %.6f",
                      exact[t], t, (double)p[t]);
            const double z_rate = ((double)accepted - FT_N * rate) / sqrt(FT_N * rate * (1.0 - rate));
            CHECK(fabs(z_rate) < FT_Z_CRIT, "acceptance rate %.5f against sum min(p, q) = %.5f: z = %.2f",
                  (double)accepted / FT_N, rate, z_rate);
            /* the two wrong libraries: the LLR test against each, and the powers */
            static const char *bias_name[2] = { "acceptance +5%", "residual -5% q" };
            for (int b = 0; b < 2 - point; ++b) {
                double wrong[FT_V], w[FT_V], m0, v0, m1, v1;
                const double wrong_rate = biased_emission(p, q, point, b == 0 ? 1.05 : 1.0,
                                                          b == 1 ? 0.95 : 1.0, wrong);
                double exact_p[FT_V];
                for (int t = 0; t < FT_V; ++t) exact_p[t] = p[t];
                llr_moments(p, wrong, exact_p, w, &m0, &v0);
                llr_moments(p, wrong, wrong, w, &m1, &v1);
                const double power_llr = z_test_power(m0, v0, m1, v1, FT_N);
                const double power_rate = z_test_power(rate, rate * (1 - rate), wrong_rate,
                                                       wrong_rate * (1 - wrong_rate), FT_N);
                double sum_w = 0.0;
                for (int t = 0; t < FT_V; ++t) sum_w += (double)count[t] * w[t];
                const double z_llr = v0 > 0.0 ? (sum_w - FT_N * m0) / sqrt(FT_N * v0) : 0.0;
                printf("  %s q, top_k %d, %s: power %.3f (LLR), %.3f (acceptance rate); z %.2f, %.2f\n",
                       kind == 0 ? "dense" : kind == 1 ? "sparse" : "point-mass", top_k, bias_name[b],
                       power_llr, power_rate, z_llr, z_rate);
                CHECK(fmax(power_llr, power_rate) >= 0.9, "%s: power only %.3f (LLR), %.3f (rate)",
                      bias_name[b], power_llr, power_rate);
                CHECK(fabs(z_llr) < FT_Z_CRIT, "%s: LLR z = %.2f (power %.3f)", bias_name[b], z_llr, power_llr);
                /* The same statistics on N draws simulated from the wrong library: caught. */
                double sim_w = 0.0;
                int64_t sim_accepted = 0;
                for (int s = 0; s < FT_N; ++s) {
                    double u = rng_unit(), cum = 0.0;
                    int t = 0;
                    while (t < FT_V - 1 && (cum += wrong[t]) <= u) ++t;
                    sim_w += w[t];
                    sim_accepted += rng_unit() < wrong_rate;
                }
                const double z_sim_llr = (sim_w - FT_N * m0) / sqrt(FT_N * v0);
                const double z_sim_rate = ((double)sim_accepted - FT_N * rate) / sqrt(FT_N * rate * (1.0 - rate));
                CHECK(fabs(power_llr >= 0.9 ? z_sim_llr : z_sim_rate) >= FT_Z_CRIT,
                      "a simulated %s library passes (z %.2f LLR, %.2f rate)", bias_name[b], z_sim_llr, z_sim_rate);
            }
        }
    free(dense);
    free(q_tok);
    free(q_sparse);
    free(seqs);
    free(drafts);
    free(out_tokens);
    free(out_n);
    logits_free(&l);
    pyspec_verifier_free(v);
}

/* ==== main ================================================================================ */

typedef struct test_group {
    const char *name;
    void (*run)(void);
} test_group;

static void run_random_invariants(void) {
    const char *env = getenv("PYSPEC_TEST_ITERATIONS"); /* longer soak runs by hand */
    test_random_invariants(env ? atoi(env) : 600);
}

/* Penalties under the sanitizers: random windows (including windows longer than the
 * vocabulary and tokens penalised many times), every transform path; point-mass verify
 * must emit what pyspec_sample draws with the history extended by the accepted drafts. */
static void test_penalties_random(void) {
    pyspec_verifier *v = NULL;
    CHECK(pyspec_verifier_create(3000, 2, &v, NULL) == PYSPEC_OK, "create for penalties");
    for (int trial = 0; trial < 300; ++trial) {
        const int64_t V = rng_range(1, 3000);
        const int64_t n_draft = rng_range(0, 6);
        const int64_t n_hist = rng_range(0, 120);
        float *rows = xmalloc((size_t)((n_draft + 1) * V) * sizeof(float));
        for (int64_t i = 0; i < (n_draft + 1) * V; ++i)
            rows[i] = rng_chance(0.05) ? -INFINITY : (float)(rng_unit() * 10.0 - 5.0);
        for (int64_t r = 0; r <= n_draft; ++r) rows[r * V + rng_range(0, V - 1)] = 7.0f;
        int32_t *hist = xmalloc((size_t)(n_hist + 1) * sizeof(int32_t));
        for (int64_t j = 0; j < n_hist; ++j) hist[j] = (int32_t)rng_range(0, V < 8 ? V - 1 : 7);
        pyspec_sampling_params p = random_params(V, 0.05f);
        p.penalty_last_n = (int32_t)(rng_chance(0.2) ? -1 : rng_range(1, 80));
        p.penalty_repeat = (float)(0.5 + rng_unit() * 1.5);
        p.penalty_freq = (float)(rng_unit() * 0.5);
        p.penalty_present = (float)(rng_unit() * 0.5);
        p.penalty_history = n_hist ? hist : NULL;
        p.n_penalty_history = n_hist;
        /* plain samples, feeding each back into the history */
        int32_t *plain = xmalloc((size_t)(n_draft + 1) * sizeof(int32_t));
        int32_t *extended = xmalloc((size_t)(n_hist + n_draft + 1) * sizeof(int32_t));
        for (int64_t j = 0; j < n_hist; ++j) extended[j] = hist[j];
        int ok = 1;
        for (int64_t r = 0; r <= n_draft && ok; ++r) {
            pyspec_sampling_params pr = p;
            pr.penalty_history = (n_hist + r) ? extended : NULL;
            pr.n_penalty_history = n_hist + r;
            pyspec_error err;
            ok = pyspec_sample(v, rows + r * V, V, PYSPEC_F32, &pr, 50 + r, &plain[r], NULL, &err) == PYSPEC_OK;
            CHECK(ok, "penalised sample trial %d row %lld: %s", trial, (long long)r, err.message);
            extended[n_hist + r] = plain[r];
        }
        if (ok) {
            int32_t out[8];
            int64_t n_acc = -1;
            pyspec_sequence seq = { 0 };
            seq.target_logits = rows;
            seq.logits_row_stride = V;
            seq.draft_tokens = n_draft ? plain : NULL;
            seq.n_draft = n_draft;
            seq.params = p;
            seq.position = 50;
            seq.out_tokens = out;
            seq.out_n_accepted = &n_acc;
            pyspec_error err;
            int st = pyspec_verify_batch(v, &seq, 1, V, PYSPEC_F32, 1 + (trial & 1), &err);
            CHECK(st == PYSPEC_OK, "penalised verify trial %d: %s", trial, err.message);
            if (st == PYSPEC_OK) {
                CHECK(n_acc == n_draft, "trial %d: all plain drafts accepted (%lld of %lld)", trial,
                      (long long)n_acc, (long long)n_draft);
                for (int64_t r = 0; r <= n_acc && r <= n_draft; ++r)
                    CHECK(out[r] == plain[r], "trial %d row %lld: %d vs plain %d", trial,
                          (long long)r, out[r], plain[r]);
            }
        }
        free(rows); free(hist); free(plain); free(extended);
    }
    pyspec_verifier_free(v);
}

/* The CUDA entry points: a clear PYSPEC_ERR_CUDA without a device or without CUDA in the
 * build (never a crash); with a device, a small greedy call equals the argmax. */
static void test_cuda_entry_points(void) {
    pyspec_error e = { 0, { 0 } };
    int32_t n = -1;
    pyspec_status st = pyspec_cuda_device_count(&n, &e);
    if (!pyspec_has_cuda()) {
        CHECK(st == PYSPEC_ERR_CUDA && strstr(e.message, "built without CUDA"),
              "no-CUDA build: device_count gave %d '%s'", st, e.message);
    } else {
        CHECK(st == PYSPEC_OK || (st == PYSPEC_ERR_CUDA && strstr(e.message, "no CUDA device")),
              "device_count gave %d '%s'", st, e.message);
    }
    CHECK(pyspec_cuda_device_count(NULL, &e) != PYSPEC_OK, "device_count(NULL) must fail");
    pyspec_cuda_free(0, NULL);
    pyspec_cuda_verifier_free(NULL);
    CHECK(pyspec_cuda_verify_batch(NULL, NULL, 0, 10, PYSPEC_F32, NULL, &e) != PYSPEC_OK,
          "verify_batch(NULL verifier) must fail");
    CHECK(pyspec_cuda_verifier_last_error(NULL, NULL, &e) != PYSPEC_OK,
          "last_error(NULL verifier) must fail");
    pyspec_cuda_verifier *v = NULL;
    st = pyspec_cuda_verifier_create(1000, 4, 8, 0, &v, &e);
    if (st != PYSPEC_OK || n <= 0) {
        CHECK(st == PYSPEC_ERR_CUDA && v == NULL, "create without a device gave %d '%s'", st, e.message);
        return;
    }
    /* A device: 3 greedy rows, drafts = the argmaxes of rows 0 and 1. */
    enum { V = 1000 };
    float *rows = malloc(3 * V * sizeof *rows);
    for (int i = 0; i < 3 * V; ++i) rows[i] = (float)((i * 7919) % 1013) / 100.0f;
    int32_t want[3];
    for (int r = 0; r < 3; ++r) {
        int best = 0;
        for (int t = 1; t < V; ++t) if (rows[r * V + t] > rows[r * V + best]) best = t;
        want[r] = best;
    }
    void *d_rows = NULL, *d_draft = NULL, *d_out = NULL, *d_n = NULL;
    CHECK(pyspec_cuda_malloc(0, 3 * V * 4, &d_rows, &e) == PYSPEC_OK, "malloc: %s", e.message);
    CHECK(pyspec_cuda_malloc(0, 8, &d_draft, &e) == PYSPEC_OK, "malloc: %s", e.message);
    CHECK(pyspec_cuda_malloc(0, 12, &d_out, &e) == PYSPEC_OK, "malloc: %s", e.message);
    CHECK(pyspec_cuda_malloc(0, 8, &d_n, &e) == PYSPEC_OK, "malloc: %s", e.message);
    pyspec_cuda_memcpy(0, d_rows, rows, 3 * V * 4, 0, NULL, &e);
    pyspec_cuda_memcpy(0, d_draft, want, 8, 0, NULL, &e);
    pyspec_sequence seq;
    memset(&seq, 0, sizeof seq);
    seq.target_logits = d_rows;
    seq.logits_row_stride = V;
    seq.draft_tokens = d_draft;
    seq.n_draft = 2;
    seq.params.top_p = 1.0f;
    seq.out_tokens = d_out;
    seq.out_n_accepted = d_n;
    st = pyspec_cuda_verify_batch_sync(v, &seq, 1, V, PYSPEC_F32, NULL, &e);
    CHECK(st == PYSPEC_OK, "cuda verify: %d '%s'", st, e.message);
    int32_t got[3] = { -1, -1, -1 };
    int64_t n_acc = -1;
    pyspec_cuda_memcpy(0, got, d_out, 12, 1, NULL, &e);
    pyspec_cuda_memcpy(0, &n_acc, d_n, 8, 1, NULL, &e);
    CHECK(n_acc == 2 && got[0] == want[0] && got[1] == want[1] && got[2] == want[2],
          "cuda greedy: n %lld tokens %d %d %d, want %d %d %d", (long long)n_acc, got[0], got[1],
          got[2], want[0], want[1], want[2]);
    pyspec_cuda_free(0, d_rows); pyspec_cuda_free(0, d_draft);
    pyspec_cuda_free(0, d_out); pyspec_cuda_free(0, d_n);
    pyspec_cuda_verifier_free(v);
    free(rows);
}

int main(void) {
    const test_group groups[] = {
        { "conversions (test helpers)", check_conversions },
        { "1. Philox known answers", test_philox_known_answers },
        { "1. pyspec_uniform", test_uniform },
        { "2. info functions", test_info_functions },
        { "2. pyspec_verifier_create errors", test_create_errors },
        { "2. pyspec_sample / pyspec_distribution errors", test_sample_and_distribution_errors },
        { "2. pyspec_verify_batch errors", test_verify_batch_errors },
        { "3. NaN / +inf logits", test_bad_logits },
        { "3. all -inf rows", test_all_neg_inf_rows },
        { "3. -inf never sampled", test_neg_inf_never_sampled },
        { "3. error names the sequence", test_error_names_sequence },
        { "5. distribution", test_distribution },
        { "6. draft probability errors", test_draft_probs_errors },
        { "first token distributed as p", test_first_token_distribution },
        { "4. randomised verify invariants", run_random_invariants },
        { "penalties, randomised", test_penalties_random },
        { "CUDA entry points", test_cuda_entry_points },
    };
    printf("pyspec %s, SIMD path %s\n", pyspec_version(), pyspec_simd_name());
    const double start = wall_seconds();
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; ++g) {
        const long long failed_before = g_failed;
        const double t0 = wall_seconds();
        groups[g].run();
        printf("%-50s %6.2f s  %s\n", groups[g].name, wall_seconds() - t0,
               g_failed == failed_before ? "ok" : "FAILED");
        fflush(stdout);
    }
    printf("total %.2f s\n", wall_seconds() - start);
    printf("%lld passed, %lld failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
