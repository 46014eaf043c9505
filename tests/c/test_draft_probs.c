/*
 * test_draft_probs.c - bad draft probabilities (dense and sparse), and errors that name the
 * sequence they come from.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

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

void test_draft_probs_errors(void) {
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
void test_error_names_sequence(void) {
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
