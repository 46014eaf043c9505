/*
 * graph_internal.h - what the in-graph sampler's files share: the per-row inputs, the
 * sampler's state, and the functions that build a row's ops and feed its inputs.
 * Internal to libpyspec_llama (compiled with hidden visibility: only pyspec.h's functions
 * are exported).
 */
#ifndef PYSPEC_GRAPH_INTERNAL_H
#define PYSPEC_GRAPH_INTERNAL_H

#include <stdint.h>

#include "ggml.h"
#include "pyspec.h"

/* The largest float below 1: a uniform that rounds up to 1.0f would put the draw target at
 * the total, past every token. */
#define LARGEST_BELOW_ONE 0.99999994f

/* The inputs of one row of the graph being built (NULL where the chain has no use for one). */
typedef struct row_inputs {
    struct ggml_tensor *uniform;       /* F32 [1] */
    struct ggml_tensor *penalty_read;  /* I32 [window]: the window's distinct tokens, padded with 0 */
    struct ggml_tensor *penalty_write; /* I64 [window]: the same, pads sent past the row's end */
    struct ggml_tensor *penalty_count; /* F32 [window]: occurrences (pads: 0) */
    struct ggml_tensor *penalty_repeat, *penalty_freq, *penalty_present; /* F32 [1] each */
} row_inputs;

typedef struct graph_state {
    pyspec_sampling_params params;
    int greedy;
    int penalties;             /* repetition penalties on: rows need their windows */
    int32_t window;            /* penalty_last_n */
    int64_t n_vocab;           /* the model's: pads of a penalty window write past it */
    float log_min_p;
    int32_t n_top;             /* -1: no logprobs; else each row also gives its token's raw
                                * logprob and its n_top most likely tokens' (fixed at attach:
                                * llama.cpp reuses a graph while the sampler is the same) */
    int64_t position;          /* absolute position of the next decode's first output row */
    row_inputs *rows;          /* one per row of the graph being built */
    int32_t n_rows;
    int32_t capacity;
    int32_t overflow;          /* backend_apply ran for more rows than capacity */
    int32_t supported;         /* backend_init: the device runs every op */
    int32_t initialised;
    int32_t host_apply_called; /* llama.cpp asked for a host-side sample: never expected */
    /* The penalty windows of the next decode's rows (pyspec_graph_sampler_set_history), as
     * the row inputs take them: row r at [r * window ...), its distinct tokens first, then
     * pads that read token 0, write past the row's end (n_vocab + j) and count 0. */
    int32_t *window_read;
    int64_t *window_write;
    float *window_count;
    int32_t n_windows;         /* rows prepared; a row past them reads as an error */
    int32_t windows_capacity;
    int32_t missing_window;    /* set_input found a row without its window */
} graph_state;

/* ---- graph_ops.c: one row's ops ---- */

/* The inputs one row needs (a uniform unless greedy; the penalty window when penalties are
 * on), created in ctx and marked as graph inputs. */
row_inputs pyspec_graph_make_inputs(struct ggml_context *ctx, const graph_state *st, int32_t row);

/* The token sampled from `logits` (n_vocab floats in token-id order), as an I32 [1]. */
struct ggml_tensor *pyspec_graph_sample_row(struct ggml_context *ctx, const graph_state *st,
                                            struct ggml_tensor *logits, const row_inputs *in);

/* 0 when every logit is finite, NaN otherwise (x - x is NaN for NaN and +-inf): the host
 * path's check, for one float per row instead of the row. */
struct ggml_tensor *pyspec_graph_finite_check(struct ggml_context *ctx, struct ggml_tensor *logits);

/* The raw log-softmax of `token` (I32 [1]) and of the row's n_top largest logits, as F32
 * [1 + n_top]; the ids of those n_top into *top_ids (I32 [n_top], in no set order; NULL when
 * n_top is 0). What a completion's logprobs report, without the row leaving the device. */
struct ggml_tensor *pyspec_graph_logprobs(struct ggml_context *ctx, struct ggml_tensor *logits,
                                          struct ggml_tensor *token, int32_t n_top,
                                          struct ggml_tensor **top_ids);

/* ---- graph_state.c: parameters, penalty windows, inputs ---- */

pyspec_status pyspec_graph_check_params(const pyspec_sampling_params *p, pyspec_error *err);
graph_state *pyspec_graph_new_state(const pyspec_sampling_params *params, int64_t n_vocab,
                                    int32_t n_top);
void pyspec_graph_free_state(graph_state *st);

/* Penalty windows for rows 0..n_rows-1 (row r: history, then drafts[0..r)). */
pyspec_status pyspec_graph_set_windows(graph_state *st, const int32_t *history, int64_t n_history,
                                       const int32_t *drafts, int32_t n_rows, pyspec_error *err);

/* Writes every row's inputs (uniforms at position + r, penalty windows) for the next run. */
void pyspec_graph_set_inputs(graph_state *st);

#endif /* PYSPEC_GRAPH_INTERNAL_H */
