/*
 * test_logits.c - NaN, +inf and all -inf logits rows: refused wherever a reader meets them,
 * and only when the row is reached; -inf entries are never sampled.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* ==== 3. bad logits ======================================================================= */

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

void test_bad_logits(void) {
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

void test_all_neg_inf_rows(void) {
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
void test_neg_inf_never_sampled(void) {
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
