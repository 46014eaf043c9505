/*
 * rules.h - the decision rules of the verifier, shared by the CPU and CUDA back ends:
 * candidate ranking, llama.cpp's penalty and min-p arithmetic, the acceptance test of
 * modified rejection sampling, the residual and the inverse-CDF draw. Keeping them in one
 * host/device header is what lets both back ends emit the same tokens.
 */
#ifndef PYSPEC_RULES_H
#define PYSPEC_RULES_H

#include <math.h>
#include <stdint.h>

#include "hostdevice.h"

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
    return l - (float)count * freq - (float)(count > 0) * present;
}

/* min-p keeps logits >= max + log(min_p), computed in float as llama.cpp does. */
PYSPEC_HD float pyspec_min_p_threshold(float max_logit, float min_p) {
    return max_logit + logf(min_p);
}

/* Modified rejection sampling's test: accept draft x with probability min(1, p(x)/q(x)),
 * i.e. when u * q(x) < p(x) for u uniform in [0, 1). q(x) > 0 is checked by the caller. */
PYSPEC_HD int pyspec_accepts(double u, double q_x, double p_x) {
    return u * q_x < p_x;
}

/* One entry of the residual max(0, p - q), from an unnormalised target weight. */
PYSPEC_HD float pyspec_residual_weight(float weight, double total, double q) {
    double r = (double)weight / total - q;
    return r > 0.0 ? (float)r : 0.0f;
}

/* Inverse CDF over n weights in the given order (double accumulation): the index where the
 * running sum first exceeds u * total; the last positive weight if rounding runs past it. */
PYSPEC_HD int64_t pyspec_inverse_cdf(const float *weight, int64_t n, double total, double u) {
    double target = u * total, cum = 0.0;
    int64_t last_positive = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (weight[i] <= 0.0f) continue;
        cum += weight[i];
        last_positive = i;
        if (target < cum) return i;
    }
    return last_positive;
}

#endif /* PYSPEC_RULES_H */
