/*
 * distribution.c - llama.cpp's sampling transforms on the candidates of one row, and draws.
 *
 * top-k, top-p and min-p each keep a prefix of the tokens sorted by descending logit, and
 * each keeps the maximum. Their composition in llama.cpp's order (top-k; top-p normalised
 * over the top-k survivors; min-p relative to the maximum; all on untempered logits) is
 * therefore the shortest of the three prefixes. With top-k on, everything after the
 * streaming pass works on at most k candidates; with top-k off, a gather pass collects the
 * min-p survivors (every finite token when min-p is off too).
 *
 * Weights are draw.h's fixed-point integers of pyspec_exp_portable, so top-p's cut, every
 * probability and every draw are exact functions of the logits that a GPU back end
 * reproduces bit for bit; draws walk the kept tokens in ascending token-id order.
 */
#include <float.h>
#include <math.h>

#include "draw.h"
#include "internal.h"
#include "rules.h"


void pyspec_sort_by_rank(int32_t *token, float *logit, uint64_t *w, int64_t n) {
    int64_t gap = 1;
    while (gap < n / 3) gap = 3 * gap + 1;
    for (; gap >= 1; gap /= 3) {
        for (int64_t i = gap; i < n; ++i) {
            float l = logit[i];
            uint64_t x = w ? w[i] : 0;
            int32_t t = token[i];
            int64_t j = i;
            while (j >= gap && pyspec_ranks_before(l, t, logit[j - gap], token[j - gap])) {
                logit[j] = logit[j - gap];
                token[j] = token[j - gap];
                if (w) w[j] = w[j - gap];
                j -= gap;
            }
            logit[j] = l;
            token[j] = t;
            if (w) w[j] = x;
        }
    }
}

static inline void swap3(int32_t *token, float *logit, uint64_t *w, int64_t a, int64_t b) {
    int32_t t = token[a]; token[a] = token[b]; token[b] = t;
    float l = logit[a]; logit[a] = logit[b]; logit[b] = l;
    uint64_t x = w[a]; w[a] = w[b]; w[b] = x;
}

/* Top-p over unsorted candidates with fixed-point untempered weights w: reorders them so
 * that the first m are the m best by rank, m being the smallest count whose summed weight
 * reaches top_p of z (pyspec_top_p_reached), and returns m. Expected linear time: a
 * three-way quickselect on mass, then a sort of the short range where the cut falls. The
 * sums are exact integers, so the cut is the one a walk in rank order finds. */
static int64_t nucleus_select(int32_t *token, float *logit, uint64_t *w, int64_t n, float top_p,
                              uint64_t z) {
    int64_t lo = 0, hi = n; /* [0, lo) is inside the nucleus, [hi, n) outside */
    uint64_t acc = 0;       /* weight of [0, lo) */
    while (hi - lo > 32) {
        float a = logit[lo], b = logit[lo + (hi - lo) / 2], c = logit[hi - 1];
        float pivot = fmaxf(fminf(a, b), fminf(fmaxf(a, b), c)); /* median of three */
        int64_t gt = lo, i = lo, lt = hi; /* [lo,gt) > pivot, [gt,lt) == pivot, [lt,hi) < */
        while (i < lt) {
            if (logit[i] > pivot) swap3(token, logit, w, i++, gt++);
            else if (logit[i] < pivot) swap3(token, logit, w, i, --lt);
            else ++i;
        }
        uint64_t mass_gt = 0, mass_eq = 0;
        for (int64_t j = lo; j < gt; ++j) mass_gt += w[j];
        if (pyspec_top_p_reached(acc + mass_gt, top_p, z)) { hi = gt; continue; }
        for (int64_t j = gt; j < lt; ++j) mass_eq += w[j];
        acc += mass_gt;
        if (pyspec_top_p_reached(acc + mass_eq, top_p, z)) { /* cut among equal logits */
            lo = gt;
            hi = lt;
            break;
        }
        acc += mass_eq;
        lo = lt;
    }
    pyspec_sort_by_rank(token + lo, logit + lo, w + lo, hi - lo);
    for (int64_t j = lo; j < hi; ++j) {
        acc += w[j];
        if (pyspec_top_p_reached(acc, top_p, z)) return j + 1;
    }
    return hi; /* the candidates never reach top_p of z (z counts tokens min-p dropped) */
}

/* Applies top-p, min-p and temperature to the candidates of one row and fills dist.
 * sorted != 0: the candidates are the top-k survivors in rank order; top-p normalises over
 * them and min-p is still to apply. sorted == 0: the candidates are the min-p survivors in
 * any order, and top-p normalises over the whole row (row_z, the row's fixed-point sum). */
static void finish_dist(int32_t *token, float *logit, uint64_t *w, int64_t n, int sorted,
                        float max_logit, uint64_t row_z, float log_min_p, int shift,
                        const pyspec_sampling_params *p, pyspec_row_dist *dist) {
    if (p->top_p < 1.0f) {
        /* Untempered weights exp(logit - max) in fixed point. */
        uint64_t z = pyspec_fixed_weights(logit, n, max_logit, 1.0f, shift, w);
        if (sorted) {
            uint64_t cum = 0;
            for (int64_t i = 0; i < n; ++i) {
                cum += w[i];
                if (pyspec_top_p_reached(cum, p->top_p, z)) { n = i + 1; break; }
            }
        } else {
            n = nucleus_select(token, logit, w, n, p->top_p, row_z);
        }
    }
    if (sorted && p->min_p > 0.0f) {
        const float min_logit = pyspec_min_p_threshold(max_logit, log_min_p);
        int64_t keep = 1;
        while (keep < n && logit[keep] >= min_logit) ++keep;
        n = keep;
    }
    /* Divide, not multiply by 1/T: for a subnormal T, 1/T overflows to inf and 0 * inf is
     * NaN at the maximum, while 0 / T is 0 and the others go to -inf, i.e. greedy. The
     * maximum gets exp(0) = 1, i.e. 2^shift, so the total is never 0. */
    dist->token = token;
    dist->weight = w;
    dist->n = n;
    dist->total = pyspec_fixed_weights(logit, n, max_logit, p->temperature, shift, w);
    dist->max_logit = max_logit;
    dist->shift = shift;
}

/* Penalties on a candidate list: drops the raw values of penalised tokens (marked in
 * `penalised`) and appends their penalised values; tokens whose logit is -inf stay out.
 * Returns the new count. */
static int64_t apply_penalties(const void *row, int32_t dtype, const pyspec_penalties *pen,
                               const uint8_t *penalised, int32_t *token, float *logit, int64_t n) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (penalised[token[i]]) continue;
        token[m] = token[i];
        logit[m] = logit[i];
        ++m;
    }
    for (int64_t j = 0; j < pen->n; ++j) {
        float raw = pyspec_load_logit(row, dtype, pen->token[j]);
        if (!(raw > -INFINITY)) continue;
        float l = pyspec_penalise(raw, pen->count[j], pen);
        if (l > FLT_MAX) l = FLT_MAX; /* a tiny repeat penalty must not make +inf */
        token[m] = pen->token[j];
        logit[m] = l;
        ++m;
    }
    return m;
}

/* Index of the best candidate by rank (max logit, lowest id on ties). */
static int64_t best_by_rank(const int32_t *token, const float *logit, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (pyspec_ranks_before(logit[i], token[i], logit[best], token[best])) best = i;
    return best;
}

/* The top-k-off gather when penalties are on: min-p survivors of the penalised row, and the
 * penalised row's fixed-point softmax normaliser (relative to max_logit) when asked. The
 * normaliser is the raw row's sum with the penalised tokens' raw terms swapped for their
 * penalised ones: integer sums, so that is exactly the sum over the penalised row. */
static int64_t gather_penalised(const void *row, int64_t n_vocab, int32_t dtype, float threshold,
                                float max_logit, int shift, const pyspec_penalties *pen,
                                const uint8_t *penalised, int32_t *token, float *logit,
                                uint64_t *exp_sum) {
    int64_t n = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
        if (penalised[i]) continue;
        float x = pyspec_load_logit(row, dtype, i);
        if (!(x > -INFINITY)) continue;
        if (x >= threshold) {
            token[n] = (int32_t)i;
            logit[n] = x;
            ++n;
        }
    }
    int64_t first_pen = n;
    n = apply_penalties(row, dtype, pen, penalised, token + first_pen, logit + first_pen, 0) + first_pen;
    if (exp_sum) {
        uint64_t z = pyspec_row_fixed_sum(row, n_vocab, dtype, max_logit, shift);
        for (int64_t j = 0; j < pen->n; ++j) {
            const float raw = pyspec_load_logit(row, dtype, pen->token[j]);
            z -= pyspec_fixed_weight(pyspec_exp_portable(raw - max_logit), shift);
        }
        for (int64_t i = first_pen; i < n; ++i)
            z += pyspec_fixed_weight(pyspec_exp_portable(logit[i] - max_logit), shift);
        *exp_sum = z;
    }
    int64_t kept = first_pen;
    for (int64_t i = first_pen; i < n; ++i) {
        if (logit[i] >= threshold) {
            token[kept] = token[i];
            logit[kept] = logit[i];
            ++kept;
        }
    }
    return kept;
}

pyspec_status pyspec_build_dist(const void *row, int64_t n_vocab, int32_t dtype,
                                const pyspec_sampling_params *p, const pyspec_penalties *pen,
                                pyspec_scratch *scratch, pyspec_row_dist *dist,
                                pyspec_bad_logit *bad) {
    int32_t *token = scratch->token;
    float *logit = scratch->logit;
    uint64_t *w = scratch->weight;
    const int shift = pyspec_weight_shift(n_vocab);
    /* logf once per row, here on the host; a device back end receives it precomputed. */
    const float log_min_p = p->min_p > 0.0f ? logf(p->min_p) : 0.0f;
    int64_t n = 0;
    const int greedy = !(p->temperature > 0.0f);
    const int use_top_k = !greedy && p->top_k > 0 && p->top_k < n_vocab;
    /* One extra candidate per penalised token: after their raw values are dropped, the
     * k best of the others are still there. */
    const int64_t n_pen = pen ? pen->n : 0;
    int64_t k = (use_top_k ? p->top_k : 1) + n_pen;
    if (k > n_vocab) k = n_vocab;

    /* The one streaming pass: validates the row and keeps its k best raw logits. */
    pyspec_status st = pyspec_scan_top_k(row, n_vocab, dtype, k, token, logit, &n, bad);
    if (st != PYSPEC_OK) return st;
    if (pen) {
        for (int64_t j = 0; j < n_pen; ++j) scratch->penalised[pen->token[j]] = 1;
        n = apply_penalties(row, dtype, pen, scratch->penalised, token, logit, n);
    }

    if (greedy) {
        int64_t b = best_by_rank(token, logit, n);
        token[0] = token[b];
        logit[0] = logit[b];
        w[0] = 1;
        dist->token = token;
        dist->weight = w;
        dist->n = 1;
        dist->total = 1;
        dist->max_logit = logit[0];
        dist->shift = shift;
    } else if (use_top_k) {
        pyspec_sort_by_rank(token, logit, NULL, n);
        if (n > p->top_k) n = p->top_k;
        finish_dist(token, logit, w, n, 1, logit[0], 0, log_min_p, shift, p, dist);
    } else { /* top-k off: gather the min-p survivors (a second pass) */
        float max_logit = logit[best_by_rank(token, logit, n)];
        float threshold = p->min_p > 0.0f ? pyspec_min_p_threshold(max_logit, log_min_p) : -INFINITY;
        uint64_t row_z = 0;
        uint64_t *want_sum = p->top_p < 1.0f ? &row_z : NULL;
        if (pen)
            n = gather_penalised(row, n_vocab, dtype, threshold, max_logit, shift, pen,
                                 scratch->penalised, token, logit, want_sum);
        else
            n = pyspec_gather_at_least(row, n_vocab, dtype, threshold, max_logit, shift, token,
                                       logit, want_sum);
        finish_dist(token, logit, w, n, 0, max_logit, row_z, log_min_p, shift, p, dist);
    }
    if (pen)
        for (int64_t j = 0; j < n_pen; ++j) scratch->penalised[pen->token[j]] = 0;
    return PYSPEC_OK;
}

/* The index of the first candidate in ascending token-id order at which the running sum of
 * w exceeds target (target < the sum of w[0..n), token ids distinct). Reorders the arrays.
 * Bisects the id range rather than sorting: each round splits the candidates at the middle
 * id of their range, keeps the side where the target falls and adds the other side's mass
 * when it lies below; at most 31 rounds of linear work, and usually a halving each round,
 * so O(n) in practice without an O(n log n) sort of a whole kept vocabulary. The last few
 * candidates are sorted by id and walked. */
static int64_t draw_in_id_order(int32_t *token, uint64_t *w, int64_t n, uint64_t target) {
    int64_t lo = 0, hi = n;
    uint64_t before = 0; /* mass of the candidates with ids below those in [lo, hi) */
    int32_t id_min = INT32_MAX, id_max = INT32_MIN;
    if (n > 32)
        for (int64_t i = 0; i < n; ++i) {
            if (token[i] < id_min) id_min = token[i];
            if (token[i] > id_max) id_max = token[i];
        }
    /* Invariant: ids in [lo, hi) span [id_min, id_max] exactly, and
     * before <= target < before + mass of [lo, hi). */
    while (hi - lo > 32) {
        const int32_t mid = id_min + (int32_t)(((int64_t)id_max - id_min) / 2);
        /* Partition: ids <= mid to the front (non-empty: holds id_min), the rest behind
         * (non-empty: holds id_max > mid, ids being distinct). */
        int64_t i = lo, j = hi;
        uint64_t mass_low = 0;
        int32_t low_max = id_min, high_min = id_max;
        while (i < j) {
            if (token[i] <= mid) {
                mass_low += w[i];
                if (token[i] > low_max) low_max = token[i];
                ++i;
            } else {
                --j;
                if (token[i] < high_min) high_min = token[i];
                int32_t t = token[i]; token[i] = token[j]; token[j] = t;
                uint64_t x = w[i]; w[i] = w[j]; w[j] = x;
            }
        }
        if (target < before + mass_low) {
            hi = i;
            id_max = low_max;
        } else {
            before += mass_low;
            lo = i;
            id_min = high_min;
        }
    }
    for (int64_t i = lo + 1; i < hi; ++i) { /* insertion sort by id */
        int32_t t = token[i];
        uint64_t x = w[i];
        int64_t j = i;
        while (j > lo && token[j - 1] > t) {
            token[j] = token[j - 1];
            w[j] = w[j - 1];
            --j;
        }
        token[j] = t;
        w[j] = x;
    }
    return lo + pyspec_fixed_inverse_cdf(w + lo, hi - lo, target - before);
}

int32_t pyspec_dist_draw(pyspec_row_dist *dist, double u) {
    const uint64_t target = pyspec_draw_target(u, dist->total);
    return dist->token[draw_in_id_order(dist->token, dist->weight, dist->n, target)];
}

double pyspec_dist_prob(const pyspec_row_dist *dist, int32_t token) {
    for (int64_t i = 0; i < dist->n; ++i)
        if (dist->token[i] == token) return pyspec_fixed_prob(dist->weight[i], dist->total);
    return 0.0;
}
