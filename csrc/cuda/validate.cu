/*
 * validate.cu - the small kernels around the row kernel:
 *   stage:    copies descriptors passed by value (kernel parameters) into device memory;
 *   validate: one block per sequence; checks the token ids the host cannot read (penalty
 *             history, drafts, sparse draft tokens) and resets out_n_accepted to n_draft,
 *             which the row kernel then lowers to the first stopping row;
 *   finish:   one block; finds the first failure in the CPU path's order (every sequence's
 *             validation first, then the stopping row of each sequence) and keeps it in the
 *             sticky error record unless an earlier call already left one there.
 */
#include "cuda_internal.h"

#define VALIDATE_THREADS 256

/* Lowest index in [0, n) whose token is outside [0, n_vocab), or n. */
static __device__ int64_t first_bad_token(const int32_t *tokens, int64_t begin, int64_t n,
                                          int64_t stride_rows, int64_t per_row, int64_t n_vocab,
                                          int64_t *shared_min) {
    if (threadIdx.x == 0) *shared_min = INT64_MAX;
    __syncthreads();
    int64_t best = INT64_MAX;
    for (int64_t j = begin + threadIdx.x; j < n; j += blockDim.x) {
        /* flat index j -> (row, column) for sparse rows; per_row == 0 means contiguous */
        int64_t at = per_row ? (j / per_row) * stride_rows + j % per_row : j;
        int32_t t = tokens[at];
        if ((t < 0 || t >= n_vocab) && j < best) best = j;
    }
    if (best != INT64_MAX) atomicMin((long long *)shared_min, (long long)best);
    __syncthreads();
    int64_t r = *shared_min;
    __syncthreads();
    return r == INT64_MAX ? n : r;
}

/* Records a token id outside [0, n_vocab) (the same record for every list that is checked). */
static __device__ void set_token_error(pyspec_cuda_err *e, int kind, int64_t row, int64_t index,
                                       int32_t token, int64_t n_vocab) {
    e->status = PYSPEC_ERR_TOKEN;
    e->kind = kind;
    e->row = row;
    e->index = index;
    e->token = token;
    e->q = (double)n_vocab;
}

static __global__ void validate_kernel(const pyspec_cuda_seq *seqs, int64_t n_vocab,
                                       pyspec_cuda_err *seq_err) {
    __shared__ int64_t shared_min;
    const int64_t s = blockIdx.x;
    const pyspec_cuda_seq *q = &seqs[s];
    pyspec_cuda_err e;
    e.status = PYSPEC_OK;
    e.kind = PYSPEC_CUDA_ERR_NONE;
    e.seq = s;
    e.row = 0;
    e.index = 0;
    e.token = 0;
    e.value = 0.0f;
    e.q = 0.0;
    /* The CPU path's order: penalty history, drafts, sparse draft tokens. */
    if (q->pen_on && q->n_history > 0) {
        int64_t used = q->pen_last_n < 0 || q->pen_last_n > q->n_history ? q->n_history : q->pen_last_n;
        int64_t j = first_bad_token(q->history, q->n_history - used, q->n_history, 0, 0, n_vocab,
                                    &shared_min);
        if (j < q->n_history)
            set_token_error(&e, PYSPEC_CUDA_ERR_HISTORY_TOKEN, 0, j, q->history[j], n_vocab);
    }
    if (e.status == PYSPEC_OK && q->n_draft > 0) {
        int64_t j = first_bad_token(q->draft, 0, q->n_draft, 0, 0, n_vocab, &shared_min);
        if (j < q->n_draft)
            set_token_error(&e, PYSPEC_CUDA_ERR_DRAFT_TOKEN, 0, j, q->draft[j], n_vocab);
    }
    if (e.status == PYSPEC_OK && q->q_probs && q->q_tokens && q->n_draft > 0 && q->q_n > 0) {
        int64_t n = q->n_draft * q->q_n;
        int64_t j = first_bad_token(q->q_tokens, 0, n, q->q_stride, q->q_n, n_vocab, &shared_min);
        if (j < n) {
            int64_t row = j / q->q_n, col = j % q->q_n;
            set_token_error(&e, PYSPEC_CUDA_ERR_SPARSE_TOKEN, row, col,
                            q->q_tokens[row * q->q_stride + col], n_vocab);
        }
    }
    if (threadIdx.x == 0) {
        seq_err[s] = e;
        *q->out_n_accepted = q->n_draft;
    }
}

static __global__ void finish_kernel(const pyspec_cuda_seq *seqs, int64_t n_seqs,
                                     const pyspec_cuda_err *seq_err,
                                     const pyspec_cuda_err *row_err, pyspec_cuda_err *err) {
    __shared__ long long first;
    if (threadIdx.x == 0) first = LLONG_MAX;
    __syncthreads();
    long long mine = LLONG_MAX;
    for (int64_t s = threadIdx.x; s < n_seqs; s += blockDim.x) {
        long long key = LLONG_MAX;
        if (seq_err[s].status != PYSPEC_OK) {
            key = s;
        } else {
            int64_t stop = *seqs[s].out_n_accepted;
            if (row_err[seqs[s].row_base + stop].status != PYSPEC_OK) key = n_seqs + s;
        }
        if (key < mine) mine = key;
    }
    if (mine != LLONG_MAX) atomicMin(&first, mine);
    __syncthreads();
    if (threadIdx.x == 0 && first != LLONG_MAX && err->status == PYSPEC_OK) {
        if (first < n_seqs) {
            *err = seq_err[first];
        } else {
            int64_t s = first - n_seqs;
            *err = row_err[seqs[s].row_base + *seqs[s].out_n_accepted];
        }
    }
}

static __global__ void stage_kernel(const pyspec_cuda_stage batch, pyspec_cuda_seq *dst) {
    const uint32_t *src = (const uint32_t *)batch.seqs;
    uint32_t *out = (uint32_t *)(dst + batch.first);
    const int words = (int)(batch.n * sizeof(pyspec_cuda_seq) / 4);
    for (int w = threadIdx.x; w < words; w += blockDim.x) out[w] = src[w];
}

#ifndef PYSPEC_CUDA_EMULATE
cudaError_t pyspec_cuda_launch_stage(const pyspec_cuda_stage *batch, pyspec_cuda_seq *d_seqs,
                                     cudaStream_t stream) {
    stage_kernel<<<1, 256, 0, stream>>>(*batch, d_seqs);
    return cudaGetLastError();
}

cudaError_t pyspec_cuda_launch_validate(const pyspec_cuda_seq *d_seqs, int64_t n_seqs,
                                        int64_t n_vocab, pyspec_cuda_err *d_seq_err,
                                        cudaStream_t stream) {
    validate_kernel<<<(unsigned)n_seqs, VALIDATE_THREADS, 0, stream>>>(d_seqs, n_vocab, d_seq_err);
    return cudaGetLastError();
}

cudaError_t pyspec_cuda_launch_finish(const pyspec_cuda_seq *d_seqs, int64_t n_seqs,
                                      const pyspec_cuda_err *d_seq_err,
                                      const pyspec_cuda_err *d_row_err, pyspec_cuda_err *d_err,
                                      cudaStream_t stream) {
    finish_kernel<<<1, 256, 0, stream>>>(d_seqs, n_seqs, d_seq_err, d_row_err, d_err);
    return cudaGetLastError();
}
#endif /* PYSPEC_CUDA_EMULATE */
