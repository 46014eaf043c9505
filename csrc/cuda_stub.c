/*
 * cuda_stub.c - the CUDA entry points of a build without the CUDA back end: they exist (the
 * Python binding declares them) and fail with PYSPEC_ERR_CUDA.
 */
#include "internal.h"

#define NO_CUDA "pyspec was built without CUDA (rebuild with a CUDA compiler and -DPYSPEC_CUDA=ON)"

pyspec_status pyspec_cuda_device_count(int32_t *out_count, pyspec_error *err) {
    if (out_count) *out_count = 0;
    return pyspec_fail(err, PYSPEC_ERR_CUDA, NO_CUDA);
}

pyspec_status pyspec_cuda_verifier_create(int64_t max_vocab, int64_t max_seqs, int64_t max_rows,
                                          int32_t device, pyspec_cuda_verifier **out,
                                          pyspec_error *err) {
    if (out) *out = NULL;
    return pyspec_fail(err, PYSPEC_ERR_CUDA, NO_CUDA);
}

void pyspec_cuda_verifier_free(pyspec_cuda_verifier *verifier) { (void)verifier; }

pyspec_status pyspec_cuda_verifier_split_rows(pyspec_cuda_verifier *verifier, int32_t on,
                                              pyspec_error *err) {
    return pyspec_fail(err, PYSPEC_ERR_CUDA, NO_CUDA);
}

pyspec_status pyspec_cuda_verify_batch(pyspec_cuda_verifier *verifier, const pyspec_sequence *seqs,
                                       int64_t n_seqs, int64_t n_vocab, int32_t dtype,
                                       void *stream, pyspec_error *err) {
    return pyspec_fail(err, PYSPEC_ERR_CUDA, NO_CUDA);
}

pyspec_status pyspec_cuda_verifier_last_error(pyspec_cuda_verifier *verifier, void *stream,
                                              pyspec_error *err) {
    return pyspec_fail(err, PYSPEC_ERR_CUDA, NO_CUDA);
}

pyspec_status pyspec_cuda_verify_batch_sync(pyspec_cuda_verifier *verifier,
                                            const pyspec_sequence *seqs, int64_t n_seqs,
                                            int64_t n_vocab, int32_t dtype, void *stream,
                                            pyspec_error *err) {
    return pyspec_fail(err, PYSPEC_ERR_CUDA, NO_CUDA);
}

pyspec_status pyspec_cuda_malloc(int32_t device, int64_t bytes, void **out, pyspec_error *err) {
    if (out) *out = NULL;
    return pyspec_fail(err, PYSPEC_ERR_CUDA, NO_CUDA);
}

void pyspec_cuda_free(int32_t device, void *ptr) { (void)device; (void)ptr; }

pyspec_status pyspec_cuda_memcpy(int32_t device, void *dst, const void *src, int64_t bytes,
                                 int32_t kind, void *stream, pyspec_error *err) {
    return pyspec_fail(err, PYSPEC_ERR_CUDA, NO_CUDA);
}
