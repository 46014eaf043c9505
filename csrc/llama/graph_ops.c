/*
 * graph_ops.c - one verify row as ggml ops: penalties, top-k, top-p, min-p, temperature and
 * the inverse-CDF draw in token-id order (or greedy's argmax). The host verifier's steps
 * (distribution.c, rules.h) in the order it takes them, on whatever back end runs the graph.
 */
#include <math.h>
#include <string.h>

#include "graph_internal.h"

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

/* llama.cpp's penalties on the window's distinct tokens, written back into the row: the
 * arithmetic of rules.h's pyspec_penalised_logit op for op (a division for a positive
 * logit, a product otherwise, then the frequency and presence terms), so the same floats.
 * Pads read token 0 and write past the row's end, into rows that are then dropped: no two
 * writes land on one element. */
static struct ggml_tensor *penalised(struct ggml_context *ctx, struct ggml_tensor *logits,
                                     const row_inputs *in) {
    const int64_t n = ggml_nelements(logits);
    const int64_t window = ggml_nelements(in->penalty_count);
    struct ggml_tensor *seen = pick(ctx, logits, in->penalty_read);
    struct ggml_tensor *above = ggml_div(ctx, ggml_relu(ctx, seen), in->penalty_repeat);
    struct ggml_tensor *below = ggml_mul(ctx, ggml_relu(ctx, ggml_neg(ctx, seen)), in->penalty_repeat);
    struct ggml_tensor *repeated = ggml_sub(ctx, above, below);
    struct ggml_tensor *freq = ggml_mul(ctx, in->penalty_count, in->penalty_freq);
    struct ggml_tensor *present = ggml_mul(ctx, ggml_step(ctx, in->penalty_count), in->penalty_present);
    struct ggml_tensor *value = ggml_sub(ctx, ggml_sub(ctx, repeated, freq), present);
    struct ggml_tensor *room = ggml_pad(ctx, as_rows(ctx, logits), 0, (int)window, 0, 0);
    struct ggml_tensor *written = ggml_set_rows(ctx, room, as_rows(ctx, value), in->penalty_write);
    return ggml_view_1d(ctx, written, n, 0);
}

/* Builds one row's sample from `logits` (n_vocab floats in token-id order). */
struct ggml_tensor *pyspec_graph_sample_row(struct ggml_context *ctx, const graph_state *st,
                                      struct ggml_tensor *logits, const row_inputs *in) {
    struct ggml_tensor *uniform = in->uniform;
    if (in->penalty_count) logits = penalised(ctx, logits, in);
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

static struct ggml_tensor *new_input(struct ggml_context *ctx, enum ggml_type type, int64_t n,
                                     const char *what, int32_t row) {
    struct ggml_tensor *t = ggml_new_tensor_1d(ctx, type, n);
    ggml_format_name(t, "pyspec_%s_%d", what, row);
    ggml_set_input(t);
    return t;
}

/* The inputs one row needs: a uniform unless greedy, the penalty window when penalties are
 * on (an input no op reads is never allocated, so none is made for nothing). */
row_inputs pyspec_graph_make_inputs(struct ggml_context *ctx, const graph_state *st, int32_t row) {
    row_inputs in;
    memset(&in, 0, sizeof in);
    if (!st->greedy) in.uniform = new_input(ctx, GGML_TYPE_F32, 1, "uniform", row);
    if (st->penalties) {
        in.penalty_read = new_input(ctx, GGML_TYPE_I32, st->window, "penalty_read", row);
        in.penalty_write = new_input(ctx, GGML_TYPE_I64, st->window, "penalty_write", row);
        in.penalty_count = new_input(ctx, GGML_TYPE_F32, st->window, "penalty_count", row);
        in.penalty_repeat = new_input(ctx, GGML_TYPE_F32, 1, "penalty_repeat", row);
        in.penalty_freq = new_input(ctx, GGML_TYPE_F32, 1, "penalty_freq", row);
        in.penalty_present = new_input(ctx, GGML_TYPE_F32, 1, "penalty_present", row);
    }
    return in;
}

struct ggml_tensor *pyspec_graph_finite_check(struct ggml_context *ctx, struct ggml_tensor *logits) {
    return ggml_sum(ctx, ggml_sub(ctx, logits, logits));
}

struct ggml_tensor *pyspec_graph_logprobs(struct ggml_context *ctx, struct ggml_tensor *logits,
                                          struct ggml_tensor *token, int32_t n_top,
                                          struct ggml_tensor **top_ids) {
    const int64_t n = ggml_nelements(logits);
    struct ggml_tensor *row = ggml_reshape_2d(ctx, logits, n, 1);
    struct ggml_tensor *vmax = pick(ctx, logits, ggml_argmax(ctx, row));
    struct ggml_tensor *x = ggml_sub(ctx, logits, vmax); /* <= 0: exp cannot overflow */
    struct ggml_tensor *log_z = ggml_log(ctx, ggml_sum(ctx, ggml_exp(ctx, x)));
    struct ggml_tensor *out = ggml_sub(ctx, pick(ctx, x, token), log_z);
    *top_ids = NULL;
    if (n_top > 0) {
        struct ggml_tensor *top = ggml_cont(ctx, ggml_reshape_1d(ctx, ggml_top_k(ctx, row, n_top), n_top));
        out = ggml_concat(ctx, out, ggml_sub(ctx, pick(ctx, x, top), log_z), 0);
        *top_ids = top;
    }
    return out;
}
