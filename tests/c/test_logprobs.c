/*
 * test_logprobs.c - pyspec_row_logprobs: against the double-precision log-softmax on random
 * rows of every dtype and tail vocabulary (exact-sized outputs, so ASan sees any write past
 * n_top), and its argument errors.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "test_util.h"

/* The k-th most likely finite entry by (value descending, id ascending), or -1. */
static int64_t kth_most_likely(const float *value, int64_t V, int64_t k, unsigned char *taken) {
    int64_t best = -1;
    for (int64_t round = 0; round <= k; ++round) {
        best = -1;
        for (int64_t t = 0; t < V; ++t)
            if (!taken[t] && isfinite(value[t]) && (best < 0 || value[t] > value[best])) best = t;
        if (best < 0) return -1;
        taken[best] = 1;
    }
    return best;
}

void test_row_logprobs(void) {
    for (int d = 0; d < N_DTYPES; ++d) {
        for (int vi = 0; vi < N_TAIL_VOCABS; ++vi) {
            const int64_t V = k_tail_vocabs[vi];
            logits_rows l;
            logits_alloc(&l, k_dtypes[d], 1, V, V);
            fill_random_row(&l, 0, 4.0f);
            const float *value = row_values(&l, 0);
            const int32_t n_top = (int32_t)(V < 4 ? V : rng_range(1, V < 12 ? V : 12));
            const int32_t token = (int32_t)rng_range(0, V - 1);
            int32_t *ids = xmalloc((size_t)n_top * sizeof *ids);
            float *lps = xmalloc((size_t)n_top * sizeof *lps);
            int32_t n_found = -1;
            float token_lp = 0.0f;
            pyspec_error err;
            pyspec_status st = pyspec_row_logprobs(logits_row(&l, 0), V, l.dtype, token, n_top, ids, lps,
                                                   &n_found, &token_lp, &err);
            CHECK(st == PYSPEC_OK, "row_logprobs %s V=%lld: %s", dtype_name(l.dtype), (long long)V, err.message);
            const double want = reference_logprob(value, V, token);
            CHECK(isinf(want) ? token_lp == -INFINITY : fabs(token_lp - want) < 1e-5,
                  "token logprob %g, want %g (V=%lld)", token_lp, want, (long long)V);
            int64_t finite = 0;
            for (int64_t t = 0; t < V; ++t) finite += isfinite(value[t]) != 0;
            CHECK(n_found == (finite < n_top ? finite : n_top), "n_top found %d of %lld finite", n_found,
                  (long long)finite);
            unsigned char *taken = calloc((size_t)V, 1);
            for (int32_t i = 0; i < n_found && i < n_top; ++i) {
                for (int64_t t = 0; t < V; ++t) taken[t] = 0;
                const int64_t want_id = kth_most_likely(value, V, i, taken);
                CHECK(ids[i] == want_id, "top %d is %d, want %lld (V=%lld)", i, ids[i], (long long)want_id,
                      (long long)V);
                CHECK(fabs(lps[i] - reference_logprob(value, V, ids[i])) < 1e-5, "top %d logprob", i);
            }
            free(taken);
            free(ids);
            free(lps);
            logits_free(&l);
        }
    }
}

typedef struct logprobs_call {
    const void *logits;
    int64_t n_vocab;
    int32_t dtype, token, n_top;
    int32_t *ids;
    float *lps;
    int32_t *n_found;
    float *token_lp;
} logprobs_call;

static pyspec_status call_logprobs(const void *c_, pyspec_error *err) {
    const logprobs_call *c = c_;
    return pyspec_row_logprobs(c->logits, c->n_vocab, c->dtype, c->token, c->n_top, c->ids, c->lps,
                               c->n_found, c->token_lp, err);
}

void test_row_logprobs_errors(void) {
    float row[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int32_t ids[8], n_found;
    float lps[8], token_lp;
    const logprobs_call ok = {row, 8, PYSPEC_F32, 3, 2, ids, lps, &n_found, &token_lp};
    CHECK(call_logprobs(&ok, NULL) == PYSPEC_OK, "valid call");
    logprobs_call c = ok;
    c.logits = NULL;
    expect_status(call_logprobs, &c, PYSPEC_ERR_NULL, "logits", "NULL logits");
    c = ok, c.n_vocab = 0;
    expect_status(call_logprobs, &c, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab 0");
    c = ok, c.dtype = 9;
    expect_status(call_logprobs, &c, PYSPEC_ERR_DTYPE, "dtype", "unknown dtype");
    c = ok, c.n_top = 9;
    expect_status(call_logprobs, &c, PYSPEC_ERR_SHAPE, "n_top", "n_top above n_vocab");
    c = ok, c.n_top = -1;
    expect_status(call_logprobs, &c, PYSPEC_ERR_SHAPE, "n_top", "negative n_top");
    c = ok, c.ids = NULL;
    expect_status(call_logprobs, &c, PYSPEC_ERR_NULL, "out_ids", "NULL out_ids");
    c = ok, c.token = 8;
    expect_status(call_logprobs, &c, PYSPEC_ERR_TOKEN, "token", "token past the vocabulary");
    c = ok, c.token = -2;
    expect_status(call_logprobs, &c, PYSPEC_ERR_TOKEN, "token", "token -2");
    c = ok, c.token_lp = NULL;
    expect_status(call_logprobs, &c, PYSPEC_ERR_NULL, "out_token_logprob", "NULL out_token_logprob");
    c = ok, c.token = -1, c.token_lp = NULL, c.n_top = 0, c.ids = NULL, c.lps = NULL, c.n_found = NULL;
    CHECK(call_logprobs(&c, NULL) == PYSPEC_OK, "nothing asked, nothing written");
    float bad[8] = {0, 1, NAN, 3, 4, 5, 6, 7};
    c = ok, c.logits = bad;
    expect_status(call_logprobs, &c, PYSPEC_ERR_LOGITS, "NaN", "NaN logit");
    const float ninf[3] = {-INFINITY, -INFINITY, -INFINITY};
    c = ok, c.logits = ninf, c.n_vocab = 3, c.token = 0;
    expect_status(call_logprobs, &c, PYSPEC_ERR_LOGITS, "-inf", "all -inf");
}
