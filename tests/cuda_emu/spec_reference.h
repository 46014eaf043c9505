/*
 * spec_reference.h - the portable-draw rules (csrc/draw.h) implemented as plainly as
 * possible, one row at a time, for tests: sort the candidates by rank, cut the top-k,
 * top-p and min-p prefixes, fixed-point weights, draws in token-id order, modified
 * rejection sampling with the fixed-point residual. Host C++17; used by the emulated-kernel
 * test (tests/cuda_emu) and by benchmarks/device/device_check on a GPU.
 *
 * What it does NOT check independently: it calls the library's own arithmetic primitives
 * (rules.h / draw.h: pyspec_exp_portable, pyspec_fixed_weight, pyspec_draw_target,
 * pyspec_accepts, pyspec_fixed_residual, pyspec_penalised_logit), so a bug inside one of
 * them passes the emulation and the device check alike. Those primitives are checked
 * elsewhere, independently: bit for bit against tests/reference.py (its own numpy
 * implementation of the same fixed-point rules, tests/test_draw_order.py), against a table
 * of known exp answers (tests/c/test_draw.c, tests/test_draw_order.py), and statistically
 * (tests/test_exactness.py, tests/test_acceptance_rate.py). What this file adds is an
 * independent implementation of everything around them: ranking, the top-k / top-p / min-p
 * cuts, penalty windows, the row order of acceptance, and which error a call reports.
 */
#ifndef PYSPEC_SPEC_REFERENCE_H
#define PYSPEC_SPEC_REFERENCE_H

#include <float.h>
#include <math.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "draw.h"
#include "philox.h"
#include "pyspec.h"
#include "rules.h"

static inline float ref_half_to_float(uint16_t h) { /* exact binary16 -> binary32 */
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 31, man = h & 1023;
    uint32_t u;
    if (exp == 31) u = sign | 0x7f800000u | (man << 13);
    else if (exp == 0) { float f = ldexpf((float)man, -24); return sign ? -f : f; }
    else u = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline bool ref_penalties_on(const pyspec_sampling_params &p) {
    return p.penalty_last_n != 0 &&
           !(p.penalty_repeat == 1.0f && p.penalty_freq == 0.0f && p.penalty_present == 0.0f);
}

static inline float ref_load(const void *row, int32_t dtype, int64_t t) {
    if (dtype == PYSPEC_F32) return ((const float *)row)[t];
    uint16_t b = ((const uint16_t *)row)[t];
    if (dtype == PYSPEC_F16) return ref_half_to_float(b);
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The error a row reports: which check, at which vocabulary index (logits) or token (q). */
enum RefErrKind { REF_ERR_NONE = 0, REF_ERR_LOGIT, REF_ERR_NO_FINITE, REF_ERR_DRAFTED_Q, REF_ERR_Q };
struct RefRow {
    int status = 0; int32_t token = -1; bool stops = false;
    int err_kind = REF_ERR_NONE; int64_t err_index = -1; int32_t err_token = -1;
};

static inline int32_t ref_draw(const std::vector<uint64_t> &w, uint64_t total, double u) {
    const uint64_t target = pyspec_draw_target(u, total);
    uint64_t cum = 0;
    for (size_t t = 0; t < w.size(); ++t) {
        cum += w[t];
        if (w[t] && cum > target) return (int32_t)t;
    }
    return -2;
}

static inline float ref_q(const pyspec_draft_probs *dp, int64_t i, int32_t t) {
    const float *probs = dp->probs + i * dp->row_stride;
    if (!dp->tokens) return probs[t];
    const int32_t *tok = dp->tokens + i * dp->row_stride;
    float v = 0.0f;
    for (int64_t j = 0; j < dp->n_per_row; ++j) if (tok[j] == t) v += probs[j];
    return v;
}

static inline RefRow ref_row(const pyspec_sequence &s, int64_t i, int64_t V, int32_t dtype) {
    RefRow out;
    const size_t elem = dtype == PYSPEC_F32 ? 4 : 2;
    const void *row = (const char *)s.target_logits + (size_t)(i * s.logits_row_stride) * elem;
    const pyspec_sampling_params &p = s.params;
    std::map<int32_t, int32_t> count;
    if (ref_penalties_on(p)) {
        const int64_t total = p.n_penalty_history + i;
        int64_t len = p.penalty_last_n < 0 ? total : std::min<int64_t>(total, p.penalty_last_n);
        for (int64_t j = total - len; j < total; ++j)
            ++count[j < p.n_penalty_history ? p.penalty_history[j] : s.draft_tokens[j - p.n_penalty_history]];
    }
    std::vector<float> l(V);
    for (int64_t t = 0; t < V; ++t) {
        float raw = ref_load(row, dtype, t);
        if (std::isnan(raw) || raw == INFINITY) {
            out.status = PYSPEC_ERR_LOGITS, out.err_kind = REF_ERR_LOGIT, out.err_index = t;
            return out;
        }
        auto c = count.find((int32_t)t);
        if (c != count.end() && raw > -INFINITY) {
            raw = pyspec_penalised_logit(raw, c->second, p.penalty_repeat, p.penalty_freq, p.penalty_present);
            if (raw > FLT_MAX) raw = FLT_MAX;
        }
        l[t] = raw;
    }
    std::vector<int32_t> order;
    for (int64_t t = 0; t < V; ++t) if (l[t] > -INFINITY) order.push_back((int32_t)t);
    if (order.empty()) { out.status = PYSPEC_ERR_LOGITS, out.err_kind = REF_ERR_NO_FINITE; return out; }
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    const float max_logit = l[order[0]];
    const int shift = pyspec_weight_shift(V);
    std::vector<uint64_t> w(V, 0);
    std::vector<char> kept(V, 0);
    uint64_t total = 0;
    const bool greedy = !(p.temperature > 0.0f);
    if (greedy) {
        w[order[0]] = total = (uint64_t)1 << shift;
        kept[order[0]] = 1;
    } else {
        const int64_t n = (int64_t)order.size();
        const int64_t nk = p.top_k > 0 && p.top_k < V ? std::min<int64_t>(p.top_k, n) : n;
        int64_t np = nk, nm = n;
        if (p.top_p < 1.0f) {
            uint64_t z = 0, cum = 0;
            for (int64_t j = 0; j < nk; ++j) z += pyspec_fixed_weight(pyspec_exp_portable(l[order[j]] - max_logit), shift);
            const double target = (double)p.top_p * (double)z;
            for (int64_t j = 0; j < nk; ++j) {
                cum += pyspec_fixed_weight(pyspec_exp_portable(l[order[j]] - max_logit), shift);
                if ((double)cum >= target) { np = j + 1; break; }
            }
        }
        if (p.min_p > 0.0f) {
            const float thr = max_logit + logf(p.min_p);
            nm = 0;
            while (nm < n && l[order[nm]] >= thr) ++nm;
        }
        const int64_t m = std::min(nk, std::min(np, nm));
        for (int64_t j = 0; j < m; ++j) {
            const int32_t t = order[j];
            w[t] = pyspec_fixed_weight(pyspec_exp_portable((l[t] - max_logit) / p.temperature), shift);
            total += w[t];
            kept[t] = 1;
        }
    }
    const int64_t pos = s.position + i;
    if (i == s.n_draft || !s.draft_probs) {
        out.token = ref_draw(w, total, pyspec_uniform_keyed(p.seed, pos, PYSPEC_PURPOSE_SAMPLE));
        out.stops = i == s.n_draft || out.token != s.draft_tokens[i];
        return out;
    }
    const int32_t x = s.draft_tokens[i];
    const float qx = ref_q(s.draft_probs, i, x);
    if (!pyspec_draft_q_in_range(qx) || !(qx > 0.0f)) {
        out.status = PYSPEC_ERR_DRAFT_PROBS, out.err_kind = REF_ERR_DRAFTED_Q, out.err_token = x;
        return out;
    }
    const double px = (double)w[x] / (double)total;
    if (pyspec_accepts(pyspec_uniform_keyed(p.seed, pos, PYSPEC_PURPOSE_ACCEPT), (double)qx, px)) {
        out.token = x;
        return out;
    }
    std::vector<uint64_t> r(V, 0);
    uint64_t rt = 0;
    for (int64_t t = 0; t < V; ++t) {
        if (!kept[t]) continue;
        const float qt = ref_q(s.draft_probs, i, (int32_t)t);
        if (!pyspec_draft_q_in_range(qt)) {
            out.status = PYSPEC_ERR_DRAFT_PROBS, out.err_kind = REF_ERR_Q, out.err_token = (int32_t)t;
            return out;
        }
        r[t] = pyspec_fixed_residual(w[t], total, (double)qt);
        rt += r[t];
    }
    const double u = pyspec_uniform_keyed(p.seed, pos, PYSPEC_PURPOSE_RESIDUAL);
    out.token = rt > 0 ? ref_draw(r, rt, u) : ref_draw(w, total, u);
    out.stops = true;
    return out;
}

struct RefSeq {
    int status = 0; int64_t n_accepted = 0; std::vector<int32_t> tokens;
    RefRow error; int64_t err_row = -1; /* the failing row's record */
};
static inline RefSeq ref_seq(const pyspec_sequence &s, int64_t V, int32_t dtype) {
    RefSeq out;
    for (int64_t i = 0; i <= s.n_draft; ++i) {
        RefRow r = ref_row(s, i, V, dtype);
        if (r.status) { out.status = r.status, out.error = r, out.err_row = i; return out; }
        out.tokens.push_back(r.token);
        if (r.stops) { out.n_accepted = i; return out; }
    }
    return out;
}

#endif /* PYSPEC_SPEC_REFERENCE_H */
