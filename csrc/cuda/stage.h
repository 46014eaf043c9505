/*
 * stage.h - a host sequence descriptor flattened into what the kernels read, and how a
 * call's rows are split into chunks (used by api.cu and by the host emulation test,
 * tests/cuda_emu).
 */
#ifndef PYSPEC_CUDA_STAGE_H
#define PYSPEC_CUDA_STAGE_H

#include <math.h>
#include <string.h>

#include "cuda_internal.h"

static inline void pyspec_cuda_stage_seq(pyspec_cuda_seq *d, const pyspec_sequence *s,
                                         int64_t row_base) {
    const pyspec_sampling_params *p = &s->params;
    const pyspec_draft_probs *dp = s->n_draft > 0 ? s->draft_probs : NULL;
    memset(d, 0, sizeof *d);
    d->logits = s->target_logits;
    d->row_stride = s->logits_row_stride;
    d->draft = s->draft_tokens;
    d->n_draft = s->n_draft;
    d->q_probs = dp ? dp->probs : NULL;
    d->q_tokens = dp ? dp->tokens : NULL;
    d->q_stride = dp ? dp->row_stride : 0;
    d->q_n = dp ? dp->n_per_row : 0;
    d->temperature = p->temperature;
    d->top_k = p->top_k;
    d->top_p = p->top_p;
    d->min_p = p->min_p;
    d->log_min_p = p->min_p > 0.0f ? logf(p->min_p) : 0.0f;
    d->seed = p->seed;
    d->pen_on = pyspec_penalties_on(p);
    d->pen_last_n = p->penalty_last_n;
    d->pen_repeat = p->penalty_repeat;
    d->pen_freq = p->penalty_freq;
    d->pen_present = p->penalty_present;
    d->history = p->penalty_history;
    d->n_history = d->pen_on ? p->n_penalty_history : 0;
    d->position = s->position;
    d->out_tokens = s->out_tokens;
    d->out_logprobs = s->out_logprobs;
    d->out_top_probs = s->out_top_probs;
    d->out_n_accepted = s->out_n_accepted;
    d->row_base = row_base;
}

/* The top-k of a sequence whose rows take the split short list: sampled, top-k on and at
 * most PYSPEC_CUDA_CAND_MAX (the rows kernel's short-list rule); 0 otherwise. The kernels'
 * split_short_list() is the same test. */
static inline int32_t pyspec_cuda_listed_top_k(const pyspec_sequence *s, int64_t n_vocab) {
    const pyspec_sampling_params *p = &s->params;
    if (!(p->temperature > 0.0f) || p->top_k <= 0 || p->top_k >= n_vocab) return 0;
    return p->top_k <= PYSPEC_CUDA_CAND_MAX ? p->top_k : 0;
}

/* The split of a call asking for `want` chunks per row: the list length is the largest
 * listed top-k, and the chunks are cut so that a row's lists fit PYSPEC_CUDA_UNION_MAX. */
static inline pyspec_cuda_split pyspec_cuda_split_rows(const pyspec_sequence *seqs, int64_t n_seqs,
                                                       int64_t n_vocab, int64_t want) {
    pyspec_cuda_split split = { 1, 0 };
    if (want < 2) return split;
    for (int64_t s = 0; s < n_seqs; ++s) {
        const int32_t k = pyspec_cuda_listed_top_k(&seqs[s], n_vocab);
        if (k > split.list_len) split.list_len = k;
    }
    if (want > PYSPEC_CUDA_MAX_CHUNKS) want = PYSPEC_CUDA_MAX_CHUNKS;
    if (split.list_len > 0 && want > PYSPEC_CUDA_UNION_MAX / split.list_len)
        want = PYSPEC_CUDA_UNION_MAX / split.list_len;
    if (want < 2) split.list_len = 0;
    split.chunks = want < 2 ? 1 : (int32_t)want;
    return split;
}

/* Whether a split of total_rows rows fits a verifier's workspace on `sms` multiprocessors:
 * PYSPEC_CUDA_SPLIT_BLOCKS(sms) chunk records, sms * PYSPEC_CUDA_UNION_MAX listed candidates,
 * and each row's union within PYSPEC_CUDA_UNION_MAX. */
static inline int pyspec_cuda_split_fits(pyspec_cuda_split split, int64_t total_rows, int32_t sms) {
    if (split.chunks <= 1) return 1;
    return total_rows * split.chunks <= PYSPEC_CUDA_SPLIT_BLOCKS(sms) &&
           (int64_t)split.chunks * split.list_len <= PYSPEC_CUDA_UNION_MAX &&
           total_rows * split.chunks * split.list_len <= (int64_t)sms * PYSPEC_CUDA_UNION_MAX;
}

/* The chunks a device with `sms` multiprocessors wants per row: about two blocks per
 * multiprocessor, none when the rows alone fill it, none shorter than PYSPEC_CUDA_MIN_CHUNK. */
static inline int64_t pyspec_cuda_wanted_chunks(int64_t total_rows, int64_t n_vocab, int32_t sms) {
    if (total_rows <= 0 || total_rows >= sms) return 1;
    int64_t want = (2 * (int64_t)sms + total_rows - 1) / total_rows;
    const int64_t by_length = n_vocab / PYSPEC_CUDA_MIN_CHUNK;
    return want < by_length ? want : by_length;
}

#endif /* PYSPEC_CUDA_STAGE_H */
