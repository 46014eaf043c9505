/*
 * logprobs.c - what a completion's `logprobs` report for one emitted token: its own
 * log-probability and the n_top most likely tokens', under the raw softmax of its row (the
 * untransformed logits, as llama-cpp-python and the OpenAI API report them).
 *
 * llama-cpp-python answers logprobs by turning whole rows into Python lists and sorting all
 * n_vocab entries per token; here one streaming top-k pass (row_scan.c's, which also checks
 * every element) and one fixed-point normaliser pass (the one verify.c's out_logprobs uses,
 * so the two agree) do it, with no allocation larger than n_top pairs.
 */
#include <math.h>
#include <stdlib.h>

#include "draw.h"
#include "internal.h"

typedef struct scored_token {
    float logit;
    int32_t token;
} scored_token;

/* Most likely first; among equal logits the lower token id first (row_scan's tie rule). */
static int more_likely_first(const void *a, const void *b) {
    const scored_token *x = (const scored_token *)a, *y = (const scored_token *)b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->token > y->token) - (x->token < y->token);
}

pyspec_status pyspec_row_logprobs(const void *logits, int64_t n_vocab, int32_t dtype,
                                  int32_t token, int32_t n_top, int32_t *out_ids,
                                  float *out_logprobs, int32_t *out_n_top,
                                  float *out_token_logprob, pyspec_error *err) {
    if (!logits) return pyspec_fail(err, PYSPEC_ERR_NULL, "logits is NULL");
    /* The shared dtype and n_vocab checks; they want a verifier only to compare it with
     * NULL, and there is none here (no vocabulary limit either). */
    pyspec_status st = pyspec_check_call_vocab(logits, INT32_MAX, n_vocab, dtype, err);
    if (st != PYSPEC_OK) return st;
    if (n_top < 0 || n_top > n_vocab)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "n_top must be in [0, n_vocab = %lld], got %d",
                           (long long)n_vocab, n_top);
    if (n_top > 0 && (!out_ids || !out_logprobs || !out_n_top))
        return pyspec_fail(err, PYSPEC_ERR_NULL, "out_ids, out_logprobs and out_n_top are needed for n_top %d",
                           n_top);
    if (token < -1 || token >= n_vocab)
        return pyspec_fail(err, PYSPEC_ERR_TOKEN, "token = %d is outside [0, n_vocab = %lld) (or -1: none)",
                           token, (long long)n_vocab);
    if (token >= 0 && !out_token_logprob)
        return pyspec_fail(err, PYSPEC_ERR_NULL, "out_token_logprob is NULL");

    /* The top-k pass finds the row maximum (the normaliser's offset) even for n_top 0. */
    const int64_t k = n_top > 0 ? n_top : 1;
    scored_token *top = malloc((size_t)k * sizeof *top);
    int32_t *ids = malloc((size_t)k * sizeof *ids);
    float *vals = malloc((size_t)k * sizeof *vals);
    if (!top || !ids || !vals) {
        free(top), free(ids), free(vals);
        return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "no memory for %lld top tokens", (long long)k);
    }
    int64_t n_found = 0;
    pyspec_bad_logit bad;
    st = pyspec_scan_top_k(logits, n_vocab, dtype, k, ids, vals, &n_found, &bad);
    if (st == PYSPEC_OK && n_found == 0) {
        bad.index = -1; /* every entry is -inf: no softmax */
        st = PYSPEC_ERR_LOGITS;
    }
    if (st != PYSPEC_OK) {
        free(top), free(ids), free(vals);
        return pyspec_fail_logits(err, "logits", 0, &bad);
    }
    for (int64_t i = 0; i < n_found; ++i) top[i] = (scored_token){vals[i], ids[i]};
    free(ids), free(vals);
    qsort(top, (size_t)n_found, sizeof *top, more_likely_first);

    const float max_logit = top[0].logit;
    const int shift = pyspec_weight_shift(n_vocab);
    const double log_z =
        log(ldexp((double)pyspec_row_fixed_sum(logits, n_vocab, dtype, max_logit, shift), -shift));
    if (n_top > 0) {
        /* Fewer than n_top when the row has fewer finite entries (the rest are -inf). */
        for (int64_t i = 0; i < n_found; ++i) {
            out_ids[i] = top[i].token;
            out_logprobs[i] = (float)((double)top[i].logit - max_logit - log_z);
        }
    }
    if (out_n_top) *out_n_top = n_top > 0 ? (int32_t)n_found : 0;
    if (token >= 0)
        *out_token_logprob = (float)((double)pyspec_load_logit(logits, dtype, token) - max_logit - log_z);
    free(top);
    return PYSPEC_OK;
}
