/*
 * test_verify.c - randomised invariants of pyspec_verify_batch: every draft kind, dtype,
 * thread count and layout against pyspec_sample and the row-by-row rules.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* ==== 4. randomised invariants of pyspec_verify_batch ===================================== */

typedef enum draft_kind { DRAFT_POINT_MASS, DRAFT_DENSE, DRAFT_SPARSE } draft_kind;
static const char *const k_draft_kind_name[] = { "point-mass", "dense", "sparse" };

typedef struct outputs {
    int32_t *tokens;   /* [n_draft + 1] */
    float   *logprobs; /* [n_draft + 1] or NULL */
    int64_t *n_accepted;
    float   *top_probs; /* [n_draft + 1] or NULL */
} outputs;

typedef struct test_seq {
    logits_rows        logits; /* n_draft + 1 rows */
    draft_kind         kind;
    int64_t            n_draft;
    int32_t           *drafts; /* [n_draft], NULL when n_draft == 0 */
    float             *q;      /* dense [n_draft][row_stride] or sparse [n_draft][row_stride] */
    int32_t           *q_tokens;
    pyspec_draft_probs dp;
    pyspec_sampling_params params;
    int64_t            position;
    outputs            ref, rerun; /* the n_threads = 1 batch run, and every later run */
} test_seq;

static void outputs_alloc(outputs *o, int64_t n_draft, int want_logprobs, int want_top_probs) {
    o->tokens = xmalloc((size_t)(n_draft + 1) * sizeof(int32_t));
    o->logprobs = want_logprobs ? xmalloc((size_t)(n_draft + 1) * sizeof(float)) : NULL;
    o->n_accepted = xmalloc(sizeof(int64_t));
    o->top_probs = want_top_probs ? xmalloc((size_t)(n_draft + 1) * sizeof(float)) : NULL;
}

static void outputs_free(outputs *o) {
    free(o->tokens);
    free(o->logprobs);
    free(o->n_accepted);
    free(o->top_probs);
}

static pyspec_sequence as_sequence(const test_seq *s, const outputs *o) {
    pyspec_sequence seq = { s->logits.data, s->logits.stride, s->drafts, s->n_draft,
                            s->kind == DRAFT_POINT_MASS ? NULL : &s->dp, s->params, s->position,
                            o->tokens, o->logprobs, o->n_accepted, o->top_probs };
    return seq;
}

/* A dense draft row: q mixes the target's p with a random distribution over a random subset
 * (from q = p, where nearly every draft is accepted, to an unrelated q). */
static int32_t make_dense_row(const float *p, int64_t V, float *q_row, double *scratch) {
    static const double alphas[] = { 1.0, 0.9, 0.5, 0.0 };
    const double alpha = alphas[rng_range(0, 3)], density = 0.02 + 0.98 * rng_unit();
    double r_total = 0.0;
    for (int64_t t = 0; t < V; ++t) {
        scratch[t] = rng_chance(density) ? rng_unit() : 0.0;
        r_total += scratch[t];
    }
    if (r_total == 0.0) {
        scratch[rng_range(0, V - 1)] = 1.0;
        r_total = 1.0;
    }
    for (int64_t t = 0; t < V; ++t) q_row[t] = (float)(alpha * p[t] + (1.0 - alpha) * scratch[t] / r_total);
    return (int32_t)pick_weighted(q_row, V, rng_unit());
}

/* A sparse draft row: the drafted token (drawn from p, or anything) with q in (0.05, 1], a
 * few other distinct tokens sharing part of the rest, some q = 0 padding pairs, and garbage
 * after n_per_row that must never be read. */
static int32_t make_sparse_row(const float *p, int64_t V, int64_t n_per_row, int64_t stride,
                               int32_t *tok_row, float *q_row) {
    const int32_t x = (int32_t)(rng_chance(0.6) ? pick_weighted(p, V, rng_unit()) : rng_range(0, V - 1));
    const int64_t slot_x = rng_range(0, n_per_row - 1);
    double remaining = 1.0 - (0.05 + 0.95 * rng_unit());
    for (int64_t j = 0; j < n_per_row; ++j) {
        tok_row[j] = (int32_t)rng_range(0, V - 1);
        q_row[j] = 0.0f; /* padding unless made a real entry below */
    }
    tok_row[slot_x] = x;
    q_row[slot_x] = (float)(1.0 - remaining);
    for (int64_t j = 0; j < n_per_row; ++j) {
        if (j == slot_x || rng_chance(0.25)) continue;
        const int32_t t = (int32_t)rng_range(0, V - 1);
        int distinct = 1;
        for (int64_t k = 0; k < n_per_row; ++k) distinct &= !(q_row[k] > 0.0f && tok_row[k] == t);
        if (!distinct) continue;
        const double share = remaining * 0.5 * rng_unit();
        tok_row[j] = t;
        q_row[j] = (float)share;
        remaining -= share;
    }
    q_row[slot_x] = (float)(q_row[slot_x] + remaining); /* a sparse row sums to 1 (checked) */
    for (int64_t j = n_per_row; j < stride; ++j) {
        tok_row[j] = -7;
        q_row[j] = NAN;
    }
    return x;
}

/* A sparse draft row as a drafter would make it: pyspec_distribution_sparse of the row under
 * the drafter's own params (top-k = n_per_row, so it fits), written straight into the row's
 * slots, padded with q = 0 pairs; the draft is drawn from it. */
static int32_t make_drafter_sparse_row(pyspec_verifier *v, const void *row, int64_t V, int32_t dtype,
                                       const pyspec_sampling_params *drafter, int64_t n_per_row,
                                       int64_t stride, int32_t *tok_row, float *q_row) {
    int64_t n = 0;
    pyspec_error err = { 0, { 0 } };
    pyspec_status st = pyspec_distribution_sparse(v, row, V, dtype, drafter, tok_row, q_row,
                                                  n_per_row, &n, &err);
    if (!CHECK(st == PYSPEC_OK && n >= 1 && n <= n_per_row,
               "drafter's pyspec_distribution_sparse: status %d (%s), n %lld, capacity %lld", st,
               st ? err.message : "ok", (long long)n, (long long)n_per_row))
        n = 0;
    if (n == 0) { /* keep the sequence valid: one certain token */
        tok_row[0] = 0;
        q_row[0] = 1.0f;
        n = 1;
    }
    for (int64_t j = n; j < n_per_row; ++j) {
        tok_row[j] = (int32_t)rng_range(0, V - 1);
        q_row[j] = 0.0f;
    }
    for (int64_t j = n_per_row; j < stride; ++j) {
        tok_row[j] = -7;
        q_row[j] = NAN;
    }
    return tok_row[pick_weighted(q_row, n, rng_unit())];
}

static void build_drafts(pyspec_verifier *v, test_seq *s, int64_t V, int32_t dtype) {
    const int64_t n = s->n_draft;
    s->drafts = n > 0 ? xmalloc((size_t)n * sizeof(int32_t)) : NULL;
    s->q = NULL;
    s->q_tokens = NULL;
    if (n == 0) return;
    float *p = xmalloc((size_t)V * sizeof *p);
    double *scratch = xmalloc((size_t)V * sizeof *scratch);
    int64_t n_per_row = 0, stride = 0;
    const int from_drafter = s->kind == DRAFT_SPARSE && rng_chance(0.4);
    pyspec_sampling_params drafter = random_params(V, 0.2f);
    if (s->kind == DRAFT_DENSE) {
        stride = V + rng_range(0, 3);
        s->q = xmalloc((size_t)(n * stride) * sizeof(float));
        for (int64_t j = 0; j < n * stride; ++j) s->q[j] = NAN; /* padding after n_vocab */
    } else if (s->kind == DRAFT_SPARSE) {
        n_per_row = rng_range(1, 8);
        stride = n_per_row + rng_range(0, 2);
        s->q = xmalloc((size_t)(n * stride) * sizeof(float));
        s->q_tokens = xmalloc((size_t)(n * stride) * sizeof(int32_t));
        drafter.top_k = (int32_t)n_per_row;
    }
    for (int64_t i = 0; i < n; ++i) {
        const void *row = logits_row(&s->logits, i);
        if (s->kind == DRAFT_POINT_MASS) {
            int32_t sampled = -1;
            pyspec_status st = pyspec_sample(v, row, V, dtype, &s->params, s->position + i, &sampled, NULL, NULL);
            CHECK(st == PYSPEC_OK, "pyspec_sample for the draft of row %lld: status %d", (long long)i, st);
            s->drafts[i] = rng_chance(0.8) && st == PYSPEC_OK ? sampled : (int32_t)rng_range(0, V - 1);
            continue;
        }
        if (from_drafter) {
            s->drafts[i] = make_drafter_sparse_row(v, row, V, dtype, &drafter, n_per_row, stride,
                                                   s->q_tokens + i * stride, s->q + i * stride);
            continue;
        }
        pyspec_status st = pyspec_distribution(v, row, V, dtype, &s->params, p, NULL);
        CHECK(st == PYSPEC_OK, "pyspec_distribution for the draft of row %lld: status %d", (long long)i, st);
        if (s->kind == DRAFT_DENSE)
            s->drafts[i] = make_dense_row(p, V, s->q + i * stride, scratch);
        else
            s->drafts[i] = make_sparse_row(p, V, n_per_row, stride, s->q_tokens + i * stride, s->q + i * stride);
    }
    s->dp = (pyspec_draft_probs){ s->q, s->q_tokens, stride, n_per_row };
    free(p);
    free(scratch);
}

static void make_test_seq(pyspec_verifier *v, test_seq *s, int64_t V, int32_t dtype) {
    s->n_draft = rng_chance(0.1) ? 0 : rng_range(0, 16);
    s->kind = (draft_kind)rng_range(0, 2);
    s->params = random_params(V, 0.1f);
    s->position = rng_chance(0.5) ? rng_range(0, 100) : rng_range(0, (int64_t)1 << 40);
    logits_alloc(&s->logits, dtype, s->n_draft + 1, V, V + (rng_chance(0.5) ? 0 : rng_range(1, 9)));
    for (int64_t r = 0; r <= s->n_draft; ++r) fill_random_row(&s->logits, r, rng_chance(0.5) ? 3.0f : 12.0f);
    build_drafts(v, s, V, dtype);
    const int want_logprobs = rng_chance(0.5), want_top_probs = rng_chance(0.5);
    outputs_alloc(&s->ref, s->n_draft, want_logprobs, want_top_probs);
    outputs_alloc(&s->rerun, s->n_draft, want_logprobs, want_top_probs);
}

static void free_test_seq(test_seq *s) {
    logits_free(&s->logits);
    free(s->drafts);
    free(s->q);
    free(s->q_tokens);
    outputs_free(&s->ref);
    outputs_free(&s->rerun);
}

/* What a run must reproduce exactly: n_accepted, and the emitted tokens, log-probs and top
 * probabilities. */
static int same_outputs(const test_seq *s, const outputs *a, const outputs *b) {
    if (*a->n_accepted != *b->n_accepted) return 0;
    const int64_t n = *a->n_accepted;
    if (n < 0 || n > s->n_draft) return 0;
    if (memcmp(a->tokens, b->tokens, (size_t)(n + 1) * sizeof(int32_t)) != 0) return 0;
    if (a->top_probs && memcmp(a->top_probs, b->top_probs, (size_t)(n + 1) * sizeof(float)) != 0)
        return 0;
    return !a->logprobs || memcmp(a->logprobs, b->logprobs, (size_t)(n + 1) * sizeof(float)) == 0;
}

/* The invariants of one verified sequence (its reference outputs). */
static void check_verified_sequence(pyspec_verifier *v, const test_seq *s, int64_t V, int32_t dtype) {
    const int64_t n_acc = *s->ref.n_accepted;
    if (!CHECK(n_acc >= 0 && n_acc <= s->n_draft, "n_accepted %lld outside [0, n_draft = %lld]",
               (long long)n_acc, (long long)s->n_draft))
        return;
    float *p = xmalloc((size_t)V * sizeof *p);
    for (int64_t i = 0; i <= n_acc; ++i) {
        const int32_t t = s->ref.tokens[i];
        if (!CHECK(t >= 0 && t < V, "out_tokens[%lld] = %d outside [0, %lld)", (long long)i, t, (long long)V))
            continue;
        const float *value = row_values(&s->logits, i);
        if (i < n_acc) CHECK(t == s->drafts[i], "out_tokens[%lld] = %d but the accepted draft is %d",
                             (long long)i, t, s->drafts[i]);
        CHECK(value[t] > -INFINITY, "out_tokens[%lld] = %d has logit -inf", (long long)i, t);
        const void *row = logits_row(&s->logits, i);
        pyspec_status st = pyspec_distribution(v, row, V, dtype, &s->params, p, NULL);
        CHECK(st == PYSPEC_OK && p[t] > 0.0f,
              "out_tokens[%lld] = %d is outside the target's kept set (p = %g, status %d)",
              (long long)i, t, (double)p[t], st);
        if (is_greedy(&s->params))
            CHECK(t == argmax_lowest_id(value, V), "greedy: out_tokens[%lld] = %d, argmax is %lld",
                  (long long)i, t, (long long)argmax_lowest_id(value, V));
        if (s->kind == DRAFT_POINT_MASS) {
            int32_t sampled = -1;
            st = pyspec_sample(v, row, V, dtype, &s->params, s->position + i, &sampled, NULL, NULL);
            CHECK(st == PYSPEC_OK && sampled == t,
                  "point-mass: out_tokens[%lld] = %d but pyspec_sample at position %lld gives %d",
                  (long long)i, t, (long long)(s->position + i), sampled);
        }
        if (s->ref.logprobs) {
            const double want = reference_logprob(value, V, t);
            CHECK(fabs(s->ref.logprobs[i] - want) <= 1e-3 + 1e-4 * fabs(want),
                  "out_logprobs[%lld] = %g, want %g", (long long)i, (double)s->ref.logprobs[i], want);
        }
        if (s->ref.top_probs) { /* never below the true value; above it by the span's bound */
            const double want = reference_top_prob(value, V), got = s->ref.top_probs[i];
            const double over = (double)V * exp(-(double)PYSPEC_TOP_PROB_SPAN);
            CHECK(got >= want * (1.0 - 1e-5) && got <= want * (1.0 + 1e-5 + over),
                  "out_top_probs[%lld] = %.8g, want %.8g (+%.2g at most)", (long long)i, got, want, over);
        }
    }
    if (s->kind == DRAFT_POINT_MASS && n_acc < s->n_draft)
        CHECK(s->ref.tokens[n_acc] != s->drafts[n_acc],
              "point-mass: the sample equals the draft %d at row %lld, yet it was rejected",
              s->drafts[n_acc], (long long)n_acc);
    free(p);
}

static pyspec_status verify_into(pyspec_verifier *v, test_seq *seqs, int64_t n_seqs, int use_rerun,
                                 int64_t V, int32_t dtype, int32_t threads, pyspec_error *err) {
    pyspec_sequence *batch = xmalloc((size_t)n_seqs * sizeof *batch);
    for (int64_t k = 0; k < n_seqs; ++k) batch[k] = as_sequence(&seqs[k], use_rerun ? &seqs[k].rerun : &seqs[k].ref);
    pyspec_status st = pyspec_verify_batch(v, batch, n_seqs, V, dtype, threads, err);
    free(batch);
    return st;
}

/* Vocabulary sizes: mostly small and medium (cheap under ASan), some up to 5000, and the
 * SIMD-tail sizes now and then. */
static int64_t random_vocab(void) {
    const double u = rng_unit();
    if (u < 0.1) return k_tail_vocabs[rng_range(0, N_TAIL_VOCABS - 1)];
    if (u < 0.4) return rng_range(1, 70);
    if (u < 0.85) return rng_range(70, 1100);
    return rng_range(1100, 5000);
}

static void test_random_invariants(int iterations) {
    pyspec_verifier *v = make_verifier(5000, 4);
    long long accepted = 0, drafted = 0, calls = 0;
    for (int it = 0; it < iterations; ++it) {
        const int64_t V = random_vocab();
        const int32_t dtype = k_dtypes[rng_range(0, 2)];
        const int64_t n_seqs = rng_range(1, 4);
        test_seq seqs[4];
        set_context("random iteration %d: %s, n_vocab %lld, %lld sequences", it, dtype_name(dtype),
                    (long long)V, (long long)n_seqs);
        for (int64_t k = 0; k < n_seqs; ++k) make_test_seq(v, &seqs[k], V, dtype);

        pyspec_error err = { 0, { 0 } };
        pyspec_status st = verify_into(v, seqs, n_seqs, 0, V, dtype, 1, &err);
        ++calls;
        if (CHECK(st == PYSPEC_OK, "status %d: %s", st, err.message)) {
            for (int64_t k = 0; k < n_seqs; ++k) {
                set_context("random iteration %d: %s, n_vocab %lld, seq %lld of %lld (%s, n_draft %lld,"
                            " T %g k %d p %g min_p %g)", it, dtype_name(dtype), (long long)V,
                            (long long)k, (long long)n_seqs, k_draft_kind_name[seqs[k].kind],
                            (long long)seqs[k].n_draft, (double)seqs[k].params.temperature,
                            seqs[k].params.top_k, (double)seqs[k].params.top_p, (double)seqs[k].params.min_p);
                check_verified_sequence(v, &seqs[k], V, dtype);
                accepted += *seqs[k].ref.n_accepted;
                drafted += seqs[k].n_draft;
            }
            set_context("random iteration %d: %s, n_vocab %lld, %lld sequences", it, dtype_name(dtype),
                        (long long)V, (long long)n_seqs);
            for (int32_t threads = 2; threads <= 4; threads *= 2) {
                st = verify_into(v, seqs, n_seqs, 1, V, dtype, threads, NULL);
                ++calls;
                int same = st == PYSPEC_OK;
                for (int64_t k = 0; k < n_seqs; ++k) same = same && same_outputs(&seqs[k], &seqs[k].ref, &seqs[k].rerun);
                CHECK(same, "%d threads give a different result than 1 (status %d)", threads, st);
            }
            /* A fresh verifier sized to exactly this n_vocab: its scratch has no history (the
             * sparse scatter buffer must be left all zeros after every row), and ASan guards
             * the end of every scratch array. */
            pyspec_verifier *fresh = make_verifier(V, 1);
            st = verify_into(fresh, seqs, n_seqs, 1, V, dtype, 1, NULL);
            ++calls;
            int same = st == PYSPEC_OK;
            for (int64_t k = 0; k < n_seqs; ++k) same = same && same_outputs(&seqs[k], &seqs[k].ref, &seqs[k].rerun);
            CHECK(same, "a fresh verifier (max_vocab = n_vocab) gives a different result (status %d)", st);
            pyspec_verifier_free(fresh);
            /* One thread: batching, not threading, is what this compares (and on a 2-core
             * machine every extra OpenMP team costs spin-waiting time). */
            for (int64_t k = 0; k < n_seqs && n_seqs > 1; ++k) {
                st = verify_into(v, &seqs[k], 1, 1, V, dtype, 1, NULL);
                ++calls;
                CHECK(st == PYSPEC_OK && same_outputs(&seqs[k], &seqs[k].ref, &seqs[k].rerun),
                      "seq %lld verified alone differs from inside the batch", (long long)k);
            }
        }
        for (int64_t k = 0; k < n_seqs; ++k) free_test_seq(&seqs[k]);
    }
    printf("  random invariants: %d iterations, %lld verify calls, %lld of %lld drafts accepted\n",
           iterations, calls, accepted, drafted);
    pyspec_verifier_free(v);
}
void run_random_invariants(void) {
    const char *env = getenv("PYSPEC_TEST_ITERATIONS"); /* longer soak runs by hand */
    test_random_invariants(env ? atoi(env) : 600);
}
