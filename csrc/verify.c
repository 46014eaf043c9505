/*
 * verify.c - the fused multi-output verifier on the CPU.
 *
 * Every verify row is resolved on its own: its acceptance test, corrective draw and bonus
 * draw depend only on that row's logits, its draft token and the (seed, position, purpose)
 * draws. So rows can be worked on by any thread in any order, and the sequence's result is
 * assembled afterwards: n_accepted is the first row that rejected. Threads claim rows in
 * order and skip rows behind a known rejection, so little work is wasted and the result is
 * the same for every thread count.
 */
#include <math.h>

#ifdef _OPENMP
#  include <omp.h>
#endif

#include "draw.h"
#include "internal.h"
#include "philox.h"
#include "rules.h"

#define PYSPEC_DRAFT_SUM_TOLERANCE (PYSPEC_DRAFT_SUM_TOLERANCE_PPM * 1e-6)

/* q(token) from row `row` of the draft probabilities; 0 for a token a sparse row omits.
 * Returns 0 when the value is not a probability. */
static int draft_q(const pyspec_draft_probs *dp, int64_t row, int32_t token, double *q) {
    const float *probs = dp->probs + row * dp->row_stride;
    float value = 0.0f;
    if (!dp->tokens) {
        value = probs[token];
    } else {
        const int32_t *tokens = dp->tokens + row * dp->row_stride;
        for (int64_t j = 0; j < dp->n_per_row; ++j)
            if (tokens[j] == token) { value += probs[j]; }
    }
    *q = value;
    return pyspec_draft_q_in_range(value);
}

/* A sparse draft row is short, so it is checked to be a distribution when its row is
 * resolved: entries in [0, PYSPEC_DRAFT_Q_MAX] summing to 1 within PYSPEC_DRAFT_SUM_TOLERANCE. q that is not a
 * distribution would bias rejection sampling without any error. (A dense row is never
 * streamed; the Python API checks it.) Rows after a rejection are not read, nor checked. */
static pyspec_status check_sparse_row(const pyspec_draft_probs *dp, int64_t i, pyspec_error *err) {
    const float *q = dp->probs + i * dp->row_stride;
    double sum = 0.0;
    for (int64_t j = 0; j < dp->n_per_row; ++j) {
        if (!pyspec_draft_q_in_range(q[j]))
            return pyspec_fail(err, PYSPEC_ERR_DRAFT_PROBS,
                               "draft_probs row %lld entry %lld is %g; probabilities must be in "
                               "[0, 1] (up to %g for rounding)", (long long)i, (long long)j,
                               (double)q[j], (double)PYSPEC_DRAFT_Q_MAX);
        sum += q[j];
    }
    if (!(fabs(sum - 1.0) <= PYSPEC_DRAFT_SUM_TOLERANCE))
        return pyspec_fail(err, PYSPEC_ERR_DRAFT_PROBS,
                           "draft_probs row %lld sums to %g; a draft distribution must sum to 1 "
                           "(within %g)", (long long)i, sum, PYSPEC_DRAFT_SUM_TOLERANCE);
    return PYSPEC_OK;
}

/* The maximum of the raw (unpenalised) logits of a validated row. The logprob normaliser
 * and the top probability need it: with penalties on, dist.max_logit is the penalised
 * maximum, and a raw logit above it would put exp() outside (-inf, 0], where the fixed-point
 * weights saturate. Only paid with penalties and logprobs or top probabilities together. */
static float raw_row_max(const void *row, int64_t n_vocab, int32_t dtype) {
    float m = -INFINITY;
    if (dtype == PYSPEC_F32) {
        const float *x = (const float *)row;
        for (int64_t j = 0; j < n_vocab; ++j) m = x[j] > m ? x[j] : m;
    } else {
        for (int64_t j = 0; j < n_vocab; ++j) {
            const float v = pyspec_load_logit(row, dtype, j);
            m = v > m ? v : m;
        }
    }
    return m;
}

/* Resolves verify row i of seq: writes the token that row would emit into out_tokens[i]
 * (the draft itself when accepted) and, if asked, its log-probability and the row's top
 * probability. *stops is set when
 * the row ends the sequence (a rejection, or the bonus row). */
static pyspec_status resolve_row(const pyspec_sequence *seq, int64_t i, int64_t n_vocab,
                                 int32_t dtype, pyspec_scratch *scratch, int *stops,
                                 pyspec_error *err) {
    const size_t elem = dtype == PYSPEC_F32 ? 4 : 2;
    const void *row = (const char *)seq->target_logits + (size_t)(i * seq->logits_row_stride) * elem;
    const pyspec_sampling_params *p = &seq->params;
    const int64_t pos = seq->position + i;
    pyspec_row_dist dist;
    pyspec_bad_logit bad;
    pyspec_penalties pen_storage;
    const pyspec_penalties *pen = pyspec_row_penalties(p, seq->draft_tokens, i, scratch, &pen_storage);

    pyspec_status st = pyspec_build_dist(row, n_vocab, dtype, p, pen, scratch, &dist, &bad);
    if (st != PYSPEC_OK) return pyspec_fail_logits(err, "target_logits", i, &bad);

    int32_t token;
    if (i == seq->n_draft) { /* bonus row: a plain sample */
        token = pyspec_dist_draw(&dist, pyspec_uniform_keyed(p->seed, pos, PYSPEC_PURPOSE_SAMPLE));
        *stops = 1;
    } else if (!seq->draft_probs) { /* point-mass draft: emit the plain sample, compare */
        token = pyspec_dist_draw(&dist, pyspec_uniform_keyed(p->seed, pos, PYSPEC_PURPOSE_SAMPLE));
        *stops = token != seq->draft_tokens[i];
    } else { /* modified rejection sampling */
        const int32_t x = seq->draft_tokens[i];
        if (seq->draft_probs->tokens) {
            const pyspec_status sparse_st = check_sparse_row(seq->draft_probs, i, err);
            if (sparse_st != PYSPEC_OK) return sparse_st;
        }
        double qx;
        if (!draft_q(seq->draft_probs, i, x, &qx) || !(qx > 0.0))
            return pyspec_fail_drafted_q(err, i, x, qx);
        const double px = pyspec_dist_prob(&dist, x);
        const double u = pyspec_uniform_keyed(p->seed, pos, PYSPEC_PURPOSE_ACCEPT);
        if (pyspec_accepts(u, qx, px)) {
            token = x;
            *stops = 0;
        } else {
            /* Residual max(0, p - q) lives on the target's kept set: p is 0 elsewhere. The
             * kept set's fixed-point weights are reused in place as residual weights, in the
             * same units (pyspec_fixed_residual), so their sum is exact. */
            const pyspec_draft_probs *dp = seq->draft_probs;
            const float *q_row = dp->probs + i * dp->row_stride;
            if (dp->tokens) { /* scatter the sparse row so each lookup is O(1) */
                const int32_t *q_tok = dp->tokens + i * dp->row_stride;
                for (int64_t j = 0; j < dp->n_per_row; ++j) scratch->draft_q[q_tok[j]] += q_row[j];
                q_row = scratch->draft_q;
            }
            uint64_t residual = 0;
            uint64_t *w = dist.weight;
            int q_ok = 1;
            int32_t bad_token = 0;
            float bad_q = 0.0f;
            for (int64_t j = 0; j < dist.n; ++j) {
                const float q = q_row[dist.token[j]];
                if (!pyspec_draft_q_in_range(q) && q_ok) {
                    q_ok = 0;
                    bad_token = dist.token[j];
                    bad_q = q;
                }
                w[j] = q_ok ? pyspec_fixed_residual(w[j], dist.total, q) : 0;
                residual += w[j];
            }
            if (dp->tokens) { /* leave the scatter buffer all zeros again */
                const int32_t *q_tok = dp->tokens + i * dp->row_stride;
                for (int64_t j = 0; j < dp->n_per_row; ++j) scratch->draft_q[q_tok[j]] = 0.0f;
            }
            if (!q_ok) return pyspec_fail_kept_q(err, i, bad_token, (double)bad_q);
            const double u_res = pyspec_uniform_keyed(p->seed, pos, PYSPEC_PURPOSE_RESIDUAL);
            if (residual > 0) {
                dist.total = residual;
            } else { /* p <= q on the whole support means p == q up to rounding */
                pyspec_build_dist(row, n_vocab, dtype, p, pen, scratch, &dist, &bad);
            }
            token = pyspec_dist_draw(&dist, u_res);
            *stops = 1;
        }
    }
    seq->out_tokens[i] = token;
    if (!seq->out_logprobs && !seq->out_top_probs) return PYSPEC_OK;
    const float raw_max = pen ? raw_row_max(row, n_vocab, dtype) : dist.max_logit;
    if (seq->out_top_probs)
        seq->out_top_probs[i] = (float)pyspec_row_top_prob(row, n_vocab, dtype, raw_max);
    if (seq->out_logprobs) {
        /* The raw softmax normaliser, from the same fixed-point weights (their rounding,
         * < 2^-45 per token, is far below float resolution of a log-probability). */
        double z = ldexp((double)pyspec_row_fixed_sum(row, n_vocab, dtype, raw_max,
                                                      pyspec_weight_shift(n_vocab)),
                         -pyspec_weight_shift(n_vocab));
        float l = pyspec_load_logit(row, dtype, token);
        seq->out_logprobs[i] = (float)((double)l - raw_max - log(z));
    }
    return PYSPEC_OK;
}

static pyspec_status check_sequence(const pyspec_sequence *s, int64_t idx, int64_t n_vocab,
                                    pyspec_error *err) {
    pyspec_status st = pyspec_check_sequence_shape(s, idx, n_vocab, PYSPEC_MAX_DRAFT, err);
    if (st != PYSPEC_OK) return st;
    /* The token ids, which live in host memory here. */
    pyspec_sequence_names names;
    pyspec_name_sequence(idx, &names);
    st = pyspec_check_penalties(&s->params, n_vocab, s->n_draft, names.params, err);
    if (st != PYSPEC_OK) return st;
    for (int64_t i = 0; i < s->n_draft; ++i)
        if (s->draft_tokens[i] < 0 || s->draft_tokens[i] >= n_vocab)
            return pyspec_fail_draft_token(err, names.seq, i, s->draft_tokens[i], n_vocab);
    const pyspec_draft_probs *dp = s->draft_probs;
    if (dp && s->n_draft > 0 && dp->tokens) {
        for (int64_t i = 0; i < s->n_draft; ++i)
            for (int64_t j = 0; j < dp->n_per_row; ++j) {
                int32_t t = dp->tokens[i * dp->row_stride + j];
                if (t < 0 || t >= n_vocab)
                    return pyspec_fail_sparse_token(err, names.seq, i, j, t, n_vocab);
            }
    }
    return PYSPEC_OK;
}

static pyspec_status check_call(const pyspec_verifier *v, int64_t n_vocab, int32_t dtype,
                                int32_t n_threads, pyspec_error *err) {
    pyspec_status st = pyspec_check_call_vocab(v, v ? v->max_vocab : 0, n_vocab, dtype, err);
    if (st != PYSPEC_OK) return st;
    if (n_threads < 1 || n_threads > v->max_threads)
        return pyspec_fail(err, PYSPEC_ERR_CAPACITY,
                           "n_threads must be in [1, %d] for this verifier, got %d",
                           v->max_threads, n_threads);
    return PYSPEC_OK;
}

pyspec_status pyspec_verify_batch(pyspec_verifier *v, const pyspec_sequence *seqs,
                                  int64_t n_seqs, int64_t n_vocab, int32_t dtype,
                                  int32_t n_threads, pyspec_error *err) {
    pyspec_status st = check_call(v, n_vocab, dtype, n_threads, err);
    if (st != PYSPEC_OK) return st;
    st = pyspec_check_sequence_list(seqs, n_seqs, err);
    if (st != PYSPEC_OK) return st;
    int64_t total_rows = 0;
    for (int64_t s = 0; s < n_seqs; ++s) {
        st = check_sequence(&seqs[s], s, n_vocab, err);
        if (st != PYSPEC_OK) return st;
        total_rows += seqs[s].n_draft + 1;
        /* out_n_accepted doubles as "first row known to stop the sequence" while working. */
        *seqs[s].out_n_accepted = seqs[s].n_draft;
    }

    int64_t next_row = 0;
#ifdef _OPENMP
#   pragma omp parallel num_threads(n_threads) if (n_threads > 1 && total_rows > 1)
#endif
    {
#ifdef _OPENMP
        pyspec_scratch *scratch = &v->scratch[omp_get_thread_num()];
#else
        pyspec_scratch *scratch = &v->scratch[0];
#endif
        int64_t s = 0, base = 0; /* this thread's cursor: row 0 of sequence s is row `base` */
        for (;;) {
            int64_t g = __atomic_fetch_add(&next_row, 1, __ATOMIC_RELAXED);
            if (g >= total_rows) break;
            while (g >= base + seqs[s].n_draft + 1) base += seqs[s++].n_draft + 1;
            const pyspec_sequence *seq = &seqs[s];
            const int64_t i = g - base;
            if (__atomic_load_n(seq->out_n_accepted, __ATOMIC_RELAXED) < i) continue;
            int stops = 0;
            if (resolve_row(seq, i, n_vocab, dtype, scratch, &stops, NULL) != PYSPEC_OK) {
                seq->out_tokens[i] = -1; /* marks the failed row; reported below */
                stops = 1;
            }
            if (stops) { /* atomic min */
                int64_t cur = __atomic_load_n(seq->out_n_accepted, __ATOMIC_RELAXED);
                while (i < cur && !__atomic_compare_exchange_n(seq->out_n_accepted, &cur, i, 0,
                                                               __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
                }
            }
        }
    }

    for (int64_t s = 0; s < n_seqs; ++s) {
        const pyspec_sequence *seq = &seqs[s];
        int64_t stop = *seq->out_n_accepted;
        if (seq->out_tokens[stop] < 0) { /* resolve again, alone, for the message */
            int stops;
            pyspec_error row_err = { 0, { 0 } };
            st = resolve_row(seq, stop, n_vocab, dtype, &v->scratch[0], &stops, &row_err);
            return pyspec_fail_in_sequence(err, st, s, row_err.message);
        }
    }
    return PYSPEC_OK;
}

static pyspec_status check_single_row(pyspec_verifier *v, const void *logits, int64_t n_vocab,
                                      int32_t dtype, const pyspec_sampling_params *params,
                                      const void *out, const char *out_name, pyspec_error *err) {
    pyspec_status st = check_call(v, n_vocab, dtype, 1, err);
    if (st != PYSPEC_OK) return st;
    if (!logits) return pyspec_fail(err, PYSPEC_ERR_NULL, "logits is NULL");
    if (!out) return pyspec_fail(err, PYSPEC_ERR_NULL, "%s is NULL", out_name);
    st = pyspec_check_params(params, "params", err);
    if (st != PYSPEC_OK) return st;
    return pyspec_check_penalties(params, n_vocab, 0, "params", err);
}

/* The distribution of one row on its own (penalty window: the history alone). */
static pyspec_status single_row_dist(pyspec_verifier *v, const void *logits, int64_t n_vocab,
                                     int32_t dtype, const pyspec_sampling_params *params,
                                     pyspec_row_dist *dist, pyspec_error *err) {
    pyspec_bad_logit bad;
    pyspec_penalties pen_storage;
    const pyspec_penalties *pen = pyspec_row_penalties(params, NULL, 0, &v->scratch[0], &pen_storage);
    if (pyspec_build_dist(logits, n_vocab, dtype, params, pen, &v->scratch[0], dist, &bad) != PYSPEC_OK)
        return pyspec_fail_logits(err, "logits", 0, &bad);
    return PYSPEC_OK;
}

pyspec_status pyspec_sample(pyspec_verifier *v, const void *logits, int64_t n_vocab,
                            int32_t dtype, const pyspec_sampling_params *params,
                            int64_t position, int32_t *out_token, float *out_prob,
                            pyspec_error *err) {
    pyspec_status st = check_single_row(v, logits, n_vocab, dtype, params, out_token, "out_token", err);
    if (st != PYSPEC_OK) return st;
    if (position < 0)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "position must be >= 0, got %lld", (long long)position);
    pyspec_row_dist dist;
    st = single_row_dist(v, logits, n_vocab, dtype, params, &dist, err);
    if (st != PYSPEC_OK) return st;
    int32_t token = pyspec_dist_draw(&dist, pyspec_uniform_keyed(params->seed, position, PYSPEC_PURPOSE_SAMPLE));
    *out_token = token;
    if (out_prob) *out_prob = (float)pyspec_dist_prob(&dist, token);
    return PYSPEC_OK;
}

pyspec_status pyspec_distribution(pyspec_verifier *v, const void *logits, int64_t n_vocab,
                                  int32_t dtype, const pyspec_sampling_params *params,
                                  float *out_probs, pyspec_error *err) {
    pyspec_status st = check_single_row(v, logits, n_vocab, dtype, params, out_probs, "out_probs", err);
    if (st != PYSPEC_OK) return st;
    pyspec_row_dist dist;
    st = single_row_dist(v, logits, n_vocab, dtype, params, &dist, err);
    if (st != PYSPEC_OK) return st;
    for (int64_t t = 0; t < n_vocab; ++t) out_probs[t] = 0.0f;
    for (int64_t j = 0; j < dist.n; ++j)
        out_probs[dist.token[j]] = (float)pyspec_fixed_prob(dist.weight[j], dist.total);
    return PYSPEC_OK;
}

pyspec_status pyspec_distribution_sparse(pyspec_verifier *v, const void *logits, int64_t n_vocab,
                                         int32_t dtype, const pyspec_sampling_params *params,
                                         int32_t *out_tokens, float *out_probs, int64_t capacity,
                                         int64_t *out_n, pyspec_error *err) {
    pyspec_status st = check_single_row(v, logits, n_vocab, dtype, params, out_n, "out_n", err);
    if (st != PYSPEC_OK) return st;
    if (!out_tokens || !out_probs)
        return pyspec_fail(err, PYSPEC_ERR_NULL, "%s is NULL", out_tokens ? "out_probs" : "out_tokens");
    pyspec_row_dist dist;
    st = single_row_dist(v, logits, n_vocab, dtype, params, &dist, err);
    if (st != PYSPEC_OK) return st;
    /* Tokens whose fixed-point weight rounded to 0 (far below 2^-40 of the maximum) have
     * probability 0 like every token outside the kept set, and are left out the same way. */
    int64_t n_pos = 0;
    for (int64_t j = 0; j < dist.n; ++j) n_pos += dist.weight[j] > 0;
    if (n_pos > capacity)
        return pyspec_fail(err, PYSPEC_ERR_CAPACITY,
                           "the distribution keeps %lld tokens but capacity is %lld",
                           (long long)n_pos, (long long)capacity);
    int64_t m = 0;
    for (int64_t j = 0; j < dist.n; ++j) {
        if (dist.weight[j] == 0) continue;
        out_tokens[m] = dist.token[j];
        out_probs[m] = (float)pyspec_fixed_prob(dist.weight[j], dist.total);
        ++m;
    }
    *out_n = n_pos;
    return PYSPEC_OK;
}

double pyspec_uniform(uint64_t seed, int64_t position, int32_t purpose) {
    return pyspec_uniform_keyed(seed, position, purpose);
}

double pyspec_uniform_stream_at(uint64_t seed, int64_t position, int32_t purpose, uint32_t stream) {
    return pyspec_uniform_stream(seed, position, purpose, stream);
}

void pyspec_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    if (!counter || !key || !out) return;
    pyspec_philox_block(counter, key, out);
}
