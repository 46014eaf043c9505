/*
 * test_distribution.c - the transformed distribution (temperature, top-k, top-p, min-p) against
 * the test's own reference, the sparse form against the dense one, ties and extreme values.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

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

void test_distribution(void) {
    pyspec_verifier *v = make_verifier(5000, 1);
    test_distribution_random_rows(v);
    test_greedy_ties(v);
    test_cuts_among_ties(v);
    test_extreme_values(v);
    pyspec_verifier_free(v);
}
