/*
 * internal.h - declarations shared by the CPU sources; not installed.
 */
#ifndef PYSPEC_INTERNAL_H
#define PYSPEC_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "pyspec.h"

/* The most draft tokens one sequence may carry, on either back end. */
#define PYSPEC_MAX_DRAFT (1 << 20)

/* Scratch of one worker thread: room for one candidate per vocabulary entry, so no row,
 * whatever its parameters, ever needs an allocation. */
typedef struct pyspec_scratch {
    int32_t *token;   /* candidates: max_vocab + 2 * PYSPEC_MAX_PENALTY_WINDOW slots */
    float   *logit;
    uint64_t *weight; /* fixed-point weights (draw.h), parallel to token/logit */
    float   *draft_q; /* all zeros between uses: sparse draft rows are scattered here */
    uint8_t *penalised; /* all zeros between uses: marks the penalised tokens of a row */
    int32_t *window;  /* PYSPEC_MAX_PENALTY_WINDOW: a row's penalty window, then counts */
    int32_t *window_count;
} pyspec_scratch;

/* The distinct tokens of a penalty window with their counts, and the penalty values. */
typedef struct pyspec_penalties {
    const int32_t *token;
    const int32_t *count;
    int64_t        n;
    float          repeat, freq, present;
} pyspec_penalties;

struct pyspec_verifier {
    int64_t         max_vocab;
    int32_t         max_threads;
    pyspec_scratch *scratch; /* max_threads entries */
};

/* A row's transformed distribution: the kept tokens with unnormalised fixed-point weights
 * pyspec_fixed_weight(pyspec_exp_portable((logit - max_logit) / temperature), shift)
 * (draw.h); every other token has probability 0. The arrays point into a pyspec_scratch and
 * are in no particular order (a draw reorders them). Integer weights make the total, every
 * probability and every draw independent of the order in which they are summed. */
typedef struct pyspec_row_dist {
    int32_t  *token;
    uint64_t *weight;
    int64_t   n;
    uint64_t  total;     /* sum of weight[0..n); > 0 (the maximum has weight 2^shift) */
    float     max_logit; /* maximum over the whole row */
    int       shift;     /* pyspec_weight_shift(n_vocab) */
} pyspec_row_dist;

/* Where the first invalid logit of a row was found. */
typedef struct pyspec_bad_logit {
    int64_t index; /* -1: the row has no finite logit at all */
    float   value;
} pyspec_bad_logit;

/* ---- row_scan.c: streaming passes over one vocabulary-wide row ---------------------- */

/* Reads element i of a row of the given dtype as float. */
float pyspec_load_logit(const void *row, int32_t dtype, int64_t i);

/* One pass: keeps the k largest finite logits (ties: the lower token id wins) in
 * token/logit[0..*n_out), in heap order, and checks every element (NaN and +inf are
 * errors). k >= 1. Returns PYSPEC_OK or PYSPEC_ERR_LOGITS (bad filled in). */
pyspec_status pyspec_scan_top_k(const void *row, int64_t n_vocab, int32_t dtype, int64_t k,
                                int32_t *token, float *logit, int64_t *n_out,
                                pyspec_bad_logit *bad);

/* One pass: copies every (token, logit) with logit >= threshold and logit > -inf, in token
 * order; returns the count. When exp_sum is not NULL it also receives
 * pyspec_row_fixed_sum(row, n_vocab, dtype, max_logit, shift). Assumes the row was
 * validated. */
int64_t pyspec_gather_at_least(const void *row, int64_t n_vocab, int32_t dtype,
                               float threshold, float max_logit, int shift, int32_t *token,
                               float *logit, uint64_t *exp_sum);

/* sum over the row of pyspec_fixed_weight(pyspec_exp_portable(logit - max_logit), shift),
 * as an integer: the raw softmax normaliser in fixed point (-inf contributes 0). SIMD where
 * available, bit-identical to the scalar sum. */
uint64_t pyspec_row_fixed_sum(const void *row, int64_t n_vocab, int32_t dtype, float max_logit,
                              int shift);

/* The largest probability of the row's softmax (max_logit: the row's maximum), from the
 * terms within PYSPEC_TOP_PROB_SPAN (pyspec.h) of it: overstated by at most n_vocab * exp(-span) of
 * itself. Assumes the row was validated. */
double pyspec_row_top_prob(const void *row, int64_t n_vocab, int32_t dtype, float max_logit);

/* out[i] = pyspec_fixed_weight(pyspec_exp_portable((logit[i] - max_logit) / temperature),
 * shift) for i < n; returns their sum. temperature 1 gives the untempered weights (the
 * division by 1 is exact). SIMD where available, bit-identical to the scalar formula. */
uint64_t pyspec_fixed_weights(const float *logit, int64_t n, float max_logit, float temperature,
                              int shift, uint64_t *out);

/* ---- distribution.c: transforms and draws -------------------------------------------- */

/* Shell sort of parallel (token, logit) arrays by rank (pyspec_ranks_before: higher logit
 * first, lower id on ties); `w` (may be NULL) is permuted along. n is usually tens. */
void pyspec_sort_by_rank(int32_t *token, float *logit, uint64_t *w, int64_t n);

/* Builds the transformed distribution of one row (penalties: NULL or the row's window).
 * Returns PYSPEC_OK or PYSPEC_ERR_LOGITS. */
pyspec_status pyspec_build_dist(const void *row, int64_t n_vocab, int32_t dtype,
                                const pyspec_sampling_params *params,
                                const pyspec_penalties *penalties, pyspec_scratch *scratch,
                                pyspec_row_dist *dist, pyspec_bad_logit *bad);

/* ---- penalties.c -------------------------------------------------------------------- */

/* Whether params turn penalties on. */
int pyspec_penalties_on(const pyspec_sampling_params *p);

/* The window of verify row `row` (the last penalty_last_n tokens of the history followed by
 * drafts[0..row)), counted into scratch; returns NULL when penalties are off. */
const pyspec_penalties *pyspec_row_penalties(const pyspec_sampling_params *p,
                                             const int32_t *drafts, int64_t row,
                                             pyspec_scratch *scratch, pyspec_penalties *out);

/* The penalised value of a logit of a token seen `count` times (llama.cpp's rule). */
float pyspec_penalise(float logit, int32_t count, const pyspec_penalties *pen);

/* Inverse-CDF draw from a distribution with the uniform u in [0, 1): the first token in
 * ascending token-id order whose running weight sum exceeds pyspec_draw_target(u, total).
 * Reorders dist's arrays. */
int32_t pyspec_dist_draw(pyspec_row_dist *dist, double u);

/* Probability of token under the distribution (0 outside the kept set). */
double pyspec_dist_prob(const pyspec_row_dist *dist, int32_t token);

/* ---- errors.c ------------------------------------------------------------------------ */

/* Records status and a printf-style message into err (if not NULL); returns status. */
pyspec_status pyspec_fail(pyspec_error *err, pyspec_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Checks sampling parameters; `where` prefixes the message ("seqs[2].params"). */
pyspec_status pyspec_check_params(const pyspec_sampling_params *params, const char *where,
                                  pyspec_error *err);

/* The penalty fields that need no token ids: values, history pointer, window limit. */
pyspec_status pyspec_check_penalty_values(const pyspec_sampling_params *params, int64_t n_draft,
                                          const char *where, pyspec_error *err);

/* Everything about a verify sequence that can be checked without reading its token ids
 * (which the CUDA back end holds in device memory): pointers, counts, strides, position,
 * parameters, the draft-probability layout. n_draft may be at most max_draft. */
pyspec_status pyspec_check_sequence_shape(const pyspec_sequence *s, int64_t idx, int64_t n_vocab,
                                          int64_t max_draft, pyspec_error *err);

/* Checks the penalty fields against the vocabulary and the window limit. */
pyspec_status pyspec_check_penalties(const pyspec_sampling_params *params, int64_t n_vocab,
                                     int64_t n_draft, const char *where, pyspec_error *err);

/* The checks at the start of a call that are the same for the CPU and CUDA verifiers: the
 * verifier exists (`verifier` is only compared with NULL; the caller reads its max_vocab),
 * the dtype is known, and n_vocab is in range and within the verifier's max_vocab. */
pyspec_status pyspec_check_call_vocab(const void *verifier, int64_t max_vocab, int64_t n_vocab,
                                      int32_t dtype, pyspec_error *err);

/* n_seqs >= 0, and seqs is not NULL when there are sequences. */
pyspec_status pyspec_check_sequence_list(const pyspec_sequence *seqs, int64_t n_seqs,
                                         pyspec_error *err);

/* How messages name sequence idx: "seqs[idx]" and its parameters "seqs[idx].params". */
typedef struct pyspec_sequence_names {
    char seq[64];
    char params[80];
} pyspec_sequence_names;
void pyspec_name_sequence(int64_t idx, pyspec_sequence_names *names);

/* Prefixes a row's message with the sequence it belongs to ("seqs[idx]: ..."): a failure
 * found while resolving rows, after the whole call was checked. */
pyspec_status pyspec_fail_in_sequence(pyspec_error *err, pyspec_status status, int64_t idx,
                                      const char *row_message);

/* The messages of failures that both back ends find, each worded once here. The CPU path
 * finds them itself; the CUDA back end gets them from the device's error record (api.cu).
 * `where` names the owner of the field: "seqs[2]" (draft tokens) or "seqs[2].params"
 * (penalty history). */
pyspec_status pyspec_fail_history_token(pyspec_error *err, const char *where, int64_t index,
                                        int32_t token, int64_t n_vocab);
pyspec_status pyspec_fail_draft_token(pyspec_error *err, const char *where, int64_t index,
                                      int32_t token, int64_t n_vocab);
pyspec_status pyspec_fail_sparse_token(pyspec_error *err, const char *where, int64_t row,
                                       int64_t entry, int32_t token, int64_t n_vocab);

/* Describes a bad logit for an error message. */
pyspec_status pyspec_fail_logits(pyspec_error *err, const char *where, int64_t row,
                                 const pyspec_bad_logit *bad);

/* The drafted token's own q is not in (0, 1] (row of the draft probabilities). */
pyspec_status pyspec_fail_drafted_q(pyspec_error *err, int64_t row, int32_t token, double q);

/* A token of the target's kept set has a q outside [0, 1] (met on a rejection). */
pyspec_status pyspec_fail_kept_q(pyspec_error *err, int64_t row, int32_t token, double q);

#endif /* PYSPEC_INTERNAL_H */
