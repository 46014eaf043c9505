/*
 * api.cu - the host side of the CUDA back end: verifier lifetime, host-side checks,
 * staging of the sequence descriptors, the launches of a call, and the device error
 * record. CUDA is first touched here, by these entry points only, so the library loads and
 * its CPU functions work where there is no driver or device.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"
#include "stage.h"

static pyspec_status cuda_fail(pyspec_error *err, const char *what, cudaError_t e) {
    return pyspec_fail(err, PYSPEC_ERR_CUDA, "%s failed: %s (%s, %d)", what, cudaGetErrorString(e),
                       cudaGetErrorName(e), (int)e);
}

/* Makes `device` current for the scope, restoring the caller's device afterwards. */
struct DeviceScope {
    int previous, ok;
    cudaError_t error;
    explicit DeviceScope(int device) : previous(-1), ok(0), error(cudaSuccess) {
        if ((error = cudaGetDevice(&previous)) != cudaSuccess) return;
        if (previous != device && (error = cudaSetDevice(device)) != cudaSuccess) return;
        ok = 1;
    }
    ~DeviceScope() {
        if (ok && previous >= 0) cudaSetDevice(previous);
    }
};

extern "C" pyspec_status pyspec_cuda_device_count(int32_t *out_count, pyspec_error *err) {
    if (!out_count) return pyspec_fail(err, PYSPEC_ERR_NULL, "out_count is NULL");
    *out_count = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not sticky: clear it */
        return pyspec_fail(err, PYSPEC_ERR_CUDA, "no CUDA device: cudaGetDeviceCount returned %d (%s: %s)",
                           (int)e, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    *out_count = n;
    return PYSPEC_OK;
}

extern "C" void pyspec_cuda_verifier_free(pyspec_cuda_verifier *v) {
    if (!v) return;
    DeviceScope scope(v->device);
    cudaDeviceSynchronize();
    free(v->h_seqs);
    cudaFree(v->d_seqs);
    cudaFree(v->d_seq_err);
    cudaFree(v->d_row_err);
    cudaFree(v->d_err);
    cudaFree(v->d_chunks);
    cudaFree(v->d_lists);
    free(v);
}

extern "C" pyspec_status pyspec_cuda_verifier_create(int64_t max_vocab, int64_t max_seqs,
                                                     int64_t max_rows, int32_t device,
                                                     pyspec_cuda_verifier **out,
                                                     pyspec_error *err) {
    if (!out) return pyspec_fail(err, PYSPEC_ERR_NULL, "out is NULL");
    *out = NULL;
    if (max_vocab < 1 || max_vocab > INT32_MAX)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "max_vocab must be in [1, 2^31), got %lld", (long long)max_vocab);
    if (max_seqs < 1 || max_seqs > (1 << 24))
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "max_seqs must be in [1, 2^24], got %lld", (long long)max_seqs);
    if (max_rows < max_seqs || max_rows > INT32_MAX)
        return pyspec_fail(err, PYSPEC_ERR_SHAPE, "max_rows must be in [max_seqs, 2^31), got %lld",
                           (long long)max_rows);
    int32_t count = 0;
    pyspec_status st = pyspec_cuda_device_count(&count, err);
    if (st != PYSPEC_OK) return st;
    if (count == 0)
        return pyspec_fail(err, PYSPEC_ERR_CUDA, "no CUDA device: cudaGetDeviceCount found 0 devices");
    if (device < 0 || device >= count)
        return pyspec_fail(err, PYSPEC_ERR_CUDA, "device %d does not exist (%d CUDA devices)", device, count);
    DeviceScope scope(device);
    if (!scope.ok) return cuda_fail(err, "cudaSetDevice", scope.error);

    pyspec_cuda_verifier *v = (pyspec_cuda_verifier *)calloc(1, sizeof *v);
    if (!v) return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "cannot allocate the CUDA verifier");
    v->max_vocab = max_vocab;
    v->max_seqs = max_seqs;
    v->max_rows = max_rows;
    v->device = device;
    cudaError_t e;
    const char *what = "cudaMalloc";
    v->h_seqs = (pyspec_cuda_seq *)malloc(sizeof(pyspec_cuda_stage));
    if (!v->h_seqs) { pyspec_cuda_verifier_free(v); return pyspec_fail(err, PYSPEC_ERR_NO_MEMORY, "cannot allocate the staging buffer"); }
    if ((e = cudaMalloc((void **)&v->d_seqs, (size_t)max_seqs * sizeof(pyspec_cuda_seq))) != cudaSuccess) goto fail;
    if ((e = cudaMalloc((void **)&v->d_seq_err, (size_t)max_seqs * sizeof(pyspec_cuda_err))) != cudaSuccess) goto fail;
    if ((e = cudaMalloc((void **)&v->d_row_err, (size_t)max_rows * sizeof(pyspec_cuda_err))) != cudaSuccess) goto fail;
    if ((e = cudaMalloc((void **)&v->d_err, sizeof(pyspec_cuda_err))) != cudaSuccess) goto fail;
    what = "cudaDeviceGetAttribute";
    if ((e = cudaDeviceGetAttribute(&v->sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) goto fail;
    what = "cudaMalloc";
    if ((e = cudaMalloc((void **)&v->d_chunks, (size_t)PYSPEC_CUDA_SPLIT_BLOCKS(v->sms) * sizeof(pyspec_cuda_chunk))) != cudaSuccess) goto fail;
    if ((e = cudaMalloc((void **)&v->d_lists, (size_t)v->sms * PYSPEC_CUDA_UNION_MAX * sizeof(unsigned long long))) != cudaSuccess) goto fail;
    what = "cudaMemset";
    if ((e = cudaMemset(v->d_err, 0, sizeof(pyspec_cuda_err))) != cudaSuccess) goto fail;
    {
        int optin = 0;
        what = "cudaDeviceGetAttribute";
        if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) != cudaSuccess) goto fail;
        size_t want = pyspec_cuda_rows_smem(PYSPEC_MAX_PENALTY_WINDOW, PYSPEC_CUDA_MAX_SPARSE);
        size_t reserve = pyspec_cuda_rows_static_smem() + 1024; /* the kernel's static shared memory */
        v->max_dyn_smem = (size_t)optin > want + reserve ? want : (optin > (int)reserve ? (size_t)optin - reserve : 0);
        what = "cudaFuncSetAttribute";
        if ((e = pyspec_cuda_rows_set_max_smem(v->max_dyn_smem)) != cudaSuccess) goto fail;
        /* the chunk pass holds the penalty window alone */
        const size_t chunk_smem = PYSPEC_MAX_PENALTY_WINDOW * sizeof(int32_t);
        if ((e = pyspec_cuda_chunks_set_max_smem(chunk_smem < v->max_dyn_smem ? chunk_smem : v->max_dyn_smem)) != cudaSuccess) goto fail;
    }
    if ((e = cudaDeviceSynchronize()) != cudaSuccess) { what = "cudaDeviceSynchronize"; goto fail; }
    *out = v;
    return PYSPEC_OK;
fail:
    pyspec_cuda_verifier_free(v);
    return cuda_fail(err, what, e);
}

extern "C" pyspec_status pyspec_cuda_verifier_split_rows(pyspec_cuda_verifier *v, int32_t on,
                                                         pyspec_error *err) {
    if (!v) return pyspec_fail(err, PYSPEC_ERR_NULL, "verifier is NULL");
    v->split_rows = on != 0;
    return PYSPEC_OK;
}

static int32_t pow2_at_least(int64_t n) {
    if (n <= 0) return 0;
    int32_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

/* The host-side checks of a sequence (everything but its token ids, which are in device
 * memory and checked by the validate kernel), and the sizes the launch needs: the longest
 * penalty window and the sparse row width. */
static pyspec_status check_sequence(const pyspec_sequence *s, int64_t idx, int64_t n_vocab,
                                    int64_t *window, int64_t *sparse, pyspec_error *err) {
    pyspec_status st = pyspec_check_sequence_shape(s, idx, n_vocab, PYSPEC_MAX_DRAFT, err);
    if (st != PYSPEC_OK) return st;
    const pyspec_sampling_params *p = &s->params;
    *window = 0;
    if (pyspec_penalties_on(p)) {
        int64_t w = p->penalty_last_n < 0 ? p->n_penalty_history + s->n_draft : p->penalty_last_n;
        int64_t longest = p->n_penalty_history + s->n_draft; /* the bonus row's window */
        *window = w < longest ? w : longest;
    }
    const pyspec_draft_probs *dp = s->draft_probs;
    *sparse = 0;
    if (dp && s->n_draft > 0 && dp->tokens) {
        if (dp->n_per_row > PYSPEC_CUDA_MAX_SPARSE)
            return pyspec_fail(err, PYSPEC_ERR_CAPACITY,
                               "seqs[%lld].draft_probs is sparse with %lld entries per row; the CUDA "
                               "back end takes at most %d (pass dense rows instead)",
                               (long long)idx, (long long)dp->n_per_row, PYSPEC_CUDA_MAX_SPARSE);
        *sparse = dp->n_per_row;
    }
    return PYSPEC_OK;
}

extern "C" pyspec_status pyspec_cuda_verify_batch(pyspec_cuda_verifier *v,
                                                  const pyspec_sequence *seqs, int64_t n_seqs,
                                                  int64_t n_vocab, int32_t dtype, void *stream,
                                                  pyspec_error *err) {
    pyspec_status checked = pyspec_check_call_vocab(v, v ? v->max_vocab : 0, n_vocab, dtype, err);
    if (checked != PYSPEC_OK) return checked;
    checked = pyspec_check_sequence_list(seqs, n_seqs, err);
    if (checked != PYSPEC_OK) return checked;
    if (n_seqs > v->max_seqs)
        return pyspec_fail(err, PYSPEC_ERR_CAPACITY, "n_seqs %lld exceeds the verifier's max_seqs %lld",
                           (long long)n_seqs, (long long)v->max_seqs);
    int64_t total_rows = 0, window = 0, sparse = 0;
    for (int64_t s = 0; s < n_seqs; ++s) {
        int64_t w = 0, sp = 0;
        pyspec_status st = check_sequence(&seqs[s], s, n_vocab, &w, &sp, err);
        if (st != PYSPEC_OK) return st;
        total_rows += seqs[s].n_draft + 1;
        if (w > window) window = w;
        if (sp > sparse) sparse = sp;
    }
    if (total_rows > v->max_rows)
        return pyspec_fail(err, PYSPEC_ERR_CAPACITY, "the call has %lld verify rows; the verifier's max_rows is %lld",
                           (long long)total_rows, (long long)v->max_rows);
    if (n_seqs == 0) return PYSPEC_OK;
    const int32_t window_cap = pow2_at_least(window), sparse_cap = pow2_at_least(sparse);
    if (pyspec_cuda_rows_smem(window_cap, sparse_cap) > v->max_dyn_smem)
        return pyspec_fail(err, PYSPEC_ERR_CAPACITY,
                           "a penalty window of %lld tokens with sparse draft rows of %lld entries "
                           "needs more shared memory than this device offers",
                           (long long)window, (long long)sparse);

    DeviceScope scope(v->device);
    if (!scope.ok) return cuda_fail(err, "cudaSetDevice", scope.error);
    cudaStream_t st = (cudaStream_t)stream;
    cudaError_t e;
    /* Descriptors go by value in the stage kernels' parameters, PYSPEC_CUDA_STAGE_SEQS per
     * launch (one launch up to that many sequences): no host memory is read after a launch
     * returns, so nothing here waits for the device. */
    pyspec_cuda_stage *batch = (pyspec_cuda_stage *)v->h_seqs;
    int64_t base = 0;
    for (int64_t first = 0; first < n_seqs; first += PYSPEC_CUDA_STAGE_SEQS) {
        const int64_t n = n_seqs - first < PYSPEC_CUDA_STAGE_SEQS ? n_seqs - first : PYSPEC_CUDA_STAGE_SEQS;
        batch->n = (int32_t)n;
        batch->first = (int32_t)first;
        for (int64_t j = 0; j < n; ++j) {
            pyspec_cuda_stage_seq(&batch->seqs[j], &seqs[first + j], base);
            base += seqs[first + j].n_draft + 1;
        }
        if ((e = pyspec_cuda_launch_stage(batch, v->d_seqs, st)) != cudaSuccess)
            return cuda_fail(err, "the stage kernel launch", e);
    }
    if ((e = pyspec_cuda_launch_validate(v->d_seqs, n_seqs, n_vocab, v->d_seq_err, st)) != cudaSuccess)
        return cuda_fail(err, "the validate kernel launch", e);
    /* Split rows (when on): with fewer rows than multiprocessors, several blocks scan each
     * row first (stage.h). */
    const int64_t wanted = v->split_rows ? pyspec_cuda_wanted_chunks(total_rows, n_vocab, v->sms) : 1;
    const pyspec_cuda_split split = pyspec_cuda_split_rows(seqs, n_seqs, n_vocab, wanted);
    if (!pyspec_cuda_split_fits(split, total_rows, v->sms))
        return pyspec_fail(err, PYSPEC_ERR_CAPACITY,
                           "split rows: %lld rows in %d chunks with lists of %d exceed the verifier's "
                           "workspace (a bug in the split plan; turn split rows off)",
                           (long long)total_rows, split.chunks, split.list_len);
    if (split.chunks > 1 &&
        (e = pyspec_cuda_launch_chunks(v->d_seqs, n_seqs, total_rows, n_vocab, dtype, window_cap, split,
                                       v->d_seq_err, v->d_chunks, v->d_lists, st)) != cudaSuccess)
        return cuda_fail(err, "the chunk kernel launch", e);
    if ((e = pyspec_cuda_launch_rows(v->d_seqs, n_seqs, total_rows, n_vocab, dtype, window_cap,
                                     sparse_cap, split, v->d_chunks, v->d_lists, v->d_seq_err,
                                     v->d_row_err, st)) != cudaSuccess)
        return cuda_fail(err, "the row kernel launch", e);
    if ((e = pyspec_cuda_launch_finish(v->d_seqs, n_seqs, v->d_seq_err, v->d_row_err, v->d_err, st)) != cudaSuccess)
        return cuda_fail(err, "the finish kernel launch", e);
    return PYSPEC_OK;
}

/* The CPU path's message for a device-side failure, from the same builders (errors.c).
 * Token ids are checked before any row runs, so their messages name the field alone; a
 * row's failure is named after its sequence, as verify.c reports it. */
static pyspec_status report(const pyspec_cuda_err *e, pyspec_error *err) {
    pyspec_sequence_names names;
    pyspec_name_sequence(e->seq, &names);
    const int64_t n_vocab = (int64_t)e->q; /* the token kinds carry n_vocab in q */
    pyspec_error row_err = { 0, { 0 } };
    pyspec_bad_logit bad = { e->index, e->value };
    pyspec_status status;
    switch (e->kind) {
    case PYSPEC_CUDA_ERR_HISTORY_TOKEN:
        return pyspec_fail_history_token(err, names.params, e->index, e->token, n_vocab);
    case PYSPEC_CUDA_ERR_DRAFT_TOKEN:
        return pyspec_fail_draft_token(err, names.seq, e->index, e->token, n_vocab);
    case PYSPEC_CUDA_ERR_SPARSE_TOKEN:
        return pyspec_fail_sparse_token(err, names.seq, e->row, e->index, e->token, n_vocab);
    case PYSPEC_CUDA_ERR_LOGIT:
        status = pyspec_fail_logits(&row_err, "target_logits", e->row, &bad);
        break;
    case PYSPEC_CUDA_ERR_NO_FINITE:
        bad.index = -1;
        status = pyspec_fail_logits(&row_err, "target_logits", e->row, &bad);
        break;
    case PYSPEC_CUDA_ERR_DRAFTED_Q:
        status = pyspec_fail_drafted_q(&row_err, e->row, e->token, e->q);
        break;
    case PYSPEC_CUDA_ERR_Q:
        status = pyspec_fail_kept_q(&row_err, e->row, e->token, e->q);
        break;
    default:
        return pyspec_fail(err, (pyspec_status)e->status, "%s: device-side failure (kind %d)",
                           names.seq, e->kind);
    }
    return pyspec_fail_in_sequence(err, status, e->seq, row_err.message);
}

extern "C" pyspec_status pyspec_cuda_verifier_last_error(pyspec_cuda_verifier *v, void *stream,
                                                         pyspec_error *err) {
    if (!v) return pyspec_fail(err, PYSPEC_ERR_NULL, "verifier is NULL");
    DeviceScope scope(v->device);
    if (!scope.ok) return cuda_fail(err, "cudaSetDevice", scope.error);
    cudaStream_t st = (cudaStream_t)stream;
    cudaError_t e;
    pyspec_cuda_err rec;
    if ((e = cudaStreamSynchronize(st)) != cudaSuccess) return cuda_fail(err, "cudaStreamSynchronize", e);
    if ((e = cudaMemcpy(&rec, v->d_err, sizeof rec, cudaMemcpyDeviceToHost)) != cudaSuccess)
        return cuda_fail(err, "cudaMemcpy of the error record", e);
    if (rec.status == PYSPEC_OK) {
        if (err) { err->status = PYSPEC_OK; err->message[0] = '\0'; }
        return PYSPEC_OK;
    }
    if ((e = cudaMemset(v->d_err, 0, sizeof rec)) != cudaSuccess) return cuda_fail(err, "cudaMemset", e);
    return report(&rec, err);
}

extern "C" pyspec_status pyspec_cuda_verify_batch_sync(pyspec_cuda_verifier *v,
                                                       const pyspec_sequence *seqs,
                                                       int64_t n_seqs, int64_t n_vocab,
                                                       int32_t dtype, void *stream,
                                                       pyspec_error *err) {
    pyspec_status st = pyspec_cuda_verify_batch(v, seqs, n_seqs, n_vocab, dtype, stream, err);
    if (st != PYSPEC_OK) return st;
    return pyspec_cuda_verifier_last_error(v, stream, err);
}

extern "C" pyspec_status pyspec_cuda_malloc(int32_t device, int64_t bytes, void **out,
                                            pyspec_error *err) {
    if (!out) return pyspec_fail(err, PYSPEC_ERR_NULL, "out is NULL");
    *out = NULL;
    if (bytes < 0) return pyspec_fail(err, PYSPEC_ERR_SHAPE, "bytes must be >= 0, got %lld", (long long)bytes);
    int32_t count = 0;
    pyspec_status st = pyspec_cuda_device_count(&count, err);
    if (st != PYSPEC_OK) return st;
    if (device < 0 || device >= count)
        return pyspec_fail(err, PYSPEC_ERR_CUDA, "device %d does not exist (%d CUDA devices)", device, count);
    DeviceScope scope(device);
    if (!scope.ok) return cuda_fail(err, "cudaSetDevice", scope.error);
    cudaError_t e = cudaMalloc(out, bytes > 0 ? (size_t)bytes : 1);
    if (e != cudaSuccess) {
        *out = NULL;
        return cuda_fail(err, "cudaMalloc", e);
    }
    return PYSPEC_OK;
}

extern "C" void pyspec_cuda_free(int32_t device, void *ptr) {
    if (!ptr) return;
    DeviceScope scope(device);
    cudaFree(ptr);
}

extern "C" pyspec_status pyspec_cuda_memcpy(int32_t device, void *dst, const void *src,
                                            int64_t bytes, int32_t kind, void *stream,
                                            pyspec_error *err) {
    if (bytes < 0) return pyspec_fail(err, PYSPEC_ERR_SHAPE, "bytes must be >= 0, got %lld", (long long)bytes);
    if (bytes == 0) return PYSPEC_OK;
    if (!dst || !src) return pyspec_fail(err, PYSPEC_ERR_NULL, "%s is NULL", dst ? "src" : "dst");
    if (kind < 0 || kind > 2) return pyspec_fail(err, PYSPEC_ERR_PARAM, "kind must be 0, 1 or 2, got %d", kind);
    static const cudaMemcpyKind kinds[3] = { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                             cudaMemcpyDeviceToDevice };
    DeviceScope scope(device);
    if (!scope.ok) return cuda_fail(err, "cudaSetDevice", scope.error);
    cudaStream_t st = (cudaStream_t)stream;
    cudaError_t e = cudaMemcpyAsync(dst, src, (size_t)bytes, kinds[kind], st);
    if (e != cudaSuccess) return cuda_fail(err, "cudaMemcpyAsync", e);
    if ((e = cudaStreamSynchronize(st)) != cudaSuccess) return cuda_fail(err, "cudaStreamSynchronize", e);
    return PYSPEC_OK;
}
