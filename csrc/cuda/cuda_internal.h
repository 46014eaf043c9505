/*
 * cuda_internal.h - what the CUDA sources of pyspec share: the flattened sequence
 * descriptor copied to the device, the device error records, the verifier handle and the
 * kernel launchers. Not installed.
 */
#ifndef PYSPEC_CUDA_INTERNAL_H
#define PYSPEC_CUDA_INTERNAL_H

#ifndef PYSPEC_CUDA_EMULATE /* tests/cuda_emu runs the kernels on the host */
#  include <cuda_runtime.h>
#endif
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "../internal.h"
}

#define PYSPEC_CUDA_THREADS 512          /* threads of a row block                      */
#define PYSPEC_CUDA_MAX_SPARSE 4096      /* entries of one sparse draft row (shared mem) */
#define PYSPEC_CUDA_CAND_MAX 1024        /* top-k survivors ranked in shared memory      */

/* Split rows: when a call has fewer rows than the device has multiprocessors, each row is
 * first scanned by several blocks, one chunk of the vocabulary each (verify_rows.cu's chunk
 * pass), and the row's block combines what they found. A chunk is at least MIN_CHUNK
 * tokens; a row has at most MAX_CHUNKS; a sampled top-k row's chunks hand on their own top
 * k, and the union of a row's lists is ranked in the short list's shared memory, so it
 * holds at most UNION_MAX (a call with top-k 40 splits its rows into 25 chunks at most). */
#define PYSPEC_CUDA_MAX_CHUNKS 64
#define PYSPEC_CUDA_MIN_CHUNK 2048
#define PYSPEC_CUDA_UNION_MAX PYSPEC_CUDA_CAND_MAX

/* One sequence as the kernels see it: every pointer is a device pointer. */
typedef struct pyspec_cuda_seq {
    const void    *logits;
    int64_t        row_stride;
    const int32_t *draft;
    int64_t        n_draft;
    const float   *q_probs;    /* NULL: point-mass drafts                        */
    const int32_t *q_tokens;   /* NULL: dense q                                  */
    int64_t        q_stride;
    int64_t        q_n;        /* sparse entries per row                          */
    float          temperature;
    int32_t        top_k;
    float          top_p;
    float          min_p;
    float          log_min_p;  /* logf(min_p), computed on the host (min-p on only) */
    uint64_t       seed;
    int32_t        pen_on;
    int64_t        pen_last_n;
    float          pen_repeat, pen_freq, pen_present;
    const int32_t *history;
    int64_t        n_history;
    int64_t        position;
    int32_t       *out_tokens;
    float         *out_logprobs;
    float         *out_top_probs;
    int64_t       *out_n_accepted; /* also the "first stopping row" while rows run     */
    int64_t        row_base;       /* index of this sequence's row 0 among all rows    */
} pyspec_cuda_seq;

/* What one chunk of a row holds (the chunk pass's output): the first invalid index
 * (INT64_MAX: none), the best finite candidate as (float key << 32 | ~id) (0: none), the
 * number of finite logits, how many of its top-k candidates it listed, and, when the row's
 * log-probabilities are asked for, the raw maximum and the softmax sum relative to it. */
typedef struct pyspec_cuda_chunk {
    int64_t            bad;
    unsigned long long best_key;
    int64_t            n_finite;
    int32_t            n_listed;
    float              raw_max;
    double             raw_z;
} pyspec_cuda_chunk;

/* How a call's rows are split: chunks per row (1: no chunk pass) and the length of each
 * chunk's candidate list (the largest top-k among the sampled rows that take it; 0: none). */
typedef struct pyspec_cuda_split {
    int32_t chunks;
    int32_t list_len;
} pyspec_cuda_split;

/* What went wrong on the device, enough to print the CPU path's message. */
enum pyspec_cuda_err_kind {
    PYSPEC_CUDA_ERR_NONE = 0,
    PYSPEC_CUDA_ERR_HISTORY_TOKEN,  /* index = j into penalty_history, token          */
    PYSPEC_CUDA_ERR_DRAFT_TOKEN,    /* index = i into draft_tokens, token              */
    PYSPEC_CUDA_ERR_SPARSE_TOKEN,   /* row, index = j, token                           */
    PYSPEC_CUDA_ERR_LOGIT,          /* row, index, value (NaN or +inf)                 */
    PYSPEC_CUDA_ERR_NO_FINITE,      /* row                                             */
    PYSPEC_CUDA_ERR_DRAFTED_Q,      /* row, token, q: q(x) not in (0, 1]               */
    PYSPEC_CUDA_ERR_Q               /* row, token, q: q(t) not in [0, 1] on the kept set */
};

typedef struct pyspec_cuda_err {
    int32_t status; /* a pyspec_status; 0: none */
    int32_t kind;   /* a pyspec_cuda_err_kind   */
    int64_t seq;
    int64_t row;
    int64_t index;
    int32_t token;
    float   value;
    double  q;      /* the q of the DRAFTED_Q / Q kinds; n_vocab for the token kinds */
} pyspec_cuda_err;

struct pyspec_cuda_verifier {
    int64_t          max_vocab, max_seqs, max_rows;
    int32_t          device;
    pyspec_cuda_seq *h_seqs;    /* host staging, max_seqs entries                */
    pyspec_cuda_seq *d_seqs;    /* device copy (written by the stage kernel)     */
    pyspec_cuda_err *d_seq_err; /* max_seqs: validation result of each sequence  */
    pyspec_cuda_err *d_row_err; /* max_rows: result of each row                  */
    pyspec_cuda_err *d_err;     /* 1: the sticky first failure                   */
    size_t           max_dyn_smem;
    int32_t          sms;       /* multiprocessors: a call with fewer rows splits them */
    int32_t          split_rows; /* pyspec_cuda_verifier_split_rows                   */
    pyspec_cuda_chunk *d_chunks; /* PYSPEC_CUDA_SPLIT_BLOCKS(sms) chunk records      */
    unsigned long long *d_lists; /* sms * PYSPEC_CUDA_UNION_MAX listed candidates    */
};

/* Chunk records a verifier keeps: rows < sms, and chunks <= ceil(2 sms / rows). */
#define PYSPEC_CUDA_SPLIT_BLOCKS(sms) (3 * (int64_t)(sms))

/* Descriptors travel to the device as kernel parameters (by value: nothing on the host is
 * read after the launch returns, so a call needs no host synchronisation and a captured
 * CUDA graph keeps its own copy). Kernel parameters may take up to 32764 bytes on sm_70+
 * since CUDA 12.1; one stage launch carries this many descriptors. */
#define PYSPEC_CUDA_STAGE_SEQS 96
typedef struct pyspec_cuda_stage {
    int32_t         n, first;
    pyspec_cuda_seq seqs[PYSPEC_CUDA_STAGE_SEQS];
} pyspec_cuda_stage;

/* Launchers (validate.cu / verify_rows.cu). All enqueue on `stream` and return the launch
 * error, if any. */
cudaError_t pyspec_cuda_launch_stage(const pyspec_cuda_stage *batch, pyspec_cuda_seq *d_seqs,
                                     cudaStream_t stream);
cudaError_t pyspec_cuda_launch_validate(const pyspec_cuda_seq *d_seqs, int64_t n_seqs,
                                        int64_t n_vocab, pyspec_cuda_err *d_seq_err,
                                        cudaStream_t stream);
cudaError_t pyspec_cuda_launch_chunks(const pyspec_cuda_seq *d_seqs, int64_t n_seqs,
                                      int64_t total_rows, int64_t n_vocab, int32_t dtype,
                                      int32_t window_cap, pyspec_cuda_split split,
                                      const pyspec_cuda_err *d_seq_err,
                                      pyspec_cuda_chunk *d_chunks, unsigned long long *d_lists,
                                      cudaStream_t stream);
cudaError_t pyspec_cuda_launch_rows(const pyspec_cuda_seq *d_seqs, int64_t n_seqs,
                                    int64_t total_rows, int64_t n_vocab, int32_t dtype,
                                    int32_t window_cap, int32_t sparse_cap,
                                    pyspec_cuda_split split, const pyspec_cuda_chunk *d_chunks,
                                    const unsigned long long *d_lists,
                                    const pyspec_cuda_err *d_seq_err, pyspec_cuda_err *d_row_err,
                                    cudaStream_t stream);
cudaError_t pyspec_cuda_launch_finish(const pyspec_cuda_seq *d_seqs, int64_t n_seqs,
                                      const pyspec_cuda_err *d_seq_err,
                                      const pyspec_cuda_err *d_row_err, pyspec_cuda_err *d_err,
                                      cudaStream_t stream);
/* Dynamic shared memory of a row block for the given capacities, and the opt-in. */
size_t pyspec_cuda_rows_smem(int32_t window_cap, int32_t sparse_cap);
cudaError_t pyspec_cuda_rows_set_max_smem(size_t bytes);
cudaError_t pyspec_cuda_chunks_set_max_smem(size_t bytes);
size_t pyspec_cuda_rows_static_smem(void);

#endif /* PYSPEC_CUDA_INTERNAL_H */
