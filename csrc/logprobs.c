/*
 * logprobs.c - what a completion's `logprobs` report for one emitted token: its own
 * log-probability and the n_top most likely tokens', under the raw softmax of its row (the
 * untransformed logits, as llama-cpp-python and the OpenAI API report them).
 *
 * llama-cpp-python answers logprobs by turning whole rows into Python lists and sorting all
 * n_vocab entries per token; here one streaming top-k pass (row_scan.c's, which also checks
 * every element) and one fixed-point normaliser pass (the one verify.c's out_logprobs uses,
 * so the two agree) do it, in the caller's arrays, with distribution.c's rank sort.
 */
#include <math.h>

#include "draw.h"
#include "internal.h"

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

    /* The top-k pass, into the caller's arrays, also finds the row maximum (the
     * normaliser's offset): with n_top 0 it keeps one token in local storage. */
    int32_t one_id;
    float one_logit;
    int32_t *ids = n_top > 0 ? out_ids : &one_id;
    float *vals = n_top > 0 ? out_logprobs : &one_logit;
    int64_t n_found = 0;
    pyspec_bad_logit bad;
    st = pyspec_scan_top_k(logits, n_vocab, dtype, n_top > 0 ? n_top : 1, ids, vals, &n_found, &bad);
    if (st == PYSPEC_OK && n_found == 0) {
        bad.index = -1; /* every entry is -inf: no softmax */
        st = PYSPEC_ERR_LOGITS;
    }
    if (st != PYSPEC_OK) return pyspec_fail_logits(err, "logits", 0, &bad);
    pyspec_sort_by_rank(ids, vals, NULL, n_found); /* heap order -> most likely first */

    const float max_logit = vals[0];
    const int shift = pyspec_weight_shift(n_vocab);
    const double log_z =
        log(ldexp((double)pyspec_row_fixed_sum(logits, n_vocab, dtype, max_logit, shift), -shift));
    /* Fewer than n_top when the row has fewer finite entries (the rest are -inf). */
    for (int64_t i = 0; i < n_found && n_top > 0; ++i)
        out_logprobs[i] = (float)((double)vals[i] - max_logit - log_z);
    if (out_n_top) *out_n_top = n_top > 0 ? (int32_t)n_found : 0;
    if (token >= 0)
        *out_token_logprob = (float)((double)pyspec_load_logit(logits, dtype, token) - max_logit - log_z);
    return PYSPEC_OK;
}
