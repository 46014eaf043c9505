/*
 * rules.h - the decision rules of the verifier, shared by the CPU and CUDA back ends:
 * candidate ranking, llama.cpp's penalty and min-p arithmetic, top-p's cut, the acceptance
 * test of modified rejection sampling and the inverse-CDF walk. Keeping them in one
 * host/device header (with draw.h's weights and draw target) is what lets both back ends
 * emit the same tokens.
 */
#ifndef PYSPEC_RULES_H
#define PYSPEC_RULES_H

#include <math.h>
#include <stdint.h>

#include "hostdevice.h"
#include "pyspec.h"

#define PYSPEC_FLOAT_MAX 3.40282346638528859811704183484516925e+38f

/* The largest probability a draft row may give one token (pyspec.h's limits: 1.0001). */
#define PYSPEC_DRAFT_Q_MAX ((float)(1.0 + PYSPEC_DRAFT_Q_SLACK_PPM * 1e-6))

/* Whether q is usable as a draft probability: in [0, PYSPEC_DRAFT_Q_MAX] (NaN is not). */
PYSPEC_HD int pyspec_draft_q_in_range(float q) {
    return q >= 0.0f && q <= PYSPEC_DRAFT_Q_MAX;
}

/* Rank order of candidates: higher logit first, ties to the lower token id. A total order,
 * so no result depends on the order in which candidates were found. */
PYSPEC_HD int pyspec_ranks_before(float la, int32_t ta, float lb, int32_t tb) {
    return la > lb || (la == lb && ta < tb);
}

/* llama.cpp's penalties sampler: multiply non-positive logits and divide positive ones by
 * `repeat` (so a penalty above 1 always lowers the logit), then subtract the frequency and
 * presence terms. In float, as llama.cpp. */
PYSPEC_HD float pyspec_penalised_logit(float logit, int32_t count, float repeat, float freq,
                                       float present) {
    float l = logit <= 0.0f ? logit * repeat : logit / repeat;
    l = l - (float)count * freq - (float)(count > 0) * present;
    /* Saturate: a finite logit stays finite, so a penalty can never make a row NaN or put
     * +inf in it (a finite logit near FLT_MAX divided by a repeat penalty < 1 would
     * overflow). A masked (-inf) logit stays masked. The parameter bounds
     * (PYSPEC_MAX_PENALTY) keep count * freq finite, so no inf - inf can arise here. */
    if (!(l <= PYSPEC_FLOAT_MAX)) l = PYSPEC_FLOAT_MAX;
    if (l < -PYSPEC_FLOAT_MAX && logit >= -PYSPEC_FLOAT_MAX) l = -PYSPEC_FLOAT_MAX;
    return l;
}

/* min-p keeps logits >= max + log(min_p), computed in float as llama.cpp does. log_min_p is
 * logf(min_p), computed once on the host (libm's logf and CUDA's may differ in the last bit,
 * so the device never evaluates it itself). */
PYSPEC_HD float pyspec_min_p_threshold(float max_logit, float log_min_p) {
    return max_logit + log_min_p;
}

/* top-p's cut: the nucleus is the shortest prefix in rank order whose summed fixed-point
 * untempered weight `cum` (draw.h) reaches top_p of `z`, the sum over the top-k survivors
 * (top-k on) or over the whole row (top-k off). Monotone in cum. */
PYSPEC_HD int pyspec_top_p_reached(uint64_t cum, float top_p, uint64_t z) {
    return (double)cum >= (double)top_p * (double)z;
}

/* The probability of a token of fixed-point weight `weight` in a distribution of total
 * `total` (> 0). */
PYSPEC_HD double pyspec_fixed_prob(uint64_t weight, uint64_t total) {
    return (double)weight / (double)total;
}

/* Modified rejection sampling's test: accept draft x with probability min(1, p(x)/q(x)),
 * i.e. when u * q(x) < p(x) for u uniform in [0, 1). q(x) > 0 is checked by the caller. */
PYSPEC_HD int pyspec_accepts(double u, double q_x, double p_x) {
    return u * q_x < p_x;
}

/* The inverse-CDF walk over n fixed-point weights given in ascending token-id order: the
 * index at which the running sum first exceeds target (pyspec_draw_target(u, total), which
 * is < total, so the walk always ends there when the weights sum to total). Integer sums:
 * no rounding, so the same token for any back end. n - 1 if the weights fall short. */
PYSPEC_HD int64_t pyspec_fixed_inverse_cdf(const uint64_t *weight, int64_t n, uint64_t target) {
    uint64_t cum = 0;
    for (int64_t i = 0; i < n; ++i) {
        cum += weight[i];
        if (cum > target) return i;
    }
    return n - 1;
}

#endif /* PYSPEC_RULES_H */
