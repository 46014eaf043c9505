/*
 * stage.h - a host sequence descriptor flattened into what the kernels read (used by api.cu
 * and by the host emulation test, tests/cuda_emu).
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

#endif /* PYSPEC_CUDA_STAGE_H */
