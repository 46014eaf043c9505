/*
 * test_penalties.c - repetition, frequency and presence penalties under the sanitizers.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* Penalties under the sanitizers: random windows (including windows longer than the
 * vocabulary and tokens penalised many times), every transform path; point-mass verify
 * must emit what pyspec_sample draws with the history extended by the accepted drafts. */
void test_penalties_random(void) {
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
