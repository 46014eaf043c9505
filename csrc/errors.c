/*
 * errors.c - status strings, error messages and parameter checks.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

const char *pyspec_status_string(int32_t status) {
    switch (status) {
    case PYSPEC_OK: return "ok";
    case PYSPEC_ERR_NULL: return "null pointer";
    case PYSPEC_ERR_SHAPE: return "bad shape or stride";
    case PYSPEC_ERR_PARAM: return "bad sampling parameter";
    case PYSPEC_ERR_TOKEN: return "token id out of range";
    case PYSPEC_ERR_LOGITS: return "bad logits (NaN, +inf, or no finite value in a row)";
    case PYSPEC_ERR_DRAFT_PROBS: return "bad draft probabilities";
    case PYSPEC_ERR_DTYPE: return "unknown dtype";
    case PYSPEC_ERR_NO_MEMORY: return "out of memory";
    case PYSPEC_ERR_CAPACITY: return "verifier capacity exceeded";
    case PYSPEC_ERR_CUDA: return "CUDA error";
    case PYSPEC_ERR_LLAMA: return "llama.cpp error";
    default: return "unknown status";
    }
}

pyspec_status pyspec_fail(pyspec_error *err, pyspec_status status, const char *fmt, ...) {
    if (err) {
        err->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

pyspec_status pyspec_check_params(const pyspec_sampling_params *p, const char *where,
                                  pyspec_error *err) {
    if (!p) return pyspec_fail(err, PYSPEC_ERR_NULL, "%s is NULL", where);
    if (isnan(p->temperature) || isinf(p->temperature))
        return pyspec_fail(err, PYSPEC_ERR_PARAM,
                           "%s.temperature must be finite (<= 0 means greedy), got %g", where,
                           (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return pyspec_fail(err, PYSPEC_ERR_PARAM,
                           "%s.top_p must be in (0, 1] (1 turns top-p off), got %g", where,
                           (double)p->top_p);
    if (isnan(p->min_p) || p->min_p > 1.0f)
        return pyspec_fail(err, PYSPEC_ERR_PARAM,
                           "%s.min_p must be <= 1 (<= 0 turns min-p off), got %g", where,
                           (double)p->min_p);
    return PYSPEC_OK;
}

pyspec_status pyspec_check_penalty_values(const pyspec_sampling_params *p, int64_t n_draft,
                                          const char *where, pyspec_error *err) {
    if (!pyspec_penalties_on(p)) return PYSPEC_OK;
    if (!(p->penalty_repeat >= 1.0f / PYSPEC_MAX_PENALTY && p->penalty_repeat <= PYSPEC_MAX_PENALTY))
        return pyspec_fail(err, PYSPEC_ERR_PARAM,
                           "%s.penalty_repeat must be in [1e-6, 1e6] (1 turns it off), got %g",
                           where, (double)p->penalty_repeat);
    if (!(fabsf(p->penalty_freq) <= PYSPEC_MAX_PENALTY) ||
        !(fabsf(p->penalty_present) <= PYSPEC_MAX_PENALTY))
        return pyspec_fail(err, PYSPEC_ERR_PARAM,
                           "%s.penalty_freq and penalty_present must be in [-1e6, 1e6], got %g "
                           "and %g", where, (double)p->penalty_freq, (double)p->penalty_present);
    if (p->n_penalty_history < 0)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "%s.n_penalty_history must be >= 0, got %lld",
                           where, (long long)p->n_penalty_history);
    if (p->n_penalty_history > 0 && !p->penalty_history)
        return pyspec_fail(err, PYSPEC_ERR_NULL, "%s.penalty_history is NULL but n_penalty_history is %lld",
                           where, (long long)p->n_penalty_history);
    int64_t window = p->penalty_last_n < 0 ? p->n_penalty_history + n_draft : p->penalty_last_n;
    if (window > PYSPEC_MAX_PENALTY_WINDOW)
        return pyspec_fail(err, PYSPEC_ERR_PARAM,
                           "%s: the penalty window holds %lld tokens; at most %d are supported",
                           where, (long long)window, PYSPEC_MAX_PENALTY_WINDOW);
    return PYSPEC_OK;
}

pyspec_status pyspec_check_penalties(const pyspec_sampling_params *p, int64_t n_vocab,
                                     int64_t n_draft, const char *where, pyspec_error *err) {
    pyspec_status st = pyspec_check_penalty_values(p, n_draft, where, err);
    if (st != PYSPEC_OK || !pyspec_penalties_on(p)) return st;
    int64_t used = p->penalty_last_n < 0 || p->penalty_last_n > p->n_penalty_history
                       ? p->n_penalty_history : p->penalty_last_n;
    for (int64_t j = p->n_penalty_history - used; j < p->n_penalty_history; ++j)
        if (p->penalty_history[j] < 0 || p->penalty_history[j] >= n_vocab)
            return pyspec_fail_history_token(err, where, j, p->penalty_history[j], n_vocab);
    return PYSPEC_OK;
}

pyspec_status pyspec_check_call_vocab(const void *verifier, int64_t max_vocab, int64_t n_vocab,
                                      int32_t dtype, pyspec_error *err) {
    if (!verifier) return pyspec_fail(err, PYSPEC_ERR_NULL, "verifier is NULL");
    if (dtype != PYSPEC_F32 && dtype != PYSPEC_F16 && dtype != PYSPEC_BF16)
        return pyspec_fail(err, PYSPEC_ERR_DTYPE, "dtype %d is not F32 (0), F16 (1) or BF16 (2)", dtype);
    if (n_vocab < 1 || n_vocab > INT32_MAX)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "n_vocab must be in [1, 2^31), got %lld",
                           (long long)n_vocab);
    if (n_vocab > max_vocab)
        return pyspec_fail(err, PYSPEC_ERR_CAPACITY,
                           "n_vocab %lld exceeds the verifier's max_vocab %lld",
                           (long long)n_vocab, (long long)max_vocab);
    return PYSPEC_OK;
}

pyspec_status pyspec_check_sequence_list(const pyspec_sequence *seqs, int64_t n_seqs,
                                         pyspec_error *err) {
    if (n_seqs < 0) return pyspec_fail(err, PYSPEC_ERR_SHAPE, "n_seqs must be >= 0, got %lld", (long long)n_seqs);
    if (n_seqs > 0 && !seqs) return pyspec_fail(err, PYSPEC_ERR_NULL, "seqs is NULL");
    return PYSPEC_OK;
}

void pyspec_name_sequence(int64_t idx, pyspec_sequence_names *names) {
    snprintf(names->seq, sizeof names->seq, "seqs[%lld]", (long long)idx);
    snprintf(names->params, sizeof names->params, "%s.params", names->seq);
}

pyspec_status pyspec_fail_in_sequence(pyspec_error *err, pyspec_status status, int64_t idx,
                                      const char *row_message) {
    pyspec_sequence_names names;
    pyspec_name_sequence(idx, &names);
    return pyspec_fail(err, status, "%s: %s", names.seq, row_message);
}

pyspec_status pyspec_check_sequence_shape(const pyspec_sequence *s, int64_t idx, int64_t n_vocab,
                                          int64_t max_draft, pyspec_error *err) {
    pyspec_sequence_names names;
    pyspec_name_sequence(idx, &names);
    const char *where = names.seq, *pwhere = names.params;
    if (!s->target_logits) return pyspec_fail(err, PYSPEC_ERR_NULL, "%s.target_logits is NULL", where);
    if (!s->out_tokens) return pyspec_fail(err, PYSPEC_ERR_NULL, "%s.out_tokens is NULL", where);
    if (!s->out_n_accepted) return pyspec_fail(err, PYSPEC_ERR_NULL, "%s.out_n_accepted is NULL", where);
    if (s->n_draft < 0 || s->n_draft > max_draft)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "%s.n_draft must be in [0, %lld], got %lld",
                           where, (long long)max_draft, (long long)s->n_draft);
    if (s->n_draft > 0 && s->logits_row_stride < n_vocab)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE,
                           "%s.logits_row_stride (%lld) is smaller than n_vocab (%lld)", where,
                           (long long)s->logits_row_stride, (long long)n_vocab);
    if (s->position < 0 || s->position > INT64_MAX - s->n_draft - 1)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE,
                           "%s.position must be in [0, 2^63 - 1 - n_draft] (row n_draft's "
                           "position must fit in 63 bits), got %lld with n_draft %lld", where,
                           (long long)s->position, (long long)s->n_draft);
    pyspec_status st = pyspec_check_params(&s->params, pwhere, err);
    if (st != PYSPEC_OK) return st;
    st = pyspec_check_penalty_values(&s->params, s->n_draft, pwhere, err);
    if (st != PYSPEC_OK) return st;
    if (s->n_draft > 0 && !s->draft_tokens)
        return pyspec_fail(err, PYSPEC_ERR_NULL, "%s.draft_tokens is NULL but n_draft is %lld",
                           where, (long long)s->n_draft);
    const pyspec_draft_probs *dp = s->draft_probs;
    if (dp && s->n_draft > 0) {
        if (!dp->probs) return pyspec_fail(err, PYSPEC_ERR_NULL, "%s.draft_probs->probs is NULL", where);
        if (!dp->tokens && dp->row_stride < n_vocab)
            return pyspec_fail(err, PYSPEC_ERR_SHAPE,
                               "%s.draft_probs is dense but its row_stride (%lld) is smaller "
                               "than n_vocab (%lld)",
                               where, (long long)dp->row_stride, (long long)n_vocab);
        if (dp->tokens && (dp->n_per_row < 0 || dp->row_stride < dp->n_per_row))
            return pyspec_fail(err, PYSPEC_ERR_SHAPE,
                               "%s.draft_probs is sparse with n_per_row %lld and row_stride "
                               "%lld (need 0 <= n_per_row <= row_stride)",
                               where, (long long)dp->n_per_row, (long long)dp->row_stride);
    }
    return PYSPEC_OK;
}

pyspec_status pyspec_fail_logits(pyspec_error *err, const char *where, int64_t row,
                                 const pyspec_bad_logit *bad) {
    if (bad->index < 0)
        return pyspec_fail(err, PYSPEC_ERR_LOGITS,
                           "%s row %lld has no finite logit (every entry is -inf)", where,
                           (long long)row);
    return pyspec_fail(err, PYSPEC_ERR_LOGITS,
                       "%s row %lld holds %s at vocabulary index %lld (only finite values and "
                       "-inf are allowed)",
                       where, (long long)row, isnan(bad->value) ? "NaN" : "+inf",
                       (long long)bad->index);
}

/* The common end of the token-range messages; `name` is the offending element. */
static pyspec_status fail_token_outside(pyspec_error *err, const char *name, int32_t token,
                                        int64_t n_vocab) {
    return pyspec_fail(err, PYSPEC_ERR_TOKEN, "%s = %d is outside [0, n_vocab = %lld)", name,
                       token, (long long)n_vocab);
}

pyspec_status pyspec_fail_history_token(pyspec_error *err, const char *where, int64_t index,
                                        int32_t token, int64_t n_vocab) {
    char name[160];
    snprintf(name, sizeof name, "%s.penalty_history[%lld]", where, (long long)index);
    return fail_token_outside(err, name, token, n_vocab);
}

pyspec_status pyspec_fail_draft_token(pyspec_error *err, const char *where, int64_t index,
                                      int32_t token, int64_t n_vocab) {
    char name[160];
    snprintf(name, sizeof name, "%s.draft_tokens[%lld]", where, (long long)index);
    return fail_token_outside(err, name, token, n_vocab);
}

pyspec_status pyspec_fail_sparse_token(pyspec_error *err, const char *where, int64_t row,
                                       int64_t entry, int32_t token, int64_t n_vocab) {
    char name[160];
    snprintf(name, sizeof name, "%s.draft_probs token [%lld][%lld]", where, (long long)row,
             (long long)entry);
    return fail_token_outside(err, name, token, n_vocab);
}

pyspec_status pyspec_fail_drafted_q(pyspec_error *err, int64_t row, int32_t token, double q) {
    return pyspec_fail(err, PYSPEC_ERR_DRAFT_PROBS,
                       "draft_probs row %lld gives the drafted token %d probability %g; it must "
                       "be in (0, 1]", (long long)row, token, q);
}

pyspec_status pyspec_fail_kept_q(pyspec_error *err, int64_t row, int32_t token, double q) {
    return pyspec_fail(err, PYSPEC_ERR_DRAFT_PROBS,
                       "draft_probs row %lld gives token %d probability %g; it must be in [0, 1]",
                       (long long)row, token, q);
}
