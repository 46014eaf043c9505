/*
 * penalties.c - llama.cpp's repetition, frequency and presence penalties.
 *
 * They change the logits of the few tokens in a short window before any other transform.
 * The streaming pass still reads raw logits: distribution.c keeps a few more candidates
 * than top-k (one per penalised token), drops the penalised tokens' raw values and puts
 * back their penalised ones, which gives exactly the top-k of the penalised row.
 */
#include "internal.h"
#include "rules.h"

int pyspec_penalties_on(const pyspec_sampling_params *p) {
    return p->penalty_last_n != 0 &&
           !(p->penalty_repeat == 1.0f && p->penalty_freq == 0.0f && p->penalty_present == 0.0f);
}

float pyspec_penalise(float logit, int32_t count, const pyspec_penalties *pen) {
    return pyspec_penalised_logit(logit, count, pen->repeat, pen->freq, pen->present);
}

static void sort_ints(int32_t *a, int64_t n) {
    int64_t gap = 1;
    while (gap < n / 3) gap = 3 * gap + 1;
    for (; gap >= 1; gap /= 3)
        for (int64_t i = gap; i < n; ++i) {
            int32_t x = a[i];
            int64_t j = i;
            while (j >= gap && a[j - gap] > x) { a[j] = a[j - gap]; j -= gap; }
            a[j] = x;
        }
}

const pyspec_penalties *pyspec_row_penalties(const pyspec_sampling_params *p,
                                             const int32_t *drafts, int64_t row,
                                             pyspec_scratch *scratch, pyspec_penalties *out) {
    if (!pyspec_penalties_on(p)) return NULL;
    const int64_t total = p->n_penalty_history + row;
    int64_t len = p->penalty_last_n < 0 ? total : (total < p->penalty_last_n ? total : p->penalty_last_n);
    if (len > PYSPEC_MAX_PENALTY_WINDOW) len = PYSPEC_MAX_PENALTY_WINDOW; /* checked earlier */
    int32_t *w = scratch->window;
    for (int64_t j = 0; j < len; ++j) {
        int64_t idx = total - len + j; /* index into history ++ drafts */
        w[j] = idx < p->n_penalty_history ? p->penalty_history[idx]
                                          : drafts[idx - p->n_penalty_history];
    }
    sort_ints(w, len);
    int64_t n = 0;
    for (int64_t j = 0; j < len; ++j) { /* run-length: distinct tokens, counts in place */
        if (n > 0 && w[n - 1] == w[j]) {
            scratch->window_count[n - 1]++;
        } else {
            w[n] = w[j];
            scratch->window_count[n] = 1;
            ++n;
        }
    }
    out->token = w;
    out->count = scratch->window_count;
    out->n = n;
    out->repeat = p->penalty_repeat;
    out->freq = p->penalty_freq;
    out->present = p->penalty_present;
    return n ? out : NULL;
}
