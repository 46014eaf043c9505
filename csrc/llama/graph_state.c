/*
 * graph_state.c - the in-graph sampler's state: its parameters (checked), the penalty
 * windows of the next decode's rows, and the inputs written before each run (uniforms from
 * Philox at the rows' positions, the windows).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "graph_internal.h"
#include "internal.h"
#include "philox.h"

void pyspec_graph_free_state(graph_state *st) {
    if (!st) return;
    free(st->rows);
    free(st->window_read);
    free(st->window_write);
    free(st->window_count);
    free(st);
}

/* libpyspec's own checks (errors.c, compiled into this library too), and what the graph
 * adds: a penalty window of fixed size (its inputs are shaped by it). */
pyspec_status pyspec_graph_check_params(const pyspec_sampling_params *p, pyspec_error *err) {
    pyspec_status st = pyspec_check_params(p, "params", err);
    if (st == PYSPEC_OK) st = pyspec_check_penalty_values(p, 0, "params", err);
    if (st == PYSPEC_OK && pyspec_penalties_on(p) && p->penalty_last_n < 0)
        st = pyspec_fail(err, PYSPEC_ERR_PARAM,
                         "params.penalty_last_n must be in [0, %d] in the graph (a window of fixed size), got %d",
                         (int)PYSPEC_MAX_PENALTY_WINDOW, p->penalty_last_n);
    return st;
}

/* The state of one sampler for params (checked). */
graph_state *pyspec_graph_new_state(const pyspec_sampling_params *params, int64_t n_vocab,
                                    int32_t n_top) {
    graph_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->params = *params;
    st->params.penalty_history = NULL;
    st->params.n_penalty_history = 0;
    st->greedy = params->temperature <= 0.0f;
    st->penalties = pyspec_penalties_on(params);
    st->window = st->penalties ? params->penalty_last_n : 0;
    st->n_vocab = n_vocab;
    st->log_min_p = params->min_p > 0.0f ? logf(params->min_p) : -INFINITY;
    st->n_top = n_top;
    return st;
}

static int compare_tokens(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Row r's window: the last `window` tokens of history followed by drafts[0..r), as distinct
 * tokens (ascending) and their counts, then the pads. */
static void prepare_window(graph_state *st, int32_t r, const int32_t *history, int64_t n_history,
                           const int32_t *drafts, int32_t *scratch) {
    const int64_t w = st->window, total = n_history + r;
    const int64_t first = total > w ? total - w : 0;
    int64_t n = 0;
    for (int64_t i = first; i < total; ++i) scratch[n++] = i < n_history ? history[i] : drafts[i - n_history];
    qsort(scratch, (size_t)n, sizeof *scratch, compare_tokens);
    int32_t *read = st->window_read + (size_t)r * w;
    int64_t *write = st->window_write + (size_t)r * w;
    float *count = st->window_count + (size_t)r * w;
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (m > 0 && read[m - 1] == scratch[i]) {
            count[m - 1] += 1.0f;
        } else {
            read[m] = scratch[i];
            write[m] = scratch[i];
            count[m++] = 1.0f;
        }
    }
    for (int64_t j = m; j < w; ++j) {
        read[j] = 0;
        write[j] = st->n_vocab + j;
        count[j] = 0.0f;
    }
}

/* Windows for rows 0..n_rows-1 (row r: history, then drafts[0..r)). */
pyspec_status pyspec_graph_set_windows(graph_state *st, const int32_t *history, int64_t n_history,
                                 const int32_t *drafts, int32_t n_rows, pyspec_error *err) {
    if (!st->penalties) return PYSPEC_OK;
    if (n_history < 0 || n_rows < 1) return pyspec_fail(err, PYSPEC_ERR_SHAPE, "need n_history >= 0 and rows >= 1");
    if ((n_history && !history) || (n_rows > 1 && !drafts))
        return pyspec_fail(err, PYSPEC_ERR_NULL, "history and drafts must not be NULL when not empty");
    for (int64_t i = 0; i < n_history + n_rows - 1; ++i) {
        const int32_t t = i < n_history ? history[i] : drafts[i - n_history];
        if (t < 0 || t >= st->n_vocab)
            return pyspec_fail(err, PYSPEC_ERR_TOKEN, "%s[%lld] = %d is outside [0, %lld)", i < n_history ? "history" : "drafts",
                        (long long)(i < n_history ? i : i - n_history), t, (long long)st->n_vocab);
    }
    if (n_rows > st->windows_capacity) {
        const size_t cells = (size_t)n_rows * (size_t)st->window;
        int32_t *read = realloc(st->window_read, cells * sizeof *read);
        if (read) st->window_read = read;
        int64_t *write = realloc(st->window_write, cells * sizeof *write);
        if (write) st->window_write = write;
        float *count = realloc(st->window_count, cells * sizeof *count);
        if (count) st->window_count = count;
        if (!read || !write || !count) return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "no memory for penalty windows");
        st->windows_capacity = n_rows;
    }
    int32_t *scratch = malloc((size_t)st->window * sizeof *scratch);
    if (!scratch) return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "no memory for a penalty window");
    for (int32_t r = 0; r < n_rows; ++r) prepare_window(st, r, history, n_history, drafts, scratch);
    free(scratch);
    st->n_windows = n_rows;
    st->missing_window = 0;
    return PYSPEC_OK;
}

/* Writes an input: through its back-end buffer inside llama.cpp, into its data in the
 * host-only contexts of pyspec_graph_sample_rows. */
static void put(struct ggml_tensor *t, const void *src, size_t bytes) {
    if (t->buffer) ggml_backend_tensor_set(t, src, 0, bytes);
    else memcpy(t->data, src, bytes);
}

static float uniform_at(const pyspec_sampling_params *p, int64_t position) {
    float u = (float)pyspec_uniform_keyed(p->seed, position, PYSPEC_PURPOSE_SAMPLE);
    return u < 1.0f ? u : LARGEST_BELOW_ONE;
}

/* Row r's penalty inputs: its prepared window, and the penalty values. */
static void set_window(const graph_state *st, int32_t r) {
    const row_inputs *in = &st->rows[r];
    const size_t w = (size_t)st->window, at = (size_t)r * w;
    put(in->penalty_read, st->window_read + at, w * sizeof *st->window_read);
    put(in->penalty_write, st->window_write + at, w * sizeof *st->window_write);
    put(in->penalty_count, st->window_count + at, w * sizeof *st->window_count);
    put(in->penalty_repeat, &st->params.penalty_repeat, sizeof(float));
    put(in->penalty_freq, &st->params.penalty_freq, sizeof(float));
    put(in->penalty_present, &st->params.penalty_present, sizeof(float));
}

void pyspec_graph_set_inputs(graph_state *st) {
    for (int32_t r = 0; r < st->n_rows; ++r) {
        if (st->rows[r].uniform) {
            const float u = uniform_at(&st->params, st->position + r);
            put(st->rows[r].uniform, &u, sizeof u);
        }
        if (st->penalties) {
            if (r >= st->n_windows) {
                st->missing_window = 1;
                continue;
            }
            set_window(st, r);
        }
    }
}
