/*
 * verifier.c - the verifier handle: per-thread scratch, allocated once.
 */
#include <stdlib.h>

#include "internal.h"

#ifndef PYSPEC_VERSION_STRING
#  define PYSPEC_VERSION_STRING "0.0.0"
#endif

const char *pyspec_version(void) { return PYSPEC_VERSION_STRING; }

int32_t pyspec_has_cuda(void) {
#ifdef PYSPEC_WITH_CUDA
    return 1;
#else
    return 0;
#endif
}

const char *pyspec_simd_name(void) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
    return "avx512";
#elif defined(__AVX2__) && defined(__F16C__)
    return "avx2";
#else
    return "scalar";
#endif
}

void pyspec_verifier_free(pyspec_verifier *v) {
    if (!v) return;
    if (v->scratch) {
        for (int32_t t = 0; t < v->max_threads; ++t) {
            free(v->scratch[t].token);
            free(v->scratch[t].logit);
            free(v->scratch[t].weight);
            free(v->scratch[t].draft_q);
            free(v->scratch[t].penalised);
            free(v->scratch[t].window);
            free(v->scratch[t].window_count);
        }
        free(v->scratch);
    }
    free(v);
}

pyspec_status pyspec_verifier_create(int64_t max_vocab, int32_t max_threads,
                                     pyspec_verifier **out, pyspec_error *err) {
    if (!out) return pyspec_fail(err, PYSPEC_ERR_NULL, "out is NULL");
    *out = NULL;
    if (max_vocab < 1 || max_vocab > INT32_MAX)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "max_vocab must be in [1, 2^31), got %lld",
                           (long long)max_vocab);
    if (max_threads < 1 || max_threads > 1024)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "max_threads must be in [1, 1024], got %d",
                           max_threads);
    pyspec_verifier *v = calloc(1, sizeof *v);
    if (!v) return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "cannot allocate the verifier");
    v->max_vocab = max_vocab;
    v->max_threads = max_threads;
    v->scratch = calloc((size_t)max_threads, sizeof *v->scratch);
    int ok = v->scratch != NULL;
    for (int32_t t = 0; ok && t < max_threads; ++t) {
        /* Candidates: the whole vocabulary, plus each penalised token twice (its raw value
         * and its penalised one may both be among the candidates for a moment). */
        const size_t slots = (size_t)max_vocab + 2 * PYSPEC_MAX_PENALTY_WINDOW;
        pyspec_scratch *s = &v->scratch[t];
        s->token = malloc(slots * sizeof(int32_t));
        s->logit = malloc(slots * sizeof(float));
        s->weight = malloc(slots * sizeof(uint64_t));
        s->draft_q = calloc((size_t)max_vocab, sizeof(float));
        s->penalised = calloc((size_t)max_vocab, 1);
        s->window = malloc(PYSPEC_MAX_PENALTY_WINDOW * sizeof(int32_t));
        s->window_count = malloc(PYSPEC_MAX_PENALTY_WINDOW * sizeof(int32_t));
        ok = s->token && s->logit && s->weight && s->draft_q && s->penalised && s->window &&
             s->window_count;
    }
    if (!ok) {
        pyspec_verifier_free(v);
        return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY,
                           "cannot allocate scratch for %d threads x %lld tokens", max_threads,
                           (long long)max_vocab);
    }
    *out = v;
    return PYSPEC_OK;
}
