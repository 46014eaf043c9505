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
 * Files: graph_ops.c (the ops of one row), graph_state.c (parameters, penalty windows,
 * inputs), this file (llama.cpp's sampler interface and the public functions), graph_host.c
 * (the same ops on host rows, for tests).
 *
 * Built as its own library (libpyspec_llama) against the headers of the llama-cpp-python
 * whose libllama it links (pyspec/llama_graph_build.py), so libpyspec itself never depends
 * on llama.cpp.
 */
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "graph_internal.h"
#include "internal.h"
#include "llama.h"

#ifndef PYSPEC_LLAMA_VERSION
#  define PYSPEC_LLAMA_VERSION "unknown"
#endif

struct pyspec_graph_sampler {
    struct llama_context *ctx;
    int32_t seq_id;
    struct llama_sampler *chain; /* owns the pyspec sampler */
    graph_state *state;          /* owned by that sampler */
};

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
    pyspec_graph_free_state((graph_state *)smpl->ctx);
}

static void graph_backend_reset(struct llama_sampler *smpl) {
    graph_state *st = (graph_state *)smpl->ctx;
    st->n_rows = 0;
    st->overflow = 0;
}

static void graph_backend_apply(struct llama_sampler *smpl, struct ggml_context *ctx,
                                struct ggml_cgraph *gf, struct llama_sampler_data *data) {
    (void)gf;
    graph_state *st = (graph_state *)smpl->ctx;
    const row_inputs in = pyspec_graph_make_inputs(ctx, st, st->n_rows);
    if (st->n_rows < st->capacity) {
        st->rows[st->n_rows++] = in;
    } else {
        st->overflow = 1; /* this row's inputs are never set: read() refuses its token */
    }
    struct ggml_tensor *logits = ggml_reshape_1d(ctx, data->logits, ggml_nelements(data->logits));
    data->sampled = pyspec_graph_sample_row(ctx, st, logits, &in);
    /* 0 when every logit is finite, NaN otherwise (x - x is NaN for NaN and +-inf): the
     * host path's check, for one float per row instead of the row. With logprobs asked, the
     * row's raw logprobs follow it (the sampled token's, then the top n_top's, whose ids go
     * out as the row's candidates). */
    data->probs = pyspec_graph_finite_check(ctx, logits);
    if (st->n_top >= 0) {
        struct ggml_tensor *top_ids = NULL;
        struct ggml_tensor *lp = pyspec_graph_logprobs(ctx, logits, data->sampled, st->n_top, &top_ids);
        data->probs = ggml_concat(ctx, data->probs, lp, 0);
        data->candidates = top_ids;
    }
    /* llama.cpp copies data->logits of every row to the host after the decode (its chain
     * hands on transformed logits that way); left set, that is the very row this sampler
     * exists not to copy: n_vocab floats per row, device to host. */
    data->logits = NULL;
}


static void graph_backend_set_input(struct llama_sampler *smpl) {
    pyspec_graph_set_inputs((graph_state *)smpl->ctx);
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
    const row_inputs in = pyspec_graph_make_inputs(ctx, st, 0);
    struct ggml_tensor *token = pyspec_graph_sample_row(ctx, st, logits, &in);
    ggml_build_forward_expand(gf, token);
    ggml_build_forward_expand(gf, pyspec_graph_finite_check(ctx, logits));
    if (st->n_top >= 0) {
        struct ggml_tensor *top_ids = NULL;
        ggml_build_forward_expand(gf, pyspec_graph_logprobs(ctx, logits, token, st->n_top > 0 ? 1 : 0, &top_ids));
    }
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
    row_inputs *rows = calloc((size_t)capacity, sizeof *rows);
    if (!rows) return false;
    free(st->rows);
    st->rows = rows;
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

/* Floats llama.cpp keeps per row as the sampler's "probs": the finiteness check, then with
 * logprobs the sampled token's and the top n_top's. */
static uint32_t probs_per_row(const graph_state *st) {
    return st->n_top < 0 ? 1u : 2u + (uint32_t)st->n_top;
}

const char *pyspec_graph_llama_version(void) { return PYSPEC_LLAMA_VERSION; }

pyspec_status pyspec_graph_sampler_attach(void *llama_context, int32_t seq_id,
                                          const pyspec_sampling_params *params, int32_t n_top,
                                          pyspec_graph_sampler **out, pyspec_error *err) {
    if (!llama_context) return pyspec_fail(err, PYSPEC_ERR_NULL, "llama_context is NULL");
    if (!out) return pyspec_fail(err, PYSPEC_ERR_NULL, "out is NULL");
    *out = NULL;
    pyspec_status st = pyspec_graph_check_params(params, err);
    if (st != PYSPEC_OK) return st;
    if (seq_id < 0) return pyspec_fail(err, PYSPEC_ERR_SHAPE, "seq_id must be >= 0, got %d", seq_id);

    struct llama_context *lctx = (struct llama_context *)llama_context;
    const int64_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(lctx)));
    if (n_top < -1 || n_top > PYSPEC_GRAPH_MAX_TOP || n_top > n_vocab)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "n_top must be -1 (no logprobs) or in [0, %d], got %d",
                           (int)(n_vocab < PYSPEC_GRAPH_MAX_TOP ? n_vocab : PYSPEC_GRAPH_MAX_TOP), n_top);
    pyspec_graph_sampler *g = calloc(1, sizeof *g);
    graph_state *state = pyspec_graph_new_state(params, n_vocab, n_top);
    if (!g || !state) {
        free(g);
        pyspec_graph_free_state(state);
        return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "out of memory for the in-graph sampler");
    }

    struct llama_sampler *inner = llama_sampler_init(&graph_iface, state);
    struct llama_sampler *chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    if (!inner || !chain) {
        if (inner) llama_sampler_free(inner); /* frees state */
        else pyspec_graph_free_state(state);
        if (chain) llama_sampler_free(chain);
        free(g);
        return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "llama.cpp could not create the sampler chain");
    }
    llama_sampler_chain_add(chain, inner); /* the chain owns inner (and state) from here */
    g->ctx = lctx;
    g->seq_id = seq_id;
    g->chain = chain;
    g->state = state;

    llama_set_sampler(g->ctx, seq_id, chain); /* runs backend_init */
    if (!state->initialised || !state->supported) {
        const int initialised = state->initialised;
        llama_set_sampler(g->ctx, seq_id, NULL);
        llama_sampler_free(chain);
        free(g);
        return pyspec_fail(err, PYSPEC_ERR_LLAMA,
                    initialised ? "the device that runs this model lacks a ggml op the in-graph sampler needs"
                                : "llama.cpp did not initialise the in-graph sampler (backend sampling off for this context)");
    }
    *out = g;
    return PYSPEC_OK;
}

pyspec_status pyspec_graph_sampler_set_position(pyspec_graph_sampler *g, int64_t position,
                                                pyspec_error *err) {
    if (!g) return pyspec_fail(err, PYSPEC_ERR_NULL, "sampler is NULL");
    if (position < 0) return pyspec_fail(err, PYSPEC_ERR_SHAPE, "position must be >= 0, got %lld", (long long)position);
    g->state->position = position;
    return PYSPEC_OK;
}

pyspec_status pyspec_graph_sampler_set_history(pyspec_graph_sampler *g, const int32_t *history,
                                               int64_t n_history, const int32_t *drafts,
                                               int32_t n_rows, pyspec_error *err) {
    if (!g) return pyspec_fail(err, PYSPEC_ERR_NULL, "sampler is NULL");
    return pyspec_graph_set_windows(g->state, history, n_history, drafts, n_rows, err);
}

pyspec_status pyspec_graph_sampler_read(pyspec_graph_sampler *g, int32_t first_output,
                                        int32_t n_rows, int32_t *out_tokens, pyspec_error *err) {
    if (!g) return pyspec_fail(err, PYSPEC_ERR_NULL, "sampler is NULL");
    if (!out_tokens) return pyspec_fail(err, PYSPEC_ERR_NULL, "out_tokens is NULL");
    if (first_output < 0 || n_rows < 1)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "need first_output >= 0 and n_rows >= 1, got %d and %d",
                    first_output, n_rows);
    const graph_state *st = g->state;
    if (st->host_apply_called)
        return pyspec_fail(err, PYSPEC_ERR_LLAMA, "llama.cpp sampled on the host with the in-graph sampler");
    if (st->overflow)
        return pyspec_fail(err, PYSPEC_ERR_CAPACITY, "the graph held more rows than the sampler has inputs for (%d)",
                    st->capacity);
    if (st->missing_window)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "a row was decoded without its penalty window "
                                           "(pyspec_graph_sampler_set_history before each decode)");
    for (int32_t i = 0; i < n_rows; ++i) {
        const int32_t row = first_output + i;
        const llama_token token = llama_get_sampled_token_ith(g->ctx, row);
        if (token == LLAMA_TOKEN_NULL || token < 0 || token >= st->n_vocab)
            return pyspec_fail(err, PYSPEC_ERR_LLAMA, "llama.cpp has no in-graph sample for output %d (got %d)", row,
                        token);
        const float *check = llama_get_sampled_probs_ith(g->ctx, row);
        if (!check || llama_get_sampled_probs_count_ith(g->ctx, row) != probs_per_row(st))
            return pyspec_fail(err, PYSPEC_ERR_LLAMA, "llama.cpp kept no logits check for output %d", row);
        if (!(check[0] == 0.0f))
            return pyspec_fail(err, PYSPEC_ERR_LOGITS,
                        "target_logits row %d holds NaN or +-inf (found in the graph; the row never left the device)",
                        i);
        out_tokens[i] = token;
    }
    return PYSPEC_OK;
}

pyspec_status pyspec_graph_sampler_read_logprobs(pyspec_graph_sampler *g, int32_t first_output,
                                                 int32_t n_rows, float *out_token_logprobs,
                                                 int32_t *out_top_ids, float *out_top_logprobs,
                                                 pyspec_error *err) {
    if (!g) return pyspec_fail(err, PYSPEC_ERR_NULL, "sampler is NULL");
    const graph_state *st = g->state;
    if (st->n_top < 0)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "this sampler was attached without logprobs (n_top -1)");
    if (!out_token_logprobs || (st->n_top > 0 && (!out_top_ids || !out_top_logprobs)))
        return pyspec_fail(err, PYSPEC_ERR_NULL, "an output array is NULL");
    if (first_output < 0 || n_rows < 1)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "need first_output >= 0 and n_rows >= 1, got %d and %d",
                           first_output, n_rows);
    const int32_t k = st->n_top;
    for (int32_t i = 0; i < n_rows; ++i) {
        const int32_t row = first_output + i;
        const float *probs = llama_get_sampled_probs_ith(g->ctx, row);
        if (!probs || llama_get_sampled_probs_count_ith(g->ctx, row) != probs_per_row(st))
            return pyspec_fail(err, PYSPEC_ERR_LLAMA, "llama.cpp kept no logprobs for output %d", row);
        out_token_logprobs[i] = probs[1];
        if (k == 0) continue;
        const llama_token *ids = llama_get_sampled_candidates_ith(g->ctx, row);
        if (!ids || llama_get_sampled_candidates_count_ith(g->ctx, row) != (uint32_t)k)
            return pyspec_fail(err, PYSPEC_ERR_LLAMA, "llama.cpp kept no top tokens for output %d", row);
        for (int32_t j = 0; j < k; ++j) {
            out_top_ids[(size_t)i * k + j] = ids[j];
            out_top_logprobs[(size_t)i * k + j] = probs[2 + j];
        }
    }
    return PYSPEC_OK;
}

void pyspec_graph_sampler_detach(pyspec_graph_sampler *g) {
    if (!g) return;
    llama_set_sampler(g->ctx, g->seq_id, NULL);
    llama_sampler_free(g->chain);
    free(g);
}
