/*
 * suffix_index.c - the drafters' search: where did the most recent tokens occur before, and
 * what followed them.
 *
 * Every n-gram of length 1..max_match that has a follower is indexed by a hash of its tokens;
 * the entry holds the latest end (the index of the follower) and every end keeps a link to
 * the previous end of the same n-gram (prev), so a lookup walks the occurrences latest first.
 * Appending a token inserts the n-grams that end just before it: O(max_match) per token, no
 * matter how long the sequence is. Cutting the sequence back undoes those insertions in
 * reverse order (each n-gram's head goes back to its prev), so the index after a truncation
 * is exactly the index of the shorter sequence, and the loop can roll drafts back with the
 * KV cache.
 *
 * Hash collisions are harmless: a lookup compares the tokens of every occurrence it reports.
 * A separator (PYSPEC_SUFFIX_SEPARATOR) splits documents: no n-gram that contains one, or
 * whose follower is one, is indexed, so no match or draft crosses a document boundary.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The longest sequence one index holds: its positions are int32. */
#define SUFFIX_MAX_LENGTH ((int64_t)INT32_MAX - 1)

struct pyspec_suffix_index {
    int32_t  max_match;
    int32_t *tokens;
    int64_t  length, capacity;
    int32_t *prev;        /* [capacity * max_match]: prev[end * max_match + n - 1] */
    uint64_t *keys;       /* open addressing; 0 marks an empty slot */
    int32_t  *heads;      /* latest end of the slot's n-gram, -1 when none is indexed now */
    int64_t   table_size; /* a power of two */
    int64_t   table_used;
};

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Hash of the n-gram of length n ending at `end` (exclusive), built from the hash of the
 * (n-1)-gram ending there: step(h, token) then finish(h, n). */
static uint64_t step_hash(uint64_t h, int32_t token) {
    return mix64(h ^ ((uint64_t)(uint32_t)token + 0x9e3779b97f4a7c15ULL));
}

static uint64_t finish_hash(uint64_t h, int32_t n) {
    const uint64_t key = mix64(h + (uint64_t)n * 0x632be59bd9b4e019ULL);
    return key ? key : 1; /* 0 is the empty slot */
}

static int64_t find_slot(const pyspec_suffix_index *ix, uint64_t key) {
    const int64_t mask = ix->table_size - 1;
    int64_t slot = (int64_t)(key & (uint64_t)mask);
    while (ix->keys[slot] != 0 && ix->keys[slot] != key) slot = (slot + 1) & mask;
    return slot;
}

static pyspec_status grow_table(pyspec_suffix_index *ix, pyspec_error *err) {
    const int64_t old_size = ix->table_size;
    uint64_t *old_keys = ix->keys;
    int32_t *old_heads = ix->heads;
    const int64_t size = old_size ? old_size * 2 : 1024;
    uint64_t *keys = calloc((size_t)size, sizeof *keys);
    int32_t *heads = malloc((size_t)size * sizeof *heads);
    if (!keys || !heads) {
        free(keys);
        free(heads);
        return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "suffix index: cannot grow its table to %lld slots",
                           (long long)size);
    }
    ix->keys = keys;
    ix->heads = heads;
    ix->table_size = size;
    ix->table_used = 0;
    for (int64_t s = 0; s < old_size; ++s) {
        if (old_keys[s] == 0 || old_heads[s] < 0) continue; /* emptied entries are dropped */
        const int64_t slot = find_slot(ix, old_keys[s]);
        ix->keys[slot] = old_keys[s];
        ix->heads[slot] = old_heads[s];
        ix->table_used++;
    }
    free(old_keys);
    free(old_heads);
    return PYSPEC_OK;
}

static pyspec_status reserve(pyspec_suffix_index *ix, int64_t length, pyspec_error *err) {
    if (length <= ix->capacity) return PYSPEC_OK;
    int64_t capacity = ix->capacity ? ix->capacity : 256;
    while (capacity < length) capacity *= 2;
    if (capacity > SUFFIX_MAX_LENGTH + 1) capacity = SUFFIX_MAX_LENGTH + 1;
    int32_t *tokens = realloc(ix->tokens, (size_t)capacity * sizeof *tokens);
    if (!tokens)
        return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "suffix index: cannot hold %lld tokens",
                           (long long)capacity);
    ix->tokens = tokens;
    int32_t *prev = realloc(ix->prev, (size_t)capacity * (size_t)ix->max_match * sizeof *prev);
    if (!prev)
        return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "suffix index: cannot hold %lld tokens",
                           (long long)capacity);
    ix->prev = prev;
    ix->capacity = capacity;
    return PYSPEC_OK;
}

/* How many n-grams end at `end` (exclusive) and may be indexed: none when the follower
 * tokens[end] is a separator; otherwise up to max_match, stopping before a separator. */
static int32_t indexable(const pyspec_suffix_index *ix, int64_t end) {
    if (ix->tokens[end] == PYSPEC_SUFFIX_SEPARATOR) return 0;
    int32_t n = 0;
    while (n < ix->max_match && end - n - 1 >= 0 && ix->tokens[end - n - 1] != PYSPEC_SUFFIX_SEPARATOR)
        ++n;
    return n;
}

pyspec_status pyspec_suffix_index_create(int32_t max_match, pyspec_suffix_index **out,
                                         pyspec_error *err) {
    if (!out) return pyspec_fail(err, PYSPEC_ERR_NULL, "out is NULL");
    *out = NULL;
    if (max_match < 1 || max_match > PYSPEC_SUFFIX_MAX_MATCH)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "max_match must be in [1, %d], got %d",
                           PYSPEC_SUFFIX_MAX_MATCH, max_match);
    pyspec_suffix_index *ix = calloc(1, sizeof *ix);
    if (!ix) return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "suffix index: out of memory");
    ix->max_match = max_match;
    pyspec_status st = grow_table(ix, err);
    if (st != PYSPEC_OK) {
        free(ix);
        return st;
    }
    *out = ix;
    return PYSPEC_OK;
}

void pyspec_suffix_index_free(pyspec_suffix_index *ix) {
    if (!ix) return;
    free(ix->tokens);
    free(ix->prev);
    free(ix->keys);
    free(ix->heads);
    free(ix);
}

int64_t pyspec_suffix_index_length(const pyspec_suffix_index *ix) {
    return ix ? ix->length : 0;
}

pyspec_status pyspec_suffix_index_append(pyspec_suffix_index *ix, const int32_t *tokens,
                                         int64_t n_tokens, pyspec_error *err) {
    if (!ix) return pyspec_fail(err, PYSPEC_ERR_NULL, "index is NULL");
    if (n_tokens < 0) return pyspec_fail(err, PYSPEC_ERR_SHAPE, "n_tokens must be >= 0, got %lld",
                                         (long long)n_tokens);
    if (n_tokens == 0) return PYSPEC_OK;
    if (!tokens) return pyspec_fail(err, PYSPEC_ERR_NULL, "tokens is NULL");
    for (int64_t i = 0; i < n_tokens; ++i)
        if (tokens[i] < 0 && tokens[i] != PYSPEC_SUFFIX_SEPARATOR)
            return pyspec_fail(err, PYSPEC_ERR_TOKEN,
                               "tokens[%lld] is %d: token ids are >= 0 (the separator is %d)",
                               (long long)i, tokens[i], PYSPEC_SUFFIX_SEPARATOR);
    if (n_tokens > SUFFIX_MAX_LENGTH - ix->length)
        return pyspec_fail(err, PYSPEC_ERR_CAPACITY, "suffix index: %lld + %lld tokens exceed its %lld",
                           (long long)ix->length, (long long)n_tokens, (long long)SUFFIX_MAX_LENGTH);
    /* Room for everything first, so a failure leaves the index as it was. */
    pyspec_status st = reserve(ix, ix->length + n_tokens, err);
    if (st != PYSPEC_OK) return st;
    while ((ix->table_used + n_tokens * ix->max_match) * 2 > ix->table_size) {
        st = grow_table(ix, err);
        if (st != PYSPEC_OK) return st;
    }
    const int32_t m = ix->max_match;
    for (int64_t i = 0; i < n_tokens; ++i) {
        const int64_t end = ix->length;
        ix->tokens[end] = tokens[i];
        ix->length = end + 1;
        const int32_t n_grams = indexable(ix, end);
        uint64_t h = 0;
        for (int32_t n = 1; n <= n_grams; ++n) {
            h = step_hash(h, ix->tokens[end - n]);
            const uint64_t key = finish_hash(h, n);
            const int64_t slot = find_slot(ix, key);
            if (ix->keys[slot] == 0) {
                ix->keys[slot] = key;
                ix->heads[slot] = -1;
                ix->table_used++;
            }
            ix->prev[end * m + n - 1] = ix->heads[slot];
            ix->heads[slot] = (int32_t)end;
        }
    }
    return PYSPEC_OK;
}

pyspec_status pyspec_suffix_index_truncate(pyspec_suffix_index *ix, int64_t length,
                                           pyspec_error *err) {
    if (!ix) return pyspec_fail(err, PYSPEC_ERR_NULL, "index is NULL");
    if (length < 0 || length > ix->length)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "length must be in [0, %lld], got %lld",
                           (long long)ix->length, (long long)length);
    const int32_t m = ix->max_match;
    for (int64_t end = ix->length - 1; end >= length; --end) {
        const int32_t n_grams = indexable(ix, end);
        uint64_t h = 0;
        for (int32_t n = 1; n <= n_grams; ++n) {
            h = step_hash(h, ix->tokens[end - n]);
            const int64_t slot = find_slot(ix, finish_hash(h, n));
            ix->heads[slot] = ix->prev[end * m + n - 1]; /* this end is the head: undo it */
        }
        ix->length = end;
    }
    return PYSPEC_OK;
}

pyspec_status pyspec_suffix_index_read(const pyspec_suffix_index *ix, int64_t start, int64_t n,
                                       int32_t *out, pyspec_error *err) {
    if (!ix) return pyspec_fail(err, PYSPEC_ERR_NULL, "index is NULL");
    if (start < 0 || n < 0 || start > ix->length || n > ix->length - start)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "tokens [%lld, %lld) are not inside [0, %lld)",
                           (long long)start, (long long)(start + n), (long long)ix->length);
    if (n && !out) return pyspec_fail(err, PYSPEC_ERR_NULL, "out is NULL");
    if (n) memcpy(out, ix->tokens + start, (size_t)n * sizeof *out);
    return PYSPEC_OK;
}

static int same_tokens(const int32_t *a, const int32_t *b, int32_t n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Up to `cap` ends of occurrences of the last n tokens of pattern, latest first. */
static int32_t occurrences(const pyspec_suffix_index *ix, const int32_t *pattern, int64_t n_pattern,
                           int32_t n, int32_t cap, int32_t *ends) {
    uint64_t h = 0;
    for (int32_t j = 1; j <= n; ++j) h = step_hash(h, pattern[n_pattern - j]);
    const int64_t slot = find_slot(ix, finish_hash(h, n));
    if (ix->keys[slot] == 0) return 0;
    int32_t found = 0;
    const int32_t *gram = pattern + n_pattern - n;
    for (int32_t end = ix->heads[slot]; end >= 0 && found < cap;
         end = ix->prev[(int64_t)end * ix->max_match + n - 1])
        if (same_tokens(ix->tokens + end - n, gram, n)) ends[found++] = end;
    return found;
}

pyspec_status pyspec_suffix_index_draft(const pyspec_suffix_index *ix, const int32_t *pattern,
                                        int64_t n_pattern, int32_t min_match,
                                        int32_t max_occurrences, int32_t max_tokens,
                                        int32_t *out_tokens, int32_t *out_counts,
                                        int32_t *out_totals, pyspec_suffix_draft *out,
                                        pyspec_error *err) {
    if (!ix) return pyspec_fail(err, PYSPEC_ERR_NULL, "index is NULL");
    if (!out) return pyspec_fail(err, PYSPEC_ERR_NULL, "out is NULL");
    if (n_pattern < 0) return pyspec_fail(err, PYSPEC_ERR_SHAPE, "n_pattern must be >= 0, got %lld",
                                          (long long)n_pattern);
    if (n_pattern && !pattern) return pyspec_fail(err, PYSPEC_ERR_NULL, "pattern is NULL");
    if (min_match < 1 || min_match > ix->max_match)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "min_match must be in [1, %d] (the index's max_match), got %d",
                           ix->max_match, min_match);
    if (max_occurrences < 1 || max_occurrences > PYSPEC_SUFFIX_MAX_OCCURRENCES)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "max_occurrences must be in [1, %d], got %d",
                           PYSPEC_SUFFIX_MAX_OCCURRENCES, max_occurrences);
    if (max_tokens < 0) return pyspec_fail(err, PYSPEC_ERR_SHAPE, "max_tokens must be >= 0, got %d",
                                           max_tokens);
    if (max_tokens && (!out_tokens || !out_counts || !out_totals))
        return pyspec_fail(err, PYSPEC_ERR_NULL, "out_tokens, out_counts and out_totals must not be NULL");
    for (int64_t i = 0; i < n_pattern; ++i)
        if (pattern[i] < 0)
            return pyspec_fail(err, PYSPEC_ERR_TOKEN, "pattern[%lld] is %d: token ids are >= 0",
                               (long long)i, pattern[i]);
    memset(out, 0, sizeof *out);
    out->source = -1;

    int32_t ends[PYSPEC_SUFFIX_MAX_OCCURRENCES];
    int32_t live = 0, n = (int32_t)(n_pattern < ix->max_match ? n_pattern : ix->max_match);
    for (; n >= min_match; --n) {
        live = occurrences(ix, pattern, n_pattern, n, max_occurrences, ends);
        if (live) break;
    }
    if (!live) return PYSPEC_OK;
    out->match_length = n;
    out->n_occurrences = live;

    /* Walk the continuations: at each depth the token that followed most of the occurrences
     * still in agreement with the draft (ties: the latest occurrence's), with its count and
     * the number of occurrences that had a follower there. */
    int32_t cand_token[PYSPEC_SUFFIX_MAX_OCCURRENCES], cand_count[PYSPEC_SUFFIX_MAX_OCCURRENCES];
    int32_t depth = 0;
    for (; depth < max_tokens; ++depth) {
        int32_t n_cand = 0, total = 0;
        for (int32_t o = 0; o < live; ++o) {
            const int64_t at = (int64_t)ends[o] + depth;
            if (at >= ix->length || ix->tokens[at] == PYSPEC_SUFFIX_SEPARATOR) continue;
            const int32_t t = ix->tokens[at];
            ++total;
            int32_t c = 0;
            while (c < n_cand && cand_token[c] != t) ++c;
            if (c == n_cand) {
                cand_token[n_cand] = t;
                cand_count[n_cand++] = 0;
            }
            cand_count[c]++;
        }
        if (!total) break;
        int32_t best = 0; /* candidates are in latest-occurrence order: the first wins ties */
        for (int32_t c = 1; c < n_cand; ++c)
            if (cand_count[c] > cand_count[best]) best = c;
        const int32_t token = cand_token[best];
        out_tokens[depth] = token;
        out_counts[depth] = cand_count[best];
        out_totals[depth] = total;
        int32_t kept = 0;
        for (int32_t o = 0; o < live; ++o) {
            const int64_t at = (int64_t)ends[o] + depth;
            if (at < ix->length && ix->tokens[at] == token) ends[kept++] = ends[o];
        }
        live = kept;
    }
    out->n_tokens = depth;
    if (depth) out->source = ends[0];
    return PYSPEC_OK;
}
