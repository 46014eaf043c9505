/*
 * graph_host.c - the in-graph sampler's ops on host rows of logits, outside llama.cpp, run
 * by ggml's CPU back end: thousands of draws without a model decode each, for the
 * statistical tests (tests/test_graph_sampling.py).
 */
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "graph_internal.h"
#include "internal.h"

pyspec_status pyspec_graph_sample_rows(const float *logits, int64_t n_vocab,
                                       const pyspec_sampling_params *params,
                                       const int32_t *history, int64_t n_history,
                                       const int64_t *positions, int64_t n_draws,
                                       int32_t n_threads, int32_t *out_tokens, pyspec_error *err) {
    if (!logits || !positions || !out_tokens) return pyspec_fail(err, PYSPEC_ERR_NULL, "logits, positions and out_tokens must not be NULL");
    if (n_vocab < 1 || n_vocab > (1 << 24))
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "n_vocab must be in [1, 2^24], got %lld", (long long)n_vocab);
    if (n_draws < 0 || n_threads < 1) return pyspec_fail(err, PYSPEC_ERR_SHAPE, "need n_draws >= 0 and n_threads >= 1");
    pyspec_status status = pyspec_graph_check_params(params, err);
    if (status != PYSPEC_OK) return status;
    graph_state *st = pyspec_graph_new_state(params, n_vocab, -1);
    if (!st) return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "out of memory");
    status = pyspec_graph_set_windows(st, history, n_history, NULL, 1, err);
    if (status != PYSPEC_OK) {
        pyspec_graph_free_state(st);
        return status;
    }
    /* One graph per draw, in a context that holds every intermediate: at most ~64 tensors
     * of n_vocab elements (the top-k-off, top-p-on chain is the longest). */
    const size_t max_nodes = 512;
    const size_t mem = (size_t)64 * ((size_t)n_vocab * sizeof(float) + ggml_tensor_overhead() + 64) +
                       ggml_graph_overhead_custom(max_nodes, false) + (1 << 20);
    row_inputs in;
    st->rows = NULL; /* points at `in` below; never freed */
    for (int64_t d = 0; d < n_draws && status == PYSPEC_OK; ++d) {
        if (positions[d] < 0) {
            status = pyspec_fail(err, PYSPEC_ERR_SHAPE, "positions[%lld] is negative", (long long)d);
            break;
        }
        struct ggml_init_params ip = {mem, NULL, false};
        struct ggml_context *ctx = ggml_init(ip);
        if (!ctx) {
            status = pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "no memory for a ggml context of %zu bytes", mem);
            break;
        }
        struct ggml_tensor *row = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n_vocab);
        memcpy(row->data, logits, (size_t)n_vocab * sizeof(float));
        in = pyspec_graph_make_inputs(ctx, st, 0);
        st->rows = &in;
        st->n_rows = 1;
        st->position = positions[d];
        pyspec_graph_set_inputs(st);
        struct ggml_tensor *token = pyspec_graph_sample_row(ctx, st, row, &in);
        struct ggml_tensor *check = pyspec_graph_finite_check(ctx, row);
        struct ggml_cgraph *gf = ggml_new_graph_custom(ctx, max_nodes, false);
        ggml_build_forward_expand(gf, token);
        ggml_build_forward_expand(gf, check);
        const enum ggml_status gs = ggml_graph_compute_with_ctx(ctx, gf, n_threads);
        const float finite = *(const float *)check->data;
        const int32_t t = *(const int32_t *)token->data;
        ggml_free(ctx);
        if (gs != GGML_STATUS_SUCCESS)
            status = pyspec_fail(err, PYSPEC_ERR_LLAMA, "ggml could not compute the row (status %d)", (int)gs);
        else if (!(finite == 0.0f))
            status = pyspec_fail(err, PYSPEC_ERR_LOGITS, "logits hold NaN or +-inf");
        else if (t < 0 || t >= n_vocab)
            status = pyspec_fail(err, PYSPEC_ERR_LLAMA, "the graph drew token %d outside [0, %lld)", t, (long long)n_vocab);
        else
            out_tokens[d] = t;
    }
    st->rows = NULL;
    pyspec_graph_free_state(st);
    return status;
}
