/*
 * test_errors.c - argument checks of the public entry points: every bad argument gets its
 * status and a message naming it, with and without an error struct.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* ==== 2. argument errors ================================================================== */

typedef struct create_call {
    int64_t max_vocab;
    int32_t max_threads;
    int     null_out;
} create_call;

static pyspec_status call_create(const void *c_, pyspec_error *err) {
    const create_call *c = c_;
    pyspec_verifier *v = NULL;
    pyspec_status st = pyspec_verifier_create(c->max_vocab, c->max_threads,
                                              c->null_out ? NULL : &v, err);
    pyspec_verifier_free(v); /* in case it succeeded */
    return st;
}
/* The invalid sampling parameters, one per case; returns 0 past the last case. */
static int bad_params_case(int which, pyspec_sampling_params *p, const char **arg) {
    *p = plain_params(0.8f);
    switch (which) {
    case 0: p->top_p = 0.0f; *arg = "top_p"; return 1;
    case 1: p->top_p = -0.5f; *arg = "top_p"; return 1;
    case 2: p->top_p = 1.5f; *arg = "top_p"; return 1;
    case 3: p->top_p = NAN; *arg = "top_p"; return 1;
    case 4: p->temperature = NAN; *arg = "temperature"; return 1;
    case 5: p->temperature = INFINITY; *arg = "temperature"; return 1;
    case 6: p->temperature = -INFINITY; *arg = "temperature"; return 1;
    case 7: p->min_p = 1.5f; *arg = "min_p"; return 1;
    case 8: p->min_p = NAN; *arg = "min_p"; return 1;
    default: return 0;
    }
}

/* Parameters at the edge of their range, all valid. */
static int edge_params_case(int which, pyspec_sampling_params *p) {
    *p = plain_params(0.8f);
    switch (which) {
    case 0: p->top_p = 1.0f; return 1;
    case 1: p->min_p = 1.0f; return 1;
    case 2: p->min_p = -INFINITY; return 1;
    case 3: p->temperature = -1.0f; return 1;
    case 4: p->temperature = -0.0f; return 1;
    case 5: p->top_k = -5; return 1;
    case 6: p->top_k = INT32_MAX; return 1;
    case 7: p->top_p = FLT_MIN; return 1;
    default: return 0;
    }
}

void test_info_functions(void) {
    set_context("status strings, version, SIMD name");
    for (int32_t s = -3; s <= 12; ++s) {
        const char *str = pyspec_status_string(s);
        CHECK(str != NULL && str[0] != '\0', "pyspec_status_string(%d) is NULL or empty", s);
    }
    CHECK(pyspec_status_string(INT32_MAX) != NULL, "pyspec_status_string(INT32_MAX) is NULL");
    CHECK(pyspec_version() != NULL && pyspec_version()[0] != '\0', "pyspec_version is empty");
    const char *simd = pyspec_simd_name();
    CHECK(simd && (!strcmp(simd, "avx512") || !strcmp(simd, "avx2") || !strcmp(simd, "scalar")),
          "pyspec_simd_name gave \"%s\"", simd ? simd : "(null)");
    int32_t cuda = pyspec_has_cuda();
    CHECK(cuda == 0 || cuda == 1, "pyspec_has_cuda gave %d", cuda);
}

void test_create_errors(void) {
    set_context("pyspec_verifier_create arguments");
    const struct {
        create_call call;
        pyspec_status want;
        const char *arg, *what;
    } cases[] = {
        { { 16, 1, 1 }, PYSPEC_ERR_NULL, "out", "out == NULL" },
        { { 0, 1, 0 }, PYSPEC_ERR_SHAPE, "max_vocab", "max_vocab 0" },
        { { -1, 1, 0 }, PYSPEC_ERR_SHAPE, "max_vocab", "max_vocab -1" },
        { { (int64_t)INT32_MAX + 1, 1, 0 }, PYSPEC_ERR_SHAPE, "max_vocab", "max_vocab 2^31" },
        { { 16, 0, 0 }, PYSPEC_ERR_SHAPE, "max_threads", "max_threads 0" },
        { { 16, -1, 0 }, PYSPEC_ERR_SHAPE, "max_threads", "max_threads -1" },
        { { 16, 1025, 0 }, PYSPEC_ERR_SHAPE, "max_threads", "max_threads 1025" },
        { { 1, 1, 0 }, PYSPEC_OK, NULL, "max_vocab 1, max_threads 1" },
        { { 16, 4, 0 }, PYSPEC_OK, NULL, "max_vocab 16, max_threads 4" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        expect_status(call_create, &cases[i].call, cases[i].want, cases[i].arg, cases[i].what);
    pyspec_verifier_free(NULL); /* documented as allowed */
    CHECK(1, "pyspec_verifier_free(NULL) did not crash");
}

void test_sample_and_distribution_errors(void) {
    enum { V = 40 };
    pyspec_verifier *v = make_verifier(V, 2);
    logits_rows l;
    logits_alloc(&l, PYSPEC_F32, 1, V, V);
    fill_random_row(&l, 0, 5.0f);
    pyspec_sampling_params good = plain_params(0.8f);
    int32_t *token = xmalloc(sizeof *token);
    float *prob = xmalloc(sizeof *prob);
    float *probs = xmalloc(V * sizeof *probs);

    set_context("pyspec_sample arguments");
    const sample_call base = { v, l.data, V, PYSPEC_F32, &good, 3, token, prob };
    sample_call c;
    expect_status(call_sample, &base, PYSPEC_OK, NULL, "valid call");
    c = base; c.out_prob = NULL;   expect_status(call_sample, &c, PYSPEC_OK, NULL, "out_prob NULL is allowed");
    c = base; c.v = NULL;          expect_status(call_sample, &c, PYSPEC_ERR_NULL, "verifier", "verifier NULL");
    c = base; c.logits = NULL;     expect_status(call_sample, &c, PYSPEC_ERR_NULL, "logits", "logits NULL");
    c = base; c.params = NULL;     expect_status(call_sample, &c, PYSPEC_ERR_NULL, "params", "params NULL");
    c = base; c.out_token = NULL;  expect_status(call_sample, &c, PYSPEC_ERR_NULL, "out_token", "out_token NULL");
    c = base; c.n_vocab = 0;       expect_status(call_sample, &c, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab 0");
    c = base; c.n_vocab = -1;      expect_status(call_sample, &c, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab -1");
    c = base; c.n_vocab = V + 1;   expect_status(call_sample, &c, PYSPEC_ERR_CAPACITY, "n_vocab", "n_vocab > max_vocab");
    c = base; c.dtype = 7;         expect_status(call_sample, &c, PYSPEC_ERR_DTYPE, "dtype", "dtype 7");
    c = base; c.dtype = -1;        expect_status(call_sample, &c, PYSPEC_ERR_DTYPE, "dtype", "dtype -1");
    c = base; c.position = -1;     expect_status(call_sample, &c, PYSPEC_ERR_SHAPE, "position", "position -1");
    c = base; c.position = INT64_MAX; expect_status(call_sample, &c, PYSPEC_OK, NULL, "position INT64_MAX");
    pyspec_sampling_params p = { 0 };
    const char *arg;
    char what[96];
    for (int i = 0; bad_params_case(i, &p, &arg); ++i) {
        snprintf(what, sizeof what, "bad params case %d (%s)", i, arg);
        c = base; c.params = &p;
        expect_status(call_sample, &c, PYSPEC_ERR_PARAM, arg, what);
    }
    for (int i = 0; edge_params_case(i, &p); ++i) {
        snprintf(what, sizeof what, "edge params case %d", i);
        c = base; c.params = &p;
        expect_status(call_sample, &c, PYSPEC_OK, NULL, what);
    }

    set_context("pyspec_distribution arguments");
    const distribution_call dbase = { v, l.data, V, PYSPEC_F32, &good, probs };
    distribution_call d;
    expect_status(call_distribution, &dbase, PYSPEC_OK, NULL, "valid call");
    d = dbase; d.v = NULL;         expect_status(call_distribution, &d, PYSPEC_ERR_NULL, "verifier", "verifier NULL");
    d = dbase; d.logits = NULL;    expect_status(call_distribution, &d, PYSPEC_ERR_NULL, "logits", "logits NULL");
    d = dbase; d.params = NULL;    expect_status(call_distribution, &d, PYSPEC_ERR_NULL, "params", "params NULL");
    d = dbase; d.out_probs = NULL; expect_status(call_distribution, &d, PYSPEC_ERR_NULL, "out_probs", "out_probs NULL");
    d = dbase; d.n_vocab = 0;      expect_status(call_distribution, &d, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab 0");
    d = dbase; d.n_vocab = V + 1;  expect_status(call_distribution, &d, PYSPEC_ERR_CAPACITY, "n_vocab", "n_vocab > max_vocab");
    d = dbase; d.dtype = 7;        expect_status(call_distribution, &d, PYSPEC_ERR_DTYPE, "dtype", "dtype 7");
    for (int i = 0; bad_params_case(i, &p, &arg); ++i) {
        snprintf(what, sizeof what, "bad params case %d (%s)", i, arg);
        d = dbase; d.params = &p;
        expect_status(call_distribution, &d, PYSPEC_ERR_PARAM, arg, what);
    }
    for (int i = 0; edge_params_case(i, &p); ++i) {
        snprintf(what, sizeof what, "edge params case %d", i);
        d = dbase; d.params = &p;
        expect_status(call_distribution, &d, PYSPEC_OK, NULL, what);
    }

    set_context("pyspec_distribution_sparse arguments");
    int32_t *sp_tokens = xmalloc(V * sizeof *sp_tokens);
    int64_t *sp_n = xmalloc(sizeof *sp_n);
    const sparse_call sbase = { v, l.data, V, PYSPEC_F32, &good, sp_tokens, probs, V, sp_n };
    sparse_call sc;
    expect_status(call_sparse, &sbase, PYSPEC_OK, NULL, "valid call");
    sc = sbase; sc.v = NULL;          expect_status(call_sparse, &sc, PYSPEC_ERR_NULL, "verifier", "verifier NULL");
    sc = sbase; sc.logits = NULL;     expect_status(call_sparse, &sc, PYSPEC_ERR_NULL, "logits", "logits NULL");
    sc = sbase; sc.params = NULL;     expect_status(call_sparse, &sc, PYSPEC_ERR_NULL, "params", "params NULL");
    sc = sbase; sc.out_tokens = NULL; expect_status(call_sparse, &sc, PYSPEC_ERR_NULL, "out_tokens", "out_tokens NULL");
    sc = sbase; sc.out_probs = NULL;  expect_status(call_sparse, &sc, PYSPEC_ERR_NULL, "out_probs", "out_probs NULL");
    sc = sbase; sc.out_n = NULL;      expect_status(call_sparse, &sc, PYSPEC_ERR_NULL, "out_n", "out_n NULL");
    sc = sbase; sc.n_vocab = 0;       expect_status(call_sparse, &sc, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab 0");
    sc = sbase; sc.n_vocab = V + 1;   expect_status(call_sparse, &sc, PYSPEC_ERR_CAPACITY, "n_vocab", "n_vocab > max_vocab");
    sc = sbase; sc.dtype = 7;         expect_status(call_sparse, &sc, PYSPEC_ERR_DTYPE, "dtype", "dtype 7");
    sc = sbase; sc.capacity = 0;      expect_status(call_sparse, &sc, PYSPEC_ERR_CAPACITY, "capacity", "capacity 0");
    sc = sbase; sc.capacity = -1;     expect_status_either(call_sparse, &sc, PYSPEC_ERR_CAPACITY, PYSPEC_ERR_SHAPE, "capacity", "capacity -1");
    for (int i = 0; bad_params_case(i, &p, &arg); ++i) {
        snprintf(what, sizeof what, "bad params case %d (%s)", i, arg);
        sc = sbase; sc.params = &p;
        expect_status(call_sparse, &sc, PYSPEC_ERR_PARAM, arg, what);
    }
    for (int i = 0; edge_params_case(i, &p); ++i) {
        snprintf(what, sizeof what, "edge params case %d", i);
        sc = sbase; sc.params = &p;
        expect_status(call_sparse, &sc, PYSPEC_OK, NULL, what);
    }
    free(sp_tokens);
    free(sp_n);

    free(token);
    free(prob);
    free(probs);
    logits_free(&l);
    pyspec_verifier_free(v);
}

/* A small valid two-sequence batch that the argument tests break one field at a time. */
typedef struct error_batch {
    logits_rows        logits;
    int32_t           *drafts;     /* [N_DRAFT] */
    float             *dense_q;    /* [N_DRAFT][V] */
    float             *sparse_q;   /* [N_DRAFT][SPARSE_STRIDE] */
    int32_t           *sparse_tok; /* [N_DRAFT][SPARSE_STRIDE] */
    pyspec_draft_probs dense, sparse;
    int32_t           *out_tokens[2];
    int64_t           *out_n[2];
    pyspec_sequence    seqs[2];
} error_batch;

enum { EB_V = 40, EB_N_DRAFT = 2, EB_SPARSE_STRIDE = 3 };

static void error_batch_init(error_batch *b) {
    logits_alloc(&b->logits, PYSPEC_F32, EB_N_DRAFT + 1, EB_V, EB_V + 2);
    for (int64_t r = 0; r < EB_N_DRAFT + 1; ++r) fill_random_row(&b->logits, r, 4.0f);
    b->drafts = xmalloc(EB_N_DRAFT * sizeof(int32_t));
    b->dense_q = xmalloc(EB_N_DRAFT * EB_V * sizeof(float));
    b->sparse_q = xmalloc(EB_N_DRAFT * EB_SPARSE_STRIDE * sizeof(float));
    b->sparse_tok = xmalloc(EB_N_DRAFT * EB_SPARSE_STRIDE * sizeof(int32_t));
    for (int i = 0; i < EB_N_DRAFT; ++i) {
        b->drafts[i] = 3 + i;
        for (int t = 0; t < EB_V; ++t) b->dense_q[i * EB_V + t] = 1.0f / EB_V;
        for (int j = 0; j < EB_SPARSE_STRIDE; ++j) {
            b->sparse_tok[i * EB_SPARSE_STRIDE + j] = b->drafts[i] + j;
            b->sparse_q[i * EB_SPARSE_STRIDE + j] = 1.0f / EB_SPARSE_STRIDE;
        }
    }
    b->dense = (pyspec_draft_probs){ b->dense_q, NULL, EB_V, 0 };
    b->sparse = (pyspec_draft_probs){ b->sparse_q, b->sparse_tok, EB_SPARSE_STRIDE, EB_SPARSE_STRIDE };
    for (int s = 0; s < 2; ++s) {
        b->out_tokens[s] = xmalloc((EB_N_DRAFT + 1) * sizeof(int32_t));
        b->out_n[s] = xmalloc(sizeof(int64_t));
        b->seqs[s] = (pyspec_sequence){ b->logits.data, b->logits.stride, b->drafts, EB_N_DRAFT,
                                        s == 0 ? NULL : &b->dense, plain_params(0.7f), 10 * s,
                                        b->out_tokens[s], NULL, b->out_n[s] };
    }
}

static void error_batch_free(error_batch *b) {
    logits_free(&b->logits);
    free(b->drafts);
    free(b->dense_q);
    free(b->sparse_q);
    free(b->sparse_tok);
    for (int s = 0; s < 2; ++s) {
        free(b->out_tokens[s]);
        free(b->out_n[s]);
    }
}

/* Runs the batch with sequence `which` replaced by `broken`; the error must name the field
 * and (through "seqs[i]") the sequence. */
static void expect_sequence_error(pyspec_verifier *v, const error_batch *b, int which,
                                  pyspec_sequence broken, pyspec_status want,
                                  const char *arg, const char *what) {
    pyspec_sequence seqs[2] = { b->seqs[0], b->seqs[1] };
    seqs[which] = broken;
    const batch_call c = { v, seqs, 2, EB_V, PYSPEC_F32, 1 };
    char where[16], full_what[160];
    snprintf(where, sizeof where, "seqs[%d]", which);
    snprintf(full_what, sizeof full_what, "%s in seqs[%d]", what, which);
    expect_status(call_batch, &c, want, arg, full_what);
    if (want != PYSPEC_OK) expect_status(call_batch, &c, want, where, full_what);
}

void test_verify_batch_errors(void) {
    set_context("pyspec_verify_batch arguments");
    pyspec_verifier *v = make_verifier(EB_V, 2);
    error_batch b;
    error_batch_init(&b);
    const batch_call base = { v, b.seqs, 2, EB_V, PYSPEC_F32, 1 };
    batch_call c;
    expect_status(call_batch, &base, PYSPEC_OK, NULL, "valid batch");
    c = base; c.v = NULL;       expect_status(call_batch, &c, PYSPEC_ERR_NULL, "verifier", "verifier NULL");
    c = base; c.seqs = NULL;    expect_status(call_batch, &c, PYSPEC_ERR_NULL, "seqs", "seqs NULL");
    c = base; c.seqs = NULL; c.n_seqs = 0; expect_status(call_batch, &c, PYSPEC_OK, NULL, "no sequences");
    c = base; c.n_seqs = -1;    expect_status(call_batch, &c, PYSPEC_ERR_SHAPE, "n_seqs", "n_seqs -1");
    c = base; c.n_vocab = 0;    expect_status(call_batch, &c, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab 0");
    c = base; c.n_vocab = -7;   expect_status(call_batch, &c, PYSPEC_ERR_SHAPE, "n_vocab", "n_vocab -7");
    c = base; c.n_vocab = EB_V + 1; expect_status(call_batch, &c, PYSPEC_ERR_CAPACITY, "n_vocab", "n_vocab > max_vocab");
    /* 0 threads is not "more than the verifier was created for"; SHAPE would fit the header's
     * wording better, CAPACITY is what the range check gives: accept either. */
    c = base; c.n_threads = 0;  expect_status_either(call_batch, &c, PYSPEC_ERR_CAPACITY, PYSPEC_ERR_SHAPE, "n_threads", "n_threads 0");
    c = base; c.n_threads = -1; expect_status_either(call_batch, &c, PYSPEC_ERR_CAPACITY, PYSPEC_ERR_SHAPE, "n_threads", "n_threads -1");
    c = base; c.n_threads = 3;  expect_status(call_batch, &c, PYSPEC_ERR_CAPACITY, "n_threads", "n_threads > max_threads");
    c = base; c.n_threads = 2;  expect_status(call_batch, &c, PYSPEC_OK, NULL, "n_threads == max_threads");
    c = base; c.dtype = 7;      expect_status(call_batch, &c, PYSPEC_ERR_DTYPE, "dtype", "dtype 7");
    c = base; c.dtype = 3;      expect_status(call_batch, &c, PYSPEC_ERR_DTYPE, "dtype", "dtype 3");

    for (int which = 0; which < 2; ++which) {
        const pyspec_sequence good = b.seqs[which];
        pyspec_sequence s;
        s = good; s.target_logits = NULL;  expect_sequence_error(v, &b, which, s, PYSPEC_ERR_NULL, "target_logits", "target_logits NULL");
        s = good; s.out_tokens = NULL;     expect_sequence_error(v, &b, which, s, PYSPEC_ERR_NULL, "out_tokens", "out_tokens NULL");
        s = good; s.out_n_accepted = NULL; expect_sequence_error(v, &b, which, s, PYSPEC_ERR_NULL, "out_n_accepted", "out_n_accepted NULL");
        s = good; s.draft_tokens = NULL;   expect_sequence_error(v, &b, which, s, PYSPEC_ERR_NULL, "draft_tokens", "draft_tokens NULL with n_draft 2");
        s = good; s.n_draft = -1;          expect_sequence_error(v, &b, which, s, PYSPEC_ERR_SHAPE, "n_draft", "n_draft -1");
        s = good; s.n_draft = 0; s.draft_tokens = NULL; expect_sequence_error(v, &b, which, s, PYSPEC_OK, NULL, "n_draft 0, draft_tokens NULL");
        s = good; s.logits_row_stride = EB_V - 1; expect_sequence_error(v, &b, which, s, PYSPEC_ERR_SHAPE, "logits_row_stride", "logits_row_stride < n_vocab");
        s = good; s.logits_row_stride = 0; expect_sequence_error(v, &b, which, s, PYSPEC_ERR_SHAPE, "logits_row_stride", "logits_row_stride 0");
        s = good; s.position = -1;         expect_sequence_error(v, &b, which, s, PYSPEC_ERR_SHAPE, "position", "position -1");
        s = good; s.position = INT64_MAX;  expect_sequence_error(v, &b, which, s, PYSPEC_ERR_SHAPE, "position", "position + n_draft overflows");
        pyspec_sampling_params p = { 0 };
        const char *arg;
        char what[96];
        for (int i = 0; bad_params_case(i, &p, &arg); ++i) {
            snprintf(what, sizeof what, "bad params case %d (%s)", i, arg);
            s = good; s.params = p;
            expect_sequence_error(v, &b, which, s, PYSPEC_ERR_PARAM, arg, what);
        }
    }

    /* Token ids: checked up front, whatever row they sit in. */
    int32_t *bad_drafts = xmalloc(EB_N_DRAFT * sizeof(int32_t));
    const int32_t bad_ids[] = { -1, EB_V, INT32_MIN, INT32_MAX };
    for (size_t k = 0; k < sizeof bad_ids / sizeof bad_ids[0]; ++k) {
        char what[64];
        snprintf(what, sizeof what, "draft token %d in the last draft row", bad_ids[k]);
        memcpy(bad_drafts, b.drafts, EB_N_DRAFT * sizeof(int32_t));
        bad_drafts[EB_N_DRAFT - 1] = bad_ids[k];
        pyspec_sequence s = b.seqs[0];
        s.draft_tokens = bad_drafts;
        expect_sequence_error(v, &b, 0, s, PYSPEC_ERR_TOKEN, "draft_tokens", what);
        s.draft_probs = &b.dense;
        expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_TOKEN, "draft_tokens", what);
    }
    free(bad_drafts);

    /* Draft probability layouts. */
    pyspec_sequence s = b.seqs[1];
    pyspec_draft_probs dp;
    s.draft_probs = &dp;
    dp = b.dense; dp.row_stride = EB_V - 1;
    expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_SHAPE, "row_stride", "dense draft_probs row_stride < n_vocab");
    dp = b.dense; dp.probs = NULL;
    expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_NULL, "probs", "dense draft_probs->probs NULL");
    dp = b.sparse;
    expect_sequence_error(v, &b, 1, s, PYSPEC_OK, NULL, "valid sparse draft_probs");
    dp = b.sparse; dp.probs = NULL;
    expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_NULL, "probs", "sparse draft_probs->probs NULL");
    dp = b.sparse; dp.n_per_row = -1;
    expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_SHAPE, "n_per_row", "sparse n_per_row -1");
    dp = b.sparse; dp.n_per_row = EB_SPARSE_STRIDE + 1;
    expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_SHAPE, "n_per_row", "sparse n_per_row > row_stride");
    const int32_t saved = b.sparse_tok[EB_SPARSE_STRIDE + 2]; /* row 1, last entry */
    for (size_t k = 0; k < 2; ++k) {
        b.sparse_tok[EB_SPARSE_STRIDE + 2] = k == 0 ? -1 : EB_V;
        dp = b.sparse;
        expect_sequence_error(v, &b, 1, s, PYSPEC_ERR_TOKEN, "draft_probs",
                              k == 0 ? "sparse token -1" : "sparse token == n_vocab");
    }
    b.sparse_tok[EB_SPARSE_STRIDE + 2] = saved;

    error_batch_free(&b);
    pyspec_verifier_free(v);
}
