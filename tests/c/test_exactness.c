/*
 * test_exactness.c - modified rejection sampling is exact: the first emitted token is
 * distributed as p, with tests sharp enough to catch a 5% bias.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

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

void test_first_token_distribution(void) {
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
