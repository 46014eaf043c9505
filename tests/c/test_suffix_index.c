/*
 * test_suffix_index.c - the suffix index against a brute-force search over the same tokens,
 * through random appends, separators and truncations (the rollback), and its errors (which
 * must leave the index as it was).
 */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define REF_CAP 4096

typedef struct ref_seq {
    int32_t tokens[REF_CAP];
    int64_t length;
} ref_seq;

static int is_sep(int32_t t) { return t == PYSPEC_SUFFIX_SEPARATOR; }

/* Occurrence ends (latest first) of the last n pattern tokens, brute force. */
static int32_t ref_occurrences(const ref_seq *s, const int32_t *pattern, int64_t n_pattern,
                               int32_t n, int32_t cap, int32_t *ends) {
    int32_t found = 0;
    for (int64_t end = s->length - 1; end >= n && found < cap; --end) {
        if (is_sep(s->tokens[end])) continue;
        int ok = 1;
        for (int32_t j = 0; j < n && ok; ++j) {
            const int32_t t = s->tokens[end - n + j];
            ok = !is_sep(t) && t == pattern[n_pattern - n + j];
        }
        if (ok) ends[found++] = (int32_t)end;
    }
    return found;
}

static void ref_draft(const ref_seq *s, int32_t max_match, const int32_t *pattern, int64_t n_pattern,
                      int32_t min_match, int32_t cap, int32_t max_tokens, int32_t *tokens,
                      int32_t *counts, int32_t *totals, pyspec_suffix_draft *out) {
    memset(out, 0, sizeof *out);
    out->source = -1;
    int32_t ends[PYSPEC_SUFFIX_MAX_OCCURRENCES], live = 0;
    int32_t n = (int32_t)(n_pattern < max_match ? n_pattern : max_match);
    for (; n >= min_match; --n)
        if ((live = ref_occurrences(s, pattern, n_pattern, n, cap, ends))) break;
    if (!live) return;
    out->match_length = n;
    out->n_occurrences = live;
    int32_t d = 0;
    for (; d < max_tokens; ++d) {
        /* the most frequent follower; ties go to the one seen first (latest occurrence) */
        int32_t best = -1, best_count = 0, total = 0;
        for (int32_t o = 0; o < live; ++o) {
            const int64_t at = ends[o] + d;
            if (at >= s->length || is_sep(s->tokens[at])) continue;
            ++total;
            int32_t c = 0;
            for (int32_t q = 0; q < live; ++q) {
                const int64_t aq = ends[q] + d;
                if (aq < s->length && s->tokens[aq] == s->tokens[at]) ++c;
            }
            if (c > best_count) {
                best_count = c;
                best = s->tokens[at];
            }
        }
        if (!total) break;
        tokens[d] = best;
        counts[d] = best_count;
        totals[d] = total;
        int32_t kept = 0;
        for (int32_t o = 0; o < live; ++o)
            if (ends[o] + d < s->length && s->tokens[ends[o] + d] == best) ends[kept++] = ends[o];
        live = kept;
    }
    out->n_tokens = d;
    if (d) out->source = ends[0];
}

static void compare_drafts(pyspec_suffix_index *ix, const ref_seq *s, int32_t max_match) {
    int32_t pattern[80];
    const int64_t n_pattern = rng_range(0, 70);
    for (int64_t i = 0; i < n_pattern; ++i) {
        /* mostly the sequence's own tail (what a drafter asks), sometimes anything */
        const int64_t from = s->length - n_pattern + i;
        pattern[i] = (from >= 0 && !is_sep(s->tokens[from]) && rng_chance(0.9))
                         ? s->tokens[from] : (int32_t)rng_range(0, 5);
    }
    const int32_t min_match = (int32_t)rng_range(1, max_match);
    const int32_t cap = (int32_t)rng_range(1, 40);
    const int32_t max_tokens = (int32_t)rng_range(0, 24);
    int32_t t[32], c[32], tot[32], rt[32], rc[32], rtot[32];
    pyspec_suffix_draft got, want;
    pyspec_error err;
    const pyspec_status st = pyspec_suffix_index_draft(ix, pattern, n_pattern, min_match, cap,
                                                       max_tokens, t, c, tot, &got, &err);
    ref_draft(s, max_match, pattern, n_pattern, min_match, cap, max_tokens, rt, rc, rtot, &want);
    int same = st == PYSPEC_OK && got.n_tokens == want.n_tokens && got.match_length == want.match_length
               && got.n_occurrences == want.n_occurrences && got.source == want.source;
    for (int32_t d = 0; same && d < got.n_tokens; ++d)
        same = t[d] == rt[d] && c[d] == rc[d] && tot[d] == rtot[d];
    CHECK(same, "draft (len %lld, pattern %lld, min %d, cap %d, max %d): got n=%d match=%d occ=%d src=%lld, "
          "want n=%d match=%d occ=%d src=%lld", (long long)s->length, (long long)n_pattern, min_match, cap,
          max_tokens, got.n_tokens, got.match_length, got.n_occurrences, (long long)got.source,
          want.n_tokens, want.match_length, want.n_occurrences, (long long)want.source);
}

void test_suffix_index_random(void) {
    static ref_seq s;
    for (int trial = 0; trial < 40; ++trial) {
        const int32_t max_match = (int32_t)rng_range(1, 12);
        const int32_t alphabet = (int32_t)rng_range(2, 6);
        set_context("trial %d, max_match %d, alphabet %d", trial, max_match, alphabet);
        pyspec_suffix_index *ix = NULL;
        pyspec_error err;
        CHECK(pyspec_suffix_index_create(max_match, &ix, &err) == PYSPEC_OK, "create: %s", err.message);
        s.length = 0;
        for (int step = 0; step < 120; ++step) {
            if (rng_chance(0.25) && s.length) { /* a rejection: cut back */
                const int64_t to = rng_range(0, s.length);
                CHECK(pyspec_suffix_index_truncate(ix, to, &err) == PYSPEC_OK, "truncate: %s", err.message);
                s.length = to;
            } else {
                int32_t add[40];
                const int64_t n = rng_range(0, 30);
                if (s.length + n > REF_CAP) break;
                for (int64_t i = 0; i < n; ++i)
                    add[i] = rng_chance(0.03) ? PYSPEC_SUFFIX_SEPARATOR : (int32_t)rng_range(0, alphabet - 1);
                CHECK(pyspec_suffix_index_append(ix, add, n, &err) == PYSPEC_OK, "append: %s", err.message);
                memcpy(s.tokens + s.length, add, (size_t)n * sizeof *add);
                s.length += n;
            }
            CHECK(pyspec_suffix_index_length(ix) == s.length, "length %lld, want %lld",
                  (long long)pyspec_suffix_index_length(ix), (long long)s.length);
            compare_drafts(ix, &s, max_match);
        }
        int32_t back[REF_CAP];
        CHECK(pyspec_suffix_index_read(ix, 0, s.length, back, &err) == PYSPEC_OK
                  && memcmp(back, s.tokens, (size_t)s.length * sizeof *back) == 0,
              "read gives back the tokens");
        pyspec_suffix_index_free(ix);
    }
}

void test_suffix_index_errors(void) {
    set_context("suffix index errors");
    pyspec_error err;
    pyspec_suffix_index *ix = NULL;
    CHECK(pyspec_suffix_index_create(0, &ix, &err) == PYSPEC_ERR_SHAPE && ix == NULL, "max_match 0");
    CHECK(pyspec_suffix_index_create(PYSPEC_SUFFIX_MAX_MATCH + 1, &ix, &err) == PYSPEC_ERR_SHAPE,
          "max_match over the limit");
    CHECK(pyspec_suffix_index_create(4, NULL, &err) == PYSPEC_ERR_NULL, "out NULL");
    CHECK(pyspec_suffix_index_create(4, &ix, &err) == PYSPEC_OK, "create");
    const int32_t good[] = { 1, 2, 3, 1, 2 };
    CHECK(pyspec_suffix_index_append(ix, good, 5, &err) == PYSPEC_OK, "append");
    const int32_t bad[] = { 7, -2, 8 };
    CHECK(pyspec_suffix_index_append(ix, bad, 3, &err) == PYSPEC_ERR_TOKEN
              && strstr(err.message, "tokens[1]") != NULL, "a negative id names its index: %s", err.message);
    CHECK(pyspec_suffix_index_length(ix) == 5, "a refused append leaves the length");
    CHECK(pyspec_suffix_index_append(ix, NULL, 2, &err) == PYSPEC_ERR_NULL, "tokens NULL");
    CHECK(pyspec_suffix_index_append(ix, good, -1, &err) == PYSPEC_ERR_SHAPE, "negative count");
    CHECK(pyspec_suffix_index_append(NULL, good, 1, &err) == PYSPEC_ERR_NULL, "index NULL");
    CHECK(pyspec_suffix_index_truncate(ix, 6, &err) == PYSPEC_ERR_SHAPE, "truncate beyond the end");
    CHECK(pyspec_suffix_index_truncate(ix, -1, &err) == PYSPEC_ERR_SHAPE, "truncate below 0");
    int32_t out[8];
    CHECK(pyspec_suffix_index_read(ix, 3, 3, out, &err) == PYSPEC_ERR_SHAPE, "read past the end");
    int32_t t[4], c[4], tot[4];
    pyspec_suffix_draft d;
    const int32_t pat[] = { 1, 2 };
    CHECK(pyspec_suffix_index_draft(ix, pat, 2, 0, 8, 4, t, c, tot, &d, &err) == PYSPEC_ERR_SHAPE,
          "min_match 0");
    CHECK(pyspec_suffix_index_draft(ix, pat, 2, 5, 8, 4, t, c, tot, &d, &err) == PYSPEC_ERR_SHAPE,
          "min_match over max_match");
    CHECK(pyspec_suffix_index_draft(ix, pat, 2, 1, 0, 4, t, c, tot, &d, &err) == PYSPEC_ERR_SHAPE,
          "max_occurrences 0");
    CHECK(pyspec_suffix_index_draft(ix, pat, 2, 1, PYSPEC_SUFFIX_MAX_OCCURRENCES + 1, 4, t, c, tot, &d,
                                    &err) == PYSPEC_ERR_SHAPE, "max_occurrences over the limit");
    CHECK(pyspec_suffix_index_draft(ix, pat, 2, 1, 8, 4, NULL, c, tot, &d, &err) == PYSPEC_ERR_NULL,
          "out_tokens NULL");
    const int32_t neg[] = { 1, PYSPEC_SUFFIX_SEPARATOR };
    CHECK(pyspec_suffix_index_draft(ix, neg, 2, 1, 8, 4, t, c, tot, &d, &err) == PYSPEC_ERR_TOKEN,
          "a separator in the pattern");
    /* The one good draft: "1 2" was followed by 3 (the latest occurrence at the end has no follower). */
    CHECK(pyspec_suffix_index_draft(ix, pat, 2, 1, 8, 4, t, c, tot, &d, &err) == PYSPEC_OK
              && d.n_tokens == 3 && t[0] == 3 && t[1] == 1 && t[2] == 2 && d.match_length == 2
              && d.source == 2 && c[0] == 1 && tot[0] == 1,
          "draft after the errors: n=%d t0=%d src=%lld", d.n_tokens, t[0], (long long)d.source);
    pyspec_suffix_index_free(ix);
    pyspec_suffix_index_free(NULL);
    CHECK(pyspec_suffix_index_length(NULL) == 0, "length of NULL");
}
