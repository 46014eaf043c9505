/*
 * test_cuda_api.c - the CUDA entry points, with or without a device or CUDA in the build.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* The CUDA entry points: a clear PYSPEC_ERR_CUDA without a device or without CUDA in the
 * build (never a crash); with a device, a small greedy call equals the argmax. */
void test_cuda_entry_points(void) {
    pyspec_error e = { 0, { 0 } };
    int32_t n = -1;
    pyspec_status st = pyspec_cuda_device_count(&n, &e);
    if (!pyspec_has_cuda()) {
        CHECK(st == PYSPEC_ERR_CUDA && strstr(e.message, "built without CUDA"),
              "no-CUDA build: device_count gave %d '%s'", st, e.message);
    } else {
        CHECK(st == PYSPEC_OK || (st == PYSPEC_ERR_CUDA && strstr(e.message, "no CUDA device")),
              "device_count gave %d '%s'", st, e.message);
    }
    CHECK(pyspec_cuda_device_count(NULL, &e) != PYSPEC_OK, "device_count(NULL) must fail");
    pyspec_cuda_free(0, NULL);
    pyspec_cuda_verifier_free(NULL);
    CHECK(pyspec_cuda_verify_batch(NULL, NULL, 0, 10, PYSPEC_F32, NULL, &e) != PYSPEC_OK,
          "verify_batch(NULL verifier) must fail");
    CHECK(pyspec_cuda_verifier_last_error(NULL, NULL, &e) != PYSPEC_OK,
          "last_error(NULL verifier) must fail");
    st = pyspec_cuda_verifier_split_rows(NULL, 1, &e);
    CHECK(st == (pyspec_has_cuda() ? PYSPEC_ERR_NULL : PYSPEC_ERR_CUDA), "split_rows(NULL verifier) gave %d '%s'",
          st, e.message);
    pyspec_cuda_verifier *v = NULL;
    st = pyspec_cuda_verifier_create(1000, 4, 8, 0, &v, &e);
    if (st != PYSPEC_OK || n <= 0) {
        CHECK(st == PYSPEC_ERR_CUDA && v == NULL, "create without a device gave %d '%s'", st, e.message);
        return;
    }
    /* A device: 3 greedy rows, drafts = the argmaxes of rows 0 and 1. */
    enum { V = 1000 };
    float *rows = malloc(3 * V * sizeof *rows);
    for (int i = 0; i < 3 * V; ++i) rows[i] = (float)((i * 7919) % 1013) / 100.0f;
    int32_t want[3];
    for (int r = 0; r < 3; ++r) {
        int best = 0;
        for (int t = 1; t < V; ++t) if (rows[r * V + t] > rows[r * V + best]) best = t;
        want[r] = best;
    }
    void *d_rows = NULL, *d_draft = NULL, *d_out = NULL, *d_n = NULL;
    CHECK(pyspec_cuda_malloc(0, 3 * V * 4, &d_rows, &e) == PYSPEC_OK, "malloc: %s", e.message);
    CHECK(pyspec_cuda_malloc(0, 8, &d_draft, &e) == PYSPEC_OK, "malloc: %s", e.message);
    CHECK(pyspec_cuda_malloc(0, 12, &d_out, &e) == PYSPEC_OK, "malloc: %s", e.message);
    CHECK(pyspec_cuda_malloc(0, 8, &d_n, &e) == PYSPEC_OK, "malloc: %s", e.message);
    pyspec_cuda_memcpy(0, d_rows, rows, 3 * V * 4, 0, NULL, &e);
    pyspec_cuda_memcpy(0, d_draft, want, 8, 0, NULL, &e);
    pyspec_sequence seq;
    memset(&seq, 0, sizeof seq);
    seq.target_logits = d_rows;
    seq.logits_row_stride = V;
    seq.draft_tokens = d_draft;
    seq.n_draft = 2;
    seq.params.top_p = 1.0f;
    seq.out_tokens = d_out;
    seq.out_n_accepted = d_n;
    st = pyspec_cuda_verify_batch_sync(v, &seq, 1, V, PYSPEC_F32, NULL, &e);
    CHECK(st == PYSPEC_OK, "cuda verify: %d '%s'", st, e.message);
    int32_t got[3] = { -1, -1, -1 };
    int64_t n_acc = -1;
    pyspec_cuda_memcpy(0, got, d_out, 12, 1, NULL, &e);
    pyspec_cuda_memcpy(0, &n_acc, d_n, 8, 1, NULL, &e);
    CHECK(n_acc == 2 && got[0] == want[0] && got[1] == want[1] && got[2] == want[2],
          "cuda greedy: n %lld tokens %d %d %d, want %d %d %d", (long long)n_acc, got[0], got[1],
          got[2], want[0], want[1], want[2]);
    pyspec_cuda_free(0, d_rows); pyspec_cuda_free(0, d_draft);
    pyspec_cuda_free(0, d_out); pyspec_cuda_free(0, d_n);
    pyspec_cuda_verifier_free(v);
    free(rows);
}
