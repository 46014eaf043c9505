/*
 * graph_sampler.c - pyspec's verify rows as ggml ops inside llama.cpp's own graph.
 *
 * The host path copies every verify row (n_vocab floats) out of llama.cpp and samples it
 * in libpyspec. Here the same chain (top-k, top-p, min-p, temperature, the draw; or
 * greedy) is built from ggml ops through llama.cpp's backend-sampler interface
 * (llama_sampler_i.backend_*), so it runs wherever the model runs (CPU threads, CUDA, ...)
 * and only one token per row crosses to the host: llama.cpp skips its logits copy for a
 * sequence whose outputs are all backend-sampled.
 *
 * Point-mass drafts need nothing else: row i of a verify batch emits its plain sample, and
 * the first row whose sample differs from its draft ends the round (what the host verifier
 * does, verify.c). The uniform of row i is Philox(seed, position + i, PYSPEC_PURPOSE_SAMPLE),
 * the host's: a row that is never accepted advances no state, and a result does not depend
 * on how many rows were drafted.
 *
 * What differs from the host: weights are float exp() and a float cumulative sum in
 * token-id order, where the host uses a portable exp and 64-bit fixed-point sums. The
 * candidate set and the walk order are the same, so a draw gives the host's token unless u
 * falls within float rounding of a boundary between two tokens' cumulative weights
 * (README: "In-graph sampling").
 *
 * Built as its own library (libpyspec_llama) against the headers of the llama-cpp-python
 * whose libllama it links (pyspec/llama_graph_build.py), so libpyspec itself never depends
 * on llama.cpp.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "llama.h"

#include "philox.h"
#include "pyspec.h"

#ifndef PYSPEC_LLAMA_VERSION
#  define PYSPEC_LLAMA_VERSION "unknown"
#endif

/* The largest float below 1: a uniform that rounds up to 1.0f would put the draw target at
 * the total, past every token. */
#define LARGEST_BELOW_ONE 0.99999994f

typedef struct graph_state {
    pyspec_sampling_params params;
    int greedy;
    float log_min_p;
    int64_t position;          /* absolute position of the next decode's first output row */
    struct ggml_tensor **uniforms; /* one input per row of the graph being built */
    int32_t n_uniforms;
    int32_t capacity;
    int32_t overflow;          /* backend_apply ran for more rows than capacity */
    int32_t supported;         /* backend_init: the device runs every op */
    int32_t initialised;
    int32_t host_apply_called; /* llama.cpp asked for a host-side sample: never expected */
} graph_state;

struct pyspec_graph_sampler {
    struct llama_context *ctx;
    int32_t seq_id;
    struct llama_sampler *chain; /* owns the pyspec sampler */
    graph_state *state;          /* owned by that sampler */
};

static pyspec_status fail(pyspec_error *err, pyspec_status status, const char *fmt, ...) {
    if (err) {
        err->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* ---- the ops of one row ------------------------------------------------------------- */

static struct ggml_tensor *as_rows(struct ggml_context *ctx, struct ggml_tensor *t) {
    return ggml_reshape_2d(ctx, t, 1, ggml_nelements(t)); /* one element per row: get_rows picks elements */
}

static struct ggml_tensor *pick(struct ggml_context *ctx, struct ggml_tensor *t, struct ggml_tensor *idx) {
    struct ggml_tensor *rows = ggml_get_rows(ctx, as_rows(ctx, t), idx);
    return ggml_reshape_1d(ctx, rows, ggml_nelements(rows));
}

static struct ggml_tensor *one_minus(struct ggml_context *ctx, struct ggml_tensor *t) {
    return ggml_scale_bias(ctx, t, -1.0f, 1.0f);
}

/* The inclusive running sum of w (1-D). ggml's cumsum adds sequentially in float: over a
 * whole vocabulary its rounding error grows to ~n_vocab * 2^-24 of the total, enough to move
 * a draw several tokens on a flat row. So rows longer than one block are summed in two
 * levels: running sums within blocks of RUNNING_SUM_BLOCK, and a running sum of the block
 * totals added to each block; the error is then ~(block + n / block) * 2^-24 of the total.
 * The result has ceil(n / block) * block entries: the padding repeats the total. */
#define RUNNING_SUM_BLOCK 512
static struct ggml_tensor *running_sum(struct ggml_context *ctx, struct ggml_tensor *w) {
    const int64_t n = ggml_nelements(w);
    if (n <= RUNNING_SUM_BLOCK) return ggml_cumsum(ctx, w);
    const int64_t n_blocks = (n + RUNNING_SUM_BLOCK - 1) / RUNNING_SUM_BLOCK;
    const int64_t padded = n_blocks * RUNNING_SUM_BLOCK;
    struct ggml_tensor *blocks = ggml_reshape_2d(
        ctx, padded > n ? ggml_pad(ctx, w, (int)(padded - n), 0, 0, 0) : w, RUNNING_SUM_BLOCK, n_blocks);
    struct ggml_tensor *within = ggml_cumsum(ctx, blocks);                 /* [block, n_blocks] */
    struct ggml_tensor *totals = ggml_reshape_1d(ctx, ggml_sum_rows(ctx, blocks), n_blocks);
    struct ggml_tensor *through = ggml_cumsum(ctx, totals);
    struct ggml_tensor *before = ggml_reshape_2d(ctx, ggml_sub(ctx, through, totals), 1, n_blocks);
    return ggml_reshape_1d(ctx, ggml_add(ctx, within, before), padded);
}

/* 1 where the top-p nucleus keeps the candidate, in the candidates' own order. x: logit -
 * max per candidate. The nucleus is the shortest prefix in rank order whose untempered
 * weight reaches top_p of the candidates' total: a candidate is kept while the weight
 * ranked before it is still below that. */
static struct ggml_tensor *top_p_keep(struct ggml_context *ctx, struct ggml_tensor *x, float top_p) {
    const int64_t n = ggml_nelements(x);
    struct ggml_tensor *rank = ggml_argsort(ctx, x, GGML_SORT_ORDER_DESC);
    struct ggml_tensor *w_ranked = pick(ctx, ggml_exp(ctx, x), rank);
    struct ggml_tensor *cum = ggml_view_1d(ctx, running_sum(ctx, w_ranked), n, 0);
    struct ggml_tensor *before = ggml_sub(ctx, cum, w_ranked);
    struct ggml_tensor *total = ggml_view_1d(ctx, cum, 1, (size_t)(n - 1) * sizeof(float));
    struct ggml_tensor *goal = ggml_scale(ctx, total, top_p);
    /* step(goal - before): 1 exactly when before < goal */
    struct ggml_tensor *keep_ranked = ggml_step(ctx, ggml_scale(ctx, ggml_sub(ctx, before, goal), -1.0f));
    /* back to the candidates' order: the inverse permutation of rank */
    struct ggml_tensor *unrank = ggml_argsort(ctx, ggml_cast(ctx, rank, GGML_TYPE_F32), GGML_SORT_ORDER_ASC);
    return pick(ctx, keep_ranked, unrank);
}

/* The index of the draw in `weights` (token-id order, zeros for cut candidates): the first
 * whose running sum exceeds u * total, never past the last kept one. */
static struct ggml_tensor *inverse_cdf(struct ggml_context *ctx, struct ggml_tensor *weights,
                                       struct ggml_tensor *uniform) {
    struct ggml_tensor *cum = running_sum(ctx, weights); /* padding repeats the total */
    const int64_t n = ggml_nelements(cum);
    struct ggml_tensor *total = ggml_view_1d(ctx, cum, 1, (size_t)(n - 1) * sizeof(float));
    struct ggml_tensor *target = ggml_mul(ctx, total, uniform);
    struct ggml_tensor *above = ggml_sum(ctx, ggml_step(ctx, ggml_sub(ctx, cum, target)));
    struct ggml_tensor *first = ggml_scale_bias(ctx, above, -1.0f, (float)n);
    /* argmax of a running sum: the first index of its final value, the last kept candidate.
     * A float target that rounds up to the total would otherwise run past it. */
    struct ggml_tensor *last = ggml_cast(ctx, ggml_argmax(ctx, ggml_reshape_2d(ctx, cum, n, 1)), GGML_TYPE_F32);
    struct ggml_tensor *lowest = ggml_sub(ctx, last, ggml_relu(ctx, ggml_sub(ctx, last, first)));
    return ggml_cast(ctx, lowest, GGML_TYPE_I32);
}

/* Builds one row's sample from `logits` (n_vocab floats in token-id order). */
static struct ggml_tensor *sample_row(struct ggml_context *ctx, const graph_state *st,
                                      struct ggml_tensor *logits, struct ggml_tensor *uniform) {
    const int64_t n = ggml_nelements(logits);
    struct ggml_tensor *row = ggml_reshape_2d(ctx, logits, n, 1);
    /* Greedy: ggml's argmax. On an exact tie at the top it keeps the highest id on the CPU
     * back end where the host keeps the lowest: breaking ties the host's way would cost
     * several more passes over the row, for the nearest of near-ties (README). */
    if (st->greedy) return ggml_argmax(ctx, row);

    const pyspec_sampling_params *p = &st->params;
    struct ggml_tensor *ids = NULL; /* candidate token ids, ascending; NULL: all, ids = index */
    struct ggml_tensor *vals = logits;
    if (p->top_k > 0 && p->top_k < n) {
        struct ggml_tensor *top = ggml_top_k(ctx, row, p->top_k); /* in no set order */
        struct ggml_tensor *ascending = ggml_argsort(ctx, ggml_cast(ctx, top, GGML_TYPE_F32), GGML_SORT_ORDER_ASC);
        ids = pick(ctx, top, ascending);
        vals = pick(ctx, logits, ids);
    }
    const int64_t k = ggml_nelements(vals);
    struct ggml_tensor *vmax = pick(ctx, vals, ggml_argmax(ctx, ggml_reshape_2d(ctx, vals, k, 1)));
    struct ggml_tensor *x = ggml_sub(ctx, vals, vmax); /* <= 0; 0 at the max */

    struct ggml_tensor *keep = NULL;
    if (p->top_p < 1.0f) keep = top_p_keep(ctx, x, p->top_p);
    if (p->min_p > 0.0f) {
        /* cut where x < log(min_p): step(log_min_p - x) */
        struct ggml_tensor *keep_min_p = one_minus(ctx, ggml_step(ctx, ggml_scale_bias(ctx, x, -1.0f, st->log_min_p)));
        keep = keep ? ggml_mul(ctx, keep, keep_min_p) : keep_min_p;
    }
    struct ggml_tensor *weights = ggml_exp(ctx, ggml_scale(ctx, x, 1.0f / p->temperature));
    if (keep) weights = ggml_mul(ctx, weights, keep);
    struct ggml_tensor *index = inverse_cdf(ctx, weights, uniform);
    return ids ? pick(ctx, ids, index) : index;
}

/* ---- llama_sampler_i ------------------------------------------------------------------ */

static const char *graph_name(const struct llama_sampler *smpl) {
    (void)smpl;
    return "pyspec-verify";
}

static void graph_apply(struct llama_sampler *smpl, llama_token_data_array *cur_p) {
    /* Only the backend path is meant to run; a host call is reported by the next read. */
    graph_state *st = (graph_state *)smpl->ctx;
    st->host_apply_called = 1;
    (void)cur_p;
}

static void graph_free(struct llama_sampler *smpl) {
    graph_state *st = (graph_state *)smpl->ctx;
    if (!st) return;
    free(st->uniforms);
    free(st);
}

static void graph_backend_reset(struct llama_sampler *smpl) {
    graph_state *st = (graph_state *)smpl->ctx;
    st->n_uniforms = 0;
    st->overflow = 0;
}

static void graph_backend_apply(struct llama_sampler *smpl, struct ggml_context *ctx,
                                struct ggml_cgraph *gf, struct llama_sampler_data *data) {
    (void)gf;
    graph_state *st = (graph_state *)smpl->ctx;
    struct ggml_tensor *uniform = NULL; /* greedy rows draw nothing (an unused input is never allocated) */
    if (!st->greedy) {
        uniform = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1);
        ggml_format_name(uniform, "pyspec_uniform_%d", st->n_uniforms);
        ggml_set_input(uniform);
        if (st->n_uniforms < st->capacity) {
            st->uniforms[st->n_uniforms++] = uniform;
        } else {
            st->overflow = 1; /* this row's uniform is never set: read() refuses its token */
        }
    }
    struct ggml_tensor *logits = ggml_reshape_1d(ctx, data->logits, ggml_nelements(data->logits));
    data->sampled = sample_row(ctx, st, logits, uniform);
    /* 0 when every logit is finite, NaN otherwise (x - x is NaN for NaN and +-inf): the
     * host path's check, for one float per row instead of the row. */
    data->probs = ggml_sum(ctx, ggml_sub(ctx, logits, logits));
}

static void graph_backend_set_input(struct llama_sampler *smpl) {
    graph_state *st = (graph_state *)smpl->ctx;
    for (int32_t i = 0; i < st->n_uniforms; ++i) {
        const double u = pyspec_uniform_keyed(st->params.seed, st->position + i, PYSPEC_PURPOSE_SAMPLE);
        float uf = (float)u;
        if (!(uf < 1.0f)) uf = LARGEST_BELOW_ONE;
        ggml_backend_tensor_set(st->uniforms[i], &uf, 0, sizeof uf);
    }
}

/* Whether `device` runs every op of one row: the graph is built once on a scratch context
 * at a vocabulary of 128K (llama.cpp's own probe size) and each node is asked about. */
static int device_supports_row(graph_state *st, ggml_backend_buffer_type_t buft) {
    ggml_backend_dev_t device = ggml_backend_buft_get_device(buft);
    if (!device) return 1;
    const size_t max_nodes = 256;
    struct ggml_init_params ip = {
        ggml_tensor_overhead() * max_nodes + ggml_graph_overhead_custom(max_nodes, false), NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx) return 0;
    struct ggml_cgraph *gf = ggml_new_graph_custom(ctx, max_nodes, false);
    struct ggml_tensor *logits = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 128 * 1024);
    struct ggml_tensor *uniform = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1);
    ggml_build_forward_expand(gf, sample_row(ctx, st, logits, uniform));
    ggml_build_forward_expand(gf, ggml_sum(ctx, ggml_sub(ctx, logits, logits)));
    int ok = 1;
    for (int i = 0; i < ggml_graph_n_nodes(gf) && ok; ++i)
        ok = ggml_backend_dev_supports_op(device, ggml_graph_node(gf, i));
    ggml_free(ctx);
    return ok;
}

static bool graph_backend_init(struct llama_sampler *smpl, ggml_backend_buffer_type_t buft,
                               uint32_t n_outputs_max_per_seq) {
    graph_state *st = (graph_state *)smpl->ctx;
    /* + 1: llama.cpp builds one dummy row for a sequence without outputs in a ubatch */
    const int32_t capacity = (int32_t)(n_outputs_max_per_seq < 65536 ? n_outputs_max_per_seq : 65536) + 1;
    struct ggml_tensor **uniforms = calloc((size_t)capacity, sizeof *uniforms);
    if (!uniforms) return false;
    free(st->uniforms);
    st->uniforms = uniforms;
    st->capacity = capacity;
    st->initialised = 1;
    st->supported = device_supports_row(st, buft);
    return st->supported;
}

static struct llama_sampler_i graph_iface = {
    /* .name              = */ graph_name,
    /* .accept            = */ NULL,
    /* .apply             = */ graph_apply,
    /* .reset             = */ NULL,
    /* .clone             = */ NULL,
    /* .free              = */ graph_free,
    /* .backend_init      = */ graph_backend_init,
    /* .backend_accept    = */ NULL,
    /* .backend_apply     = */ graph_backend_apply,
    /* .backend_set_input = */ graph_backend_set_input,
    /* .backend_reset     = */ graph_backend_reset,
    /* .copy_state        = */ NULL,
};

/* ---- the public functions (pyspec.h) -------------------------------------------------- */

const char *pyspec_graph_llama_version(void) { return PYSPEC_LLAMA_VERSION; }

static pyspec_status check_params(const pyspec_sampling_params *p, pyspec_error *err) {
    if (!p) return fail(err, PYSPEC_ERR_NULL, "params is NULL");
    if (!isfinite(p->temperature))
        return fail(err, PYSPEC_ERR_PARAM, "params.temperature must be finite (<= 0 means greedy), got %g",
                    (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return fail(err, PYSPEC_ERR_PARAM, "params.top_p must be in (0, 1] (1 turns top-p off), got %g",
                    (double)p->top_p);
    if (isnan(p->min_p) || p->min_p > 1.0f)
        return fail(err, PYSPEC_ERR_PARAM, "params.min_p must be <= 1 (<= 0 turns min-p off), got %g",
                    (double)p->min_p);
    const int penalties = p->penalty_last_n != 0 &&
                          (p->penalty_repeat != 1.0f || p->penalty_freq != 0.0f || p->penalty_present != 0.0f);
    if (penalties)
        return fail(err, PYSPEC_ERR_PARAM,
                    "the in-graph sampler has no repetition penalties: verify penalised requests on the host");
    return PYSPEC_OK;
}

pyspec_status pyspec_graph_sampler_attach(void *llama_context, int32_t seq_id,
                                          const pyspec_sampling_params *params,
                                          pyspec_graph_sampler **out, pyspec_error *err) {
    if (!llama_context) return fail(err, PYSPEC_ERR_NULL, "llama_context is NULL");
    if (!out) return fail(err, PYSPEC_ERR_NULL, "out is NULL");
    *out = NULL;
    pyspec_status st = check_params(params, err);
    if (st != PYSPEC_OK) return st;
    if (seq_id < 0) return fail(err, PYSPEC_ERR_SHAPE, "seq_id must be >= 0, got %d", seq_id);

    pyspec_graph_sampler *g = calloc(1, sizeof *g);
    graph_state *state = calloc(1, sizeof *state);
    if (!g || !state) {
        free(g);
        free(state);
        return fail(err, PYSPEC_ERR_NO_MEMORY, "out of memory for the in-graph sampler");
    }
    state->params = *params;
    state->params.penalty_history = NULL;
    state->params.n_penalty_history = 0;
    state->greedy = params->temperature <= 0.0f;
    state->log_min_p = params->min_p > 0.0f ? logf(params->min_p) : -INFINITY;

    struct llama_sampler *inner = llama_sampler_init(&graph_iface, state);
    struct llama_sampler *chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    if (!inner || !chain) {
        if (inner) llama_sampler_free(inner); /* frees state */
        else free(state);
        if (chain) llama_sampler_free(chain);
        free(g);
        return fail(err, PYSPEC_ERR_NO_MEMORY, "llama.cpp could not create the sampler chain");
    }
    llama_sampler_chain_add(chain, inner); /* the chain owns inner (and state) from here */
    g->ctx = (struct llama_context *)llama_context;
    g->seq_id = seq_id;
    g->chain = chain;
    g->state = state;

    llama_set_sampler(g->ctx, seq_id, chain); /* runs backend_init */
    if (!state->initialised || !state->supported) {
        const int initialised = state->initialised;
        llama_set_sampler(g->ctx, seq_id, NULL);
        llama_sampler_free(chain);
        free(g);
        return fail(err, PYSPEC_ERR_LLAMA,
                    initialised ? "the device that runs this model lacks a ggml op the in-graph sampler needs"
                                : "llama.cpp did not initialise the in-graph sampler (backend sampling off for this context)");
    }
    *out = g;
    return PYSPEC_OK;
}

pyspec_status pyspec_graph_sampler_set_position(pyspec_graph_sampler *g, int64_t position,
                                                pyspec_error *err) {
    if (!g) return fail(err, PYSPEC_ERR_NULL, "sampler is NULL");
    if (position < 0) return fail(err, PYSPEC_ERR_SHAPE, "position must be >= 0, got %lld", (long long)position);
    g->state->position = position;
    return PYSPEC_OK;
}

pyspec_status pyspec_graph_sampler_read(pyspec_graph_sampler *g, int32_t first_output,
                                        int32_t n_rows, int32_t *out_tokens, pyspec_error *err) {
    if (!g) return fail(err, PYSPEC_ERR_NULL, "sampler is NULL");
    if (!out_tokens) return fail(err, PYSPEC_ERR_NULL, "out_tokens is NULL");
    if (first_output < 0 || n_rows < 1)
        return fail(err, PYSPEC_ERR_SHAPE, "need first_output >= 0 and n_rows >= 1, got %d and %d",
                    first_output, n_rows);
    const graph_state *st = g->state;
    if (st->host_apply_called)
        return fail(err, PYSPEC_ERR_LLAMA, "llama.cpp sampled on the host with the in-graph sampler");
    if (st->overflow)
        return fail(err, PYSPEC_ERR_CAPACITY, "the graph held more rows than the sampler has uniforms for (%d)",
                    st->capacity);
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(g->ctx)));
    for (int32_t i = 0; i < n_rows; ++i) {
        const int32_t row = first_output + i;
        const llama_token token = llama_get_sampled_token_ith(g->ctx, row);
        if (token == LLAMA_TOKEN_NULL || token < 0 || token >= n_vocab)
            return fail(err, PYSPEC_ERR_LLAMA, "llama.cpp has no in-graph sample for output %d (got %d)", row,
                        token);
        const float *check = llama_get_sampled_probs_ith(g->ctx, row);
        if (!check || llama_get_sampled_probs_count_ith(g->ctx, row) != 1)
            return fail(err, PYSPEC_ERR_LLAMA, "llama.cpp kept no logits check for output %d", row);
        if (!(check[0] == 0.0f))
            return fail(err, PYSPEC_ERR_LOGITS,
                        "target_logits row %d holds NaN or +-inf (found in the graph; the row never left the device)",
                        i);
        out_tokens[i] = token;
    }
    return PYSPEC_OK;
}

/* ---- the same ops outside llama.cpp (tests) ------------------------------------------ */

pyspec_status pyspec_graph_sample_rows(const float *logits, int64_t n_vocab,
                                       const pyspec_sampling_params *params,
                                       const int64_t *positions, int64_t n_draws,
                                       int32_t n_threads, int32_t *out_tokens, pyspec_error *err) {
    if (!logits || !positions || !out_tokens) return fail(err, PYSPEC_ERR_NULL, "logits, positions and out_tokens must not be NULL");
    if (n_vocab < 1 || n_vocab > (1 << 24))
        return fail(err, PYSPEC_ERR_SHAPE, "n_vocab must be in [1, 2^24], got %lld", (long long)n_vocab);
    if (n_draws < 0 || n_threads < 1) return fail(err, PYSPEC_ERR_SHAPE, "need n_draws >= 0 and n_threads >= 1");
    pyspec_status status = check_params(params, err);
    if (status != PYSPEC_OK) return status;
    graph_state st;
    memset(&st, 0, sizeof st);
    st.params = *params;
    st.greedy = params->temperature <= 0.0f;
    st.log_min_p = params->min_p > 0.0f ? logf(params->min_p) : -INFINITY;
    /* One graph per draw, in a context that holds every intermediate: at most ~64 tensors
     * of n_vocab elements (the top-k-off, top-p-on chain is the longest). */
    const size_t max_nodes = 512;
    const size_t mem = (size_t)64 * ((size_t)n_vocab * sizeof(float) + ggml_tensor_overhead() + 64) +
                       ggml_graph_overhead_custom(max_nodes, false) + (1 << 20);
    for (int64_t d = 0; d < n_draws; ++d) {
        if (positions[d] < 0)
            return fail(err, PYSPEC_ERR_SHAPE, "positions[%lld] is negative", (long long)d);
        struct ggml_init_params ip = {mem, NULL, false};
        struct ggml_context *ctx = ggml_init(ip);
        if (!ctx) return fail(err, PYSPEC_ERR_NO_MEMORY, "no memory for a ggml context of %zu bytes", mem);
        struct ggml_tensor *row = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n_vocab);
        memcpy(row->data, logits, (size_t)n_vocab * sizeof(float));
        struct ggml_tensor *uniform = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1);
        float uf = (float)pyspec_uniform_keyed(params->seed, positions[d], PYSPEC_PURPOSE_SAMPLE);
        if (!(uf < 1.0f)) uf = LARGEST_BELOW_ONE;
        memcpy(uniform->data, &uf, sizeof uf);
        struct ggml_tensor *token = sample_row(ctx, &st, row, uniform);
        struct ggml_tensor *check = ggml_sum(ctx, ggml_sub(ctx, row, row));
        struct ggml_cgraph *gf = ggml_new_graph_custom(ctx, max_nodes, false);
        ggml_build_forward_expand(gf, token);
        ggml_build_forward_expand(gf, check);
        const enum ggml_status gs = ggml_graph_compute_with_ctx(ctx, gf, n_threads);
        const float finite = *(const float *)check->data;
        const int32_t t = *(const int32_t *)token->data;
        ggml_free(ctx);
        if (gs != GGML_STATUS_SUCCESS) return fail(err, PYSPEC_ERR_LLAMA, "ggml could not compute the row (status %d)", (int)gs);
        if (!(finite == 0.0f)) return fail(err, PYSPEC_ERR_LOGITS, "logits hold NaN or +-inf");
        if (t < 0 || t >= n_vocab) return fail(err, PYSPEC_ERR_LLAMA, "the graph drew token %d outside [0, %lld)", t, (long long)n_vocab);
        out_tokens[d] = t;
    }
    return PYSPEC_OK;
}

void pyspec_graph_sampler_detach(pyspec_graph_sampler *g) {
    if (!g) return;
    llama_set_sampler(g->ctx, g->seq_id, NULL);
    llama_sampler_free(g->chain);
    free(g);
}
