/*
 * test_util.h - what the C test files share (tests/c/test_*.c, one executable, run by
 * test_main.c): the CHECK harness, the deterministic PRNG, logits buffers, sampling
 * parameters and the API-call wrappers, all defined in test_util.c; and one entry point
 * per test group, defined in the file of its subject.
 *
 * Only C11, libm, the public header and draw.h (for the fixed-point resolution) are used:
 * the half and bfloat16 conversions are the test's own, so the library's readers are
 * checked against an independent implementation.
 */
#ifndef PYSPEC_TEST_UTIL_H
#define PYSPEC_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "pyspec.h"
#include "draw.h" /* pyspec_weight_shift: the fixed-point resolution of the weights */

/* ==== harness: every CHECK counts one pass or one failure ================================= */

extern long long g_passed, g_failed;
extern char g_context[256]; /* what the running group is doing; printed with each failure */

/* Sets g_context, printf-style. */
void set_context(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
int check_at(int ok, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
#define CHECK(cond, ...) check_at((cond) ? 1 : 0, __FILE__, __LINE__, __VA_ARGS__)

double wall_seconds(void);
/* malloc that exits on failure (a NULL must never become a NULL-pointer test by accident). */
void *xmalloc(size_t bytes);

/* ==== deterministic PRNG (xorshift64*): one stream, shared by the groups in their order === */

uint64_t rng_u64(void);
double   rng_unit(void);                   /* [0, 1) */
int64_t  rng_range(int64_t lo, int64_t hi); /* inclusive */
int      rng_chance(double p);

/* ==== dtypes and logits buffers ============================================================ */

const char *dtype_name(int32_t dtype);

/* n_rows rows of n_vocab logits, `stride` elements apart, in one allocation that ends exactly
 * where the last row ends. `value` holds what the library should read, as float (after the
 * round trip through the dtype), for the test's own reference computations. */
typedef struct logits_rows {
    int32_t dtype;
    int64_t n_rows, n_vocab, stride;
    void   *data;
    float  *value; /* [n_rows][n_vocab] */
} logits_rows;

void         logits_set(logits_rows *l, int64_t row, int64_t t, float v);
const void  *logits_row(const logits_rows *l, int64_t row);
const float *row_values(const logits_rows *l, int64_t row);
/* Allocates the rows (contents zero) and poisons the padding between rows with NaN. */
void logits_alloc(logits_rows *l, int32_t dtype, int64_t n_rows, int64_t n_vocab, int64_t stride);
void logits_free(logits_rows *l);
/* A random row with at least one finite entry (see test_util.c for the mix). */
void fill_random_row(logits_rows *l, int64_t row, float spread);
int64_t argmax_lowest_id(const float *value, int64_t V);
/* log-softmax of the raw row at token, in double: what out_logprobs must report. */
double reference_logprob(const float *value, int64_t V, int64_t token);
double reference_top_prob(const float *value, int64_t V);

/* Vocabulary sizes around the SIMD block edges, and every dtype. */
#define N_TAIL_VOCABS 10
#define N_DTYPES 3
extern const int64_t k_tail_vocabs[N_TAIL_VOCABS];
extern const int32_t k_dtypes[N_DTYPES];

/* ==== sampling parameters and verifiers ==================================================== */

pyspec_sampling_params plain_params(float temperature);
int is_greedy(const pyspec_sampling_params *p);
/* Random but valid: every transform independently on or off, greedy one time in five. */
pyspec_sampling_params random_params(int64_t V, float min_temperature);
/* A verifier, or exit(2): failing to make one is not what these tests test. */
pyspec_verifier *make_verifier(int64_t max_vocab, int32_t max_threads);

/* Inverse-CDF pick among the positive entries of w; -1 when there are none. */
int64_t pick_weighted(const float *w, int64_t n, double u);

/* ==== calls checked for their status and message =========================================== */

/* One failing call, run twice: with an error struct (which must then carry the status and a
 * message naming the argument) and with err == NULL (which must give the same status). */
typedef pyspec_status (*api_call_fn)(const void *call, pyspec_error *err);

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

typedef struct distribution_call {
    pyspec_verifier              *v;
    const void                   *logits;
    int64_t                       n_vocab;
    int32_t                       dtype;
    const pyspec_sampling_params *params;
    float                        *out_probs;
} distribution_call;

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

typedef struct batch_call {
    pyspec_verifier       *v;
    const pyspec_sequence *seqs;
    int64_t                n_seqs;
    int64_t                n_vocab;
    int32_t                dtype;
    int32_t                n_threads;
} batch_call;

void expect_status_either(api_call_fn fn, const void *call, pyspec_status want_a,
                          pyspec_status want_b, const char *arg_name, const char *what);
void expect_status(api_call_fn fn, const void *call, pyspec_status want, const char *arg_name,
                   const char *what);
pyspec_status call_sample(const void *call, pyspec_error *err);
pyspec_status call_distribution(const void *call, pyspec_error *err);
pyspec_status call_sparse(const void *call, pyspec_error *err);
pyspec_status call_batch(const void *call, pyspec_error *err);

/* ==== the test groups, by file (test_main.c runs them in this order) ====================== */

void check_conversions(void);                   /* test_util.c: the test's own converters */
void test_philox_known_answers(void);           /* test_rng.c                              */
void test_uniform(void);
void test_info_functions(void);                 /* test_errors.c                           */
void test_create_errors(void);
void test_sample_and_distribution_errors(void);
void test_verify_batch_errors(void);
void test_bad_logits(void);                     /* test_logits.c                           */
void test_all_neg_inf_rows(void);
void test_neg_inf_never_sampled(void);
void test_error_names_sequence(void);           /* test_draft_probs.c                      */
void test_draft_probs_errors(void);
void test_distribution(void);                   /* test_distribution.c                     */
void test_first_token_distribution(void);       /* test_exactness.c                        */
void run_random_invariants(void);               /* test_verify.c                           */
void test_penalties_random(void);               /* test_penalties.c                        */
void test_cuda_entry_points(void);              /* test_cuda_api.c                         */
void test_row_logprobs(void);                   /* test_logprobs.c                         */
void test_row_logprobs_errors(void);
void test_suffix_index_random(void);           /* test_suffix_index.c                     */
void test_suffix_index_errors(void);

#endif /* PYSPEC_TEST_UTIL_H */
