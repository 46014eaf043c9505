/*
 * test_util.c - the harness and helpers that every C test file shares (test_util.h): the
 * check counters, the deterministic PRNG, the test's own half/bfloat16 conversions, logits
 * buffers that end exactly where their allocation ends, sampling parameters, and the
 * wrappers that call an API function twice (with and without an error struct).
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

/* ==== harness ============================================================================ */

long long g_passed, g_failed;
char g_context[256]; /* what the running group is doing; printed with each failure */

/* A run that goes wrong in the randomised part can fail thousands of checks; the first few
 * dozen messages say everything, the rest would drown the summary line. */
#define MAX_PRINTED_FAILURES 80

void set_context(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_context, sizeof g_context, fmt, ap);
    va_end(ap);
}

int check_at(int ok, const char *file, int line, const char *fmt, ...) {
    if (ok) {
        ++g_passed;
        return 1;
    }
    ++g_failed;
    if (g_failed <= MAX_PRINTED_FAILURES) {
        const char *base = strrchr(file, '/'); /* __FILE__ may be a full path */
        va_list ap;
        va_start(ap, fmt);
        printf("FAIL (%s:%d) [%s]: ", base ? base + 1 : file, line, g_context);
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
        fflush(stdout);
    }
    return 0;
}

double wall_seconds(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Allocations that cannot fail quietly: a NULL here is the test machine's problem, not a
 * library bug, and must not turn into a NULL-pointer test by accident. */
void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("out of memory allocating %zu bytes\n", bytes);
        exit(2);
    }
    return p;
}

/* ==== deterministic PRNG (xorshift64*) ==================================================== */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

uint64_t rng_u64(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}

double rng_unit(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); }

int64_t rng_range(int64_t lo, int64_t hi) { /* inclusive */
    return lo + (int64_t)(rng_u64() % (uint64_t)(hi - lo + 1));
}

int rng_chance(double p) { return rng_unit() < p; }

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

const char *dtype_name(int32_t dtype) {
    return dtype == PYSPEC_F32 ? "F32" : dtype == PYSPEC_F16 ? "F16" : "BF16";
}

static size_t dtype_size(int32_t dtype) { return dtype == PYSPEC_F32 ? 4 : 2; }

void check_conversions(void) {
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

void logits_set(logits_rows *l, int64_t row, int64_t t, float v) {
    store_encoded(l, row * l->stride + t, v);
    l->value[row * l->n_vocab + t] = decode(l->dtype, v);
}

const void *logits_row(const logits_rows *l, int64_t row) {
    return (const char *)l->data + (size_t)(row * l->stride) * dtype_size(l->dtype);
}

const float *row_values(const logits_rows *l, int64_t row) {
    return l->value + row * l->n_vocab;
}

/* Allocates the rows (contents zero) and poisons the padding between rows with NaN. */
void logits_alloc(logits_rows *l, int32_t dtype, int64_t n_rows, int64_t n_vocab,
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

void logits_free(logits_rows *l) {
    free(l->data);
    free(l->value);
    l->data = NULL;
    l->value = NULL;
}

/* A random row: uniform logits, sometimes coarsely quantised (ties, and ties across SIMD
 * blocks), sometimes with a dominant token (so drafts get accepted), sometimes with many
 * -inf entries; at least one entry is always finite. */
void fill_random_row(logits_rows *l, int64_t row, float spread) {
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

int64_t argmax_lowest_id(const float *value, int64_t V) {
    int64_t best = 0;
    for (int64_t t = 1; t < V; ++t)
        if (value[t] > value[best]) best = t;
    return best;
}

/* log-softmax of the raw row at token, in double: what out_logprobs must report. */
double reference_logprob(const float *value, int64_t V, int64_t token) {
    const float max = value[argmax_lowest_id(value, V)];
    double z = 0.0;
    for (int64_t t = 0; t < V; ++t) z += exp((double)value[t] - (double)max);
    return (double)value[token] - (double)max - log(z);
}

/* The largest probability of the raw row's softmax, in double: what out_top_probs must
 * report (within its span's bound). */
double reference_top_prob(const float *value, int64_t V) {
    const float max = value[argmax_lowest_id(value, V)];
    double z = 0.0;
    for (int64_t t = 0; t < V; ++t) z += exp((double)value[t] - (double)max);
    return 1.0 / z;
}

/* ==== sampling parameters ================================================================= */

pyspec_sampling_params plain_params(float temperature) {
    pyspec_sampling_params p = { temperature, 0, 1.0f, 0.0f, 12345u };
    return p;
}

int is_greedy(const pyspec_sampling_params *p) { return !(p->temperature > 0.0f); }

/* Random but valid: every transform independently on or off, greedy one time in five. */
pyspec_sampling_params random_params(int64_t V, float min_temperature) {
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

pyspec_verifier *make_verifier(int64_t max_vocab, int32_t max_threads) {
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

/* ==== shared case tables =================================================================== */

const int64_t k_tail_vocabs[N_TAIL_VOCABS] = { 1, 7, 31, 32, 33, 63, 64, 65, 1000, 4099 };
const int32_t k_dtypes[N_DTYPES] = { PYSPEC_F32, PYSPEC_F16, PYSPEC_BF16 };

/* ==== calls checked for their status and message ========================================== */

void expect_status_either(api_call_fn fn, const void *call, pyspec_status want_a,
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

void expect_status(api_call_fn fn, const void *call, pyspec_status want,
                          const char *arg_name, const char *what) {
    expect_status_either(fn, call, want, want, arg_name, what);
}

pyspec_status call_sample(const void *c_, pyspec_error *err) {
    const sample_call *c = c_;
    return pyspec_sample(c->v, c->logits, c->n_vocab, c->dtype, c->params, c->position,
                         c->out_token, c->out_prob, err);
}

pyspec_status call_distribution(const void *c_, pyspec_error *err) {
    const distribution_call *c = c_;
    return pyspec_distribution(c->v, c->logits, c->n_vocab, c->dtype, c->params, c->out_probs, err);
}

pyspec_status call_sparse(const void *c_, pyspec_error *err) {
    const sparse_call *c = c_;
    return pyspec_distribution_sparse(c->v, c->logits, c->n_vocab, c->dtype, c->params,
                                      c->out_tokens, c->out_probs, c->capacity, c->out_n, err);
}

pyspec_status call_batch(const void *c_, pyspec_error *err) {
    const batch_call *c = c_;
    return pyspec_verify_batch(c->v, c->seqs, c->n_seqs, c->n_vocab, c->dtype, c->n_threads, err);
}

/* ==== draws ================================================================================ */

/* Inverse-CDF pick among the positive entries of w; -1 when there are none. */
int64_t pick_weighted(const float *w, int64_t n, double u) {
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

