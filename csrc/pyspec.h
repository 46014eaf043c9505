/*
 * pyspec.h - the one public C header of pyspec, a fused speculative-decoding verifier.
 *
 * One call takes the target model's logits for all n_draft + 1 verify rows of a sequence
 * (and the draft's probabilities, when there are any), applies llama.cpp's sampling
 * transforms (top-k, top-p, min-p, temperature), decides acceptance by modified rejection
 * sampling (Leviathan et al. 2023, Chen et al. 2023) and draws the corrective or bonus
 * token, in one streaming pass per vocabulary-wide row.
 *
 * Every random draw is a pure function of (seed, absolute position, purpose), computed with
 * Philox4x32-10 (Salmon et al. 2011): a draw that belongs to a rejected token never advances
 * any state, and results do not depend on n_draft, on the batch, or on the thread count.
 * The draw itself is exact arithmetic (draw.h): weights exp((logit - max) / T) from a portable
 * exponential, held as 64-bit fixed-point integers, and an inverse-CDF draw that takes the
 * first kept token in ascending token-id order whose running weight sum exceeds
 * floor(u * total). So every back end (CPU scalar or SIMD, CUDA) emits the same tokens.
 *
 * Conventions (after ggml.h): element counts and strides are int64_t and counted in
 * elements, not bytes; every function returns a pyspec_status and, when `err` is not NULL,
 * writes a message naming the offending argument into it. The library never aborts and
 * never writes outside the buffers it is given. Enum values are part of the ABI: add new
 * values at the end.
 *
 * The block between PYSPEC_CDEF_BEGIN and PYSPEC_CDEF_END is read verbatim by the Python
 * binding (cffi); keep it free of macros other than PYSPEC_API and of inline code.
 */
#ifndef PYSPEC_H
#define PYSPEC_H

#include <stdint.h>

#if defined(_WIN32) && defined(PYSPEC_SHARED)
#  ifdef PYSPEC_BUILD
#    define PYSPEC_API __declspec(dllexport)
#  else
#    define PYSPEC_API __declspec(dllimport)
#  endif
#elif defined(PYSPEC_SHARED)
#  define PYSPEC_API __attribute__((visibility("default")))
#else
#  define PYSPEC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* PYSPEC_CDEF_BEGIN */

/* Status codes. 0 is success. Add new values at the end. */
typedef enum pyspec_status {
    PYSPEC_OK              = 0,
    PYSPEC_ERR_NULL        = 1,  /* a required pointer is NULL                               */
    PYSPEC_ERR_SHAPE       = 2,  /* a count, stride or size is out of range                  */
    PYSPEC_ERR_PARAM       = 3,  /* a sampling parameter is out of range or NaN              */
    PYSPEC_ERR_TOKEN       = 4,  /* a token id is outside [0, n_vocab)                       */
    PYSPEC_ERR_LOGITS      = 5,  /* a logit is NaN or +inf, or a row is entirely -inf        */
    PYSPEC_ERR_DRAFT_PROBS = 6,  /* a draft probability is NaN, negative, > 1, or 0 at the drafted token */
    PYSPEC_ERR_DTYPE       = 7,  /* unknown element type                                     */
    PYSPEC_ERR_NO_MEMORY   = 8,  /* allocation failed (creating a verifier, growing a suffix index) */
    PYSPEC_ERR_CAPACITY    = 9,  /* the call needs more vocabulary or threads than the verifier was created for */
    PYSPEC_ERR_CUDA        = 10, /* a CUDA runtime call failed                               */
    PYSPEC_ERR_LLAMA       = 11  /* llama.cpp refused or failed (the in-graph sampler)       */
} pyspec_status;

/* Element type of a logits buffer. Rows are read in their own type: no up-cast copy. */
typedef enum pyspec_dtype {
    PYSPEC_F32  = 0,
    PYSPEC_F16  = 1,  /* IEEE binary16 */
    PYSPEC_BF16 = 2   /* bfloat16      */
} pyspec_dtype;

/* Which random stream a draw belongs to. Each purpose has its own Philox counter, so an
 * acceptance draw can never be reused as a residual draw or as a drafter's draw (the
 * vLLM bug that biased output toward the draft). Drafters should draw with
 * PYSPEC_PURPOSE_DRAFT. Add new values at the end. */
typedef enum pyspec_purpose {
    PYSPEC_PURPOSE_SAMPLE   = 1,  /* a plain sample: point-mass verify rows and the bonus token */
    PYSPEC_PURPOSE_ACCEPT   = 2,  /* the uniform u of the acceptance test u < p(x)/q(x)         */
    PYSPEC_PURPOSE_RESIDUAL = 3,  /* the draw from norm(max(0, p - q)) after a rejection        */
    PYSPEC_PURPOSE_DRAFT    = 4   /* reserved for drafters                                      */
} pyspec_purpose;

/* Sampling transforms, applied in llama.cpp's chain order as llama-cpp-python builds it:
 * repetition penalties, then top-k, top-p, min-p (on the untempered, penalised logits),
 * temperature, then the draw. top-p keeps the shortest prefix of the tokens ranked by logit
 * (ties: lower id first) whose fixed-point weight exp(logit - max) reaches top_p of the sum
 * over the top-k survivors (top-k on) or over the whole row (top-k off); min-p keeps logits
 * >= max + logf(min_p), in float as llama.cpp.
 *   temperature <= 0 : greedy (argmax of the penalised logits; ties to the lowest id)
 *   top_k <= 0       : top-k off
 *   top_p == 1       : top-p off; must lie in (0, 1]
 *   min_p <= 0       : min-p off; must be <= 1
 * Penalties (llama.cpp's `penalties` sampler): every token that occurs c > 0 times in the
 * window gets logit <= 0 ? logit * penalty_repeat : logit / penalty_repeat, then
 * - c * penalty_freq - penalty_present. The window is the last penalty_last_n tokens of
 * penalty_history (for verify row i: of penalty_history followed by draft_tokens[0..i)).
 * Off when penalty_last_n == 0 or (repeat, freq, present) == (1, 0, 0); penalty_last_n < 0
 * means the whole history. Windows hold at most PYSPEC_MAX_PENALTY_WINDOW tokens.
 * A zero-initialised struct has penalties off. Tokens with logit -inf are never sampled. */
typedef struct pyspec_sampling_params {
    float          temperature;
    int32_t        top_k;
    float          top_p;
    float          min_p;
    uint64_t       seed;
    int32_t        penalty_last_n;
    float          penalty_repeat;   /* in [1e-6, 1e6] */
    float          penalty_freq;
    float          penalty_present;
    const int32_t *penalty_history;  /* tokens generated so far (the sampler's accepted ones) */
    int64_t        n_penalty_history;
} pyspec_sampling_params;

/* Limits. penalty_repeat must lie in [1 / PYSPEC_MAX_PENALTY, PYSPEC_MAX_PENALTY] and
 * |penalty_freq|, |penalty_present| <= PYSPEC_MAX_PENALTY, so that the penalty arithmetic stays
 * finite; a penalised logit that would still overflow (a logit near FLT_MAX) saturates at
 * +-FLT_MAX. */
typedef enum pyspec_limits {
    PYSPEC_MAX_PENALTY_WINDOW = 8192,
    PYSPEC_MAX_PENALTY = 1000000,
    PYSPEC_GRAPH_MAX_TOP = 64, /* top logprobs per row the in-graph sampler hands out */
    PYSPEC_SUFFIX_MAX_MATCH = 64,        /* longest match a suffix index looks for */
    PYSPEC_SUFFIX_MAX_OCCURRENCES = 256, /* occurrences one suffix-index draft weighs */
    PYSPEC_SUFFIX_SEPARATOR = -1,        /* the token that ends a document in a suffix index */
    /* A draft row must sum to 1 within this many millionths (1e-3). */
    PYSPEC_DRAFT_SUM_TOLERANCE_PPM = 1000,
    /* A draft probability may exceed 1 by this many millionths (1.0001): the rounding of a
     * draft model's float softmax can put a near-certain token slightly above 1. */
    PYSPEC_DRAFT_Q_SLACK_PPM = 100,
    /* Draft tokens one speculative round may verify (pyspec.llama: draft_max; a batch of at
     * most 65 rows). */
    PYSPEC_MAX_DRAFT = 64,
    /* out_top_probs leaves out the logits more than this far below their row's maximum. */
    PYSPEC_TOP_PROB_SPAN = 16
} pyspec_limits;

/* Detailed error report. `message` is NUL-terminated and names the argument. */
typedef struct pyspec_error {
    int32_t status;       /* a pyspec_status */
    char    message[256];
} pyspec_error;

/* Draft probabilities for the rows of one sequence (the distributions the drafts were drawn
 * from, after the draft's own transforms). Two layouts:
 *   dense : tokens == NULL; probs is [n_draft][row_stride], entry t is q(t), t < n_vocab.
 *   sparse: tokens != NULL; probs and tokens are [n_draft][row_stride]; each row holds
 *           n_per_row (token, q) pairs, every other token has q = 0. Pad with q = 0.
 * Only the entries the verifier needs are read (q at the drafted token, and q over the
 * target's kept set after a rejection): a dense row is never streamed in full, so the C
 * library cannot check that it sums to 1 (the Python API does, unless told not to). A sparse
 * row is short, and the CPU verifier checks each row it reads (rows after a rejection are
 * not read) to hold entries in [0, 1] summing to 1 within 1e-3 (PYSPEC_ERR_DRAFT_PROBS
 * otherwise): q that is not a distribution would bias rejection sampling without any error. */
typedef struct pyspec_draft_probs {
    const float   *probs;
    const int32_t *tokens;
    int64_t        row_stride;
    int64_t        n_per_row;
} pyspec_draft_probs;

/* One sequence of a verify call.
 * Inputs:
 *   target_logits : first of n_draft + 1 rows, each n_vocab elements of `dtype` (given to the
 *                   batch call), row i predicting absolute position `position + i`
 *   logits_row_stride : elements between the starts of consecutive rows (>= n_vocab)
 *   draft_tokens  : n_draft token ids (may be NULL when n_draft == 0)
 *   draft_probs   : NULL for point-mass drafts (n-gram lookup, greedy drafters): the emitted
 *                   tokens then equal what pyspec_sample draws at each position, whatever the
 *                   drafter; otherwise modified rejection sampling against these q.
 * Outputs (their contents are unspecified when the call fails; entries past n_accepted + 1
 * may be overwritten as scratch):
 *   out_tokens    : capacity n_draft + 1; receives n_accepted drafts then one corrective or
 *                   bonus token
 *   out_logprobs  : NULL, or capacity n_draft + 1; log-probability of each emitted token under
 *                   the raw target distribution (log-softmax of the untransformed logits, as
 *                   llama-cpp-python reports logprobs). Costs one extra pass per emitted row.
 *   out_n_accepted: number of accepted drafts.
 *   out_top_probs : NULL, or capacity n_draft + 1; the largest probability of the raw target
 *                   distribution (softmax of the untransformed logits) at each emitted row:
 *                   how sure the target was where it decided each token (the unsure rule of
 *                   pyspec's draft-length controller reads it). The CPU verifier leaves the
 *                   logits more than PYSPEC_TOP_PROB_SPAN below the row's maximum out of the
 *                   normaliser, so it may overstate the probability by n_vocab * exp(-16) of
 *                   itself at most (1.7% at 152k tokens; about 1e-4 on real rows) and is
 *                   never below it beyond float rounding; its pass exponentiates only the
 *                   blocks of logits (16 with AVX-512, 8 with AVX2) that hold one within the
 *                   span. */
typedef struct pyspec_sequence {
    const void               *target_logits;
    int64_t                   logits_row_stride;
    const int32_t            *draft_tokens;
    int64_t                   n_draft;
    const pyspec_draft_probs *draft_probs;
    pyspec_sampling_params    params;
    int64_t                   position;
    int32_t                  *out_tokens;
    float                    *out_logprobs;
    int64_t                  *out_n_accepted;
    float                    *out_top_probs;
} pyspec_sequence;

/* A verifier owns the scratch memory of every thread, so verify calls never allocate.
 * One verifier serves one caller thread at a time; it may run up to n_threads worker
 * threads inside a call. */
typedef struct pyspec_verifier pyspec_verifier;

/* Returns a static string; never NULL. */
PYSPEC_API const char * pyspec_status_string(int32_t status);

/* Library version as "MAJOR.MINOR.PATCH" (static string). */
PYSPEC_API const char * pyspec_version(void);

/* Non-zero when the library was built with a CUDA backend. */
PYSPEC_API int32_t pyspec_has_cuda(void);

/* The SIMD path the CPU kernels were compiled for: "avx512", "avx2" or "scalar". */
PYSPEC_API const char * pyspec_simd_name(void);

/* Creates a verifier for vocabularies up to max_vocab and calls with up to max_threads
 * threads. On success *out receives the handle, which the caller frees with
 * pyspec_verifier_free. */
PYSPEC_API pyspec_status pyspec_verifier_create(int64_t max_vocab, int32_t max_threads,
                                                pyspec_verifier **out, pyspec_error *err);

/* Frees a verifier. NULL is allowed. */
PYSPEC_API void pyspec_verifier_free(pyspec_verifier *verifier);

/* Verifies n_seqs sequences (ragged n_draft, each with its own params and position) in one
 * call, over n_threads threads (1 <= n_threads <= the verifier's max_threads). Results are
 * identical for any n_threads. On success every sequence's outputs are valid; on error none
 * is, and the message names the first failing sequence. Outputs of different sequences
 * must not overlap. */
PYSPEC_API pyspec_status pyspec_verify_batch(pyspec_verifier *verifier,
                                             const pyspec_sequence *seqs, int64_t n_seqs,
                                             int64_t n_vocab, int32_t dtype,
                                             int32_t n_threads, pyspec_error *err);

/* Draws one token from one row of logits at absolute position `position` with the
 * PYSPEC_PURPOSE_SAMPLE stream. Equal to what a point-mass verify emits at that position.
 * out_prob (may be NULL) receives the probability of the drawn token under the transformed
 * distribution. */
PYSPEC_API pyspec_status pyspec_sample(pyspec_verifier *verifier, const void *logits,
                                       int64_t n_vocab, int32_t dtype,
                                       const pyspec_sampling_params *params, int64_t position,
                                       int32_t *out_token, float *out_prob, pyspec_error *err);

/* Writes the transformed distribution of one row (what pyspec_sample draws from) into
 * out_probs[n_vocab] (dense, zeros outside the kept set): each token's fixed-point weight
 * over their total, rounded to float. For tests and drafters. */
PYSPEC_API pyspec_status pyspec_distribution(pyspec_verifier *verifier, const void *logits,
                                             int64_t n_vocab, int32_t dtype,
                                             const pyspec_sampling_params *params,
                                             float *out_probs, pyspec_error *err);

/* The same distribution as its kept set, most likely first when top-k is on (in no set
 * order otherwise): up to `capacity` (token, probability) pairs, their count in *out_n.
 * Probabilities are weight / total of the fixed-point weights; tokens whose weight rounds
 * to 0 (below 2^-40 or so of the most likely one) have probability 0 and are left out.
 * A kept set larger than capacity is PYSPEC_ERR_CAPACITY (pass capacity = n_vocab to
 * never fail). What a drafter hands the verifier as sparse draft probabilities. */
PYSPEC_API pyspec_status pyspec_distribution_sparse(pyspec_verifier *verifier, const void *logits,
                                                    int64_t n_vocab, int32_t dtype,
                                                    const pyspec_sampling_params *params,
                                                    int32_t *out_tokens, float *out_probs,
                                                    int64_t capacity, int64_t *out_n,
                                                    pyspec_error *err);

/* What a completion's logprobs report for one row of raw (untransformed) logits: the
 * log-probabilities under its softmax of `token` (into *out_token_logprob; token -1: none)
 * and of its n_top most likely tokens (out_ids / out_logprobs, capacity n_top, most likely
 * first, ties: lower id first; their count, below n_top only when the row has fewer finite
 * entries, into *out_n_top). The normaliser is the one verify's out_logprobs use. NaN or
 * +inf anywhere, or a row of only -inf, is PYSPEC_ERR_LOGITS. No verifier is needed. */
PYSPEC_API pyspec_status pyspec_row_logprobs(const void *logits, int64_t n_vocab, int32_t dtype,
                                             int32_t token, int32_t n_top, int32_t *out_ids,
                                             float *out_logprobs, int32_t *out_n_top,
                                             float *out_token_logprob, pyspec_error *err);

/* The uniform in [0, 1) (53 bits) drawn for (seed, position, purpose). */
PYSPEC_API double pyspec_uniform(uint64_t seed, int64_t position, int32_t purpose);

/* The same with a stream number (Philox's fourth counter word; the verifier uses 0). A
 * drafter that drafts a position again in a later round uses a new stream for it, so its
 * draws never depend on an earlier round's. */
PYSPEC_API double pyspec_uniform_stream_at(uint64_t seed, int64_t position, int32_t purpose,
                                           uint32_t stream);

/* Philox4x32-10 on one block, for known-answer tests and for other engines that want the
 * same streams. */
PYSPEC_API void pyspec_philox4x32_10(const uint32_t counter[4], const uint32_t key[2],
                                     uint32_t out[4]);

/* ---- Suffix index (drafting) ---------------------------------------------------------------
 * The drafters' search: for the most recent tokens, the longest earlier match (up to
 * max_match tokens) in an indexed sequence, and what followed each occurrence of it, with
 * counts. Appending a token costs O(max_match), whatever the length; the sequence can be cut
 * back to any length (the KV cache's rollback), which leaves exactly the index of the shorter
 * sequence. PYSPEC_SUFFIX_SEPARATOR ends a document: no match and no draft crosses it (the
 * memory of earlier requests holds one document per request). One index is used by one
 * thread at a time. */
typedef struct pyspec_suffix_index pyspec_suffix_index;

/* What a draft came from. */
typedef struct pyspec_suffix_draft {
    int32_t n_tokens;      /* tokens drafted (0: no match of at least min_match tokens)     */
    int32_t match_length;  /* length of the longest match found                              */
    int32_t n_occurrences; /* its occurrences weighed (at most max_occurrences, latest first) */
    int64_t source;        /* index of the first drafted token in the indexed sequence, in the
                            * latest occurrence that agrees with the whole draft (-1: none) */
} pyspec_suffix_draft;

/* max_match in [1, PYSPEC_SUFFIX_MAX_MATCH]. */
PYSPEC_API pyspec_status pyspec_suffix_index_create(int32_t max_match, pyspec_suffix_index **out,
                                                    pyspec_error *err);

/* NULL is allowed. */
PYSPEC_API void pyspec_suffix_index_free(pyspec_suffix_index *index);

/* Tokens indexed so far (0 for NULL). */
PYSPEC_API int64_t pyspec_suffix_index_length(const pyspec_suffix_index *index);

/* Appends n_tokens tokens (ids >= 0, or PYSPEC_SUFFIX_SEPARATOR). On any error the index is
 * unchanged. */
PYSPEC_API pyspec_status pyspec_suffix_index_append(pyspec_suffix_index *index,
                                                    const int32_t *tokens, int64_t n_tokens,
                                                    pyspec_error *err);

/* Cuts the sequence back to its first `length` tokens (0 <= length <= current length). */
PYSPEC_API pyspec_status pyspec_suffix_index_truncate(pyspec_suffix_index *index, int64_t length,
                                                      pyspec_error *err);

/* Copies tokens [start, start + n) of the indexed sequence into out. */
PYSPEC_API pyspec_status pyspec_suffix_index_read(const pyspec_suffix_index *index, int64_t start,
                                                  int64_t n, int32_t *out, pyspec_error *err);

/* Drafts up to max_tokens tokens continuing `pattern` (the recent tokens, oldest first; ids
 * >= 0). Finds the longest suffix of pattern, between min_match and max_match tokens, that
 * occurs in the index with a follower, weighs its latest max_occurrences occurrences, and
 * walks their continuations: at depth d the token that followed most of the occurrences that
 * agree with the draft so far (ties: the latest occurrence's), out_counts[d] how many did,
 * out_totals[d] how many had a follower at that depth (count / total estimates the token's
 * chance given the draft before it). Stops where no agreeing occurrence goes on. */
PYSPEC_API pyspec_status pyspec_suffix_index_draft(const pyspec_suffix_index *index,
                                                   const int32_t *pattern, int64_t n_pattern,
                                                   int32_t min_match, int32_t max_occurrences,
                                                   int32_t max_tokens, int32_t *out_tokens,
                                                   int32_t *out_counts, int32_t *out_totals,
                                                   pyspec_suffix_draft *out, pyspec_error *err);

/* ---- CUDA back end ------------------------------------------------------------------------
 * Present in every build; in a build without CUDA (pyspec_has_cuda() == 0) every function
 * below returns PYSPEC_ERR_CUDA. CUDA is touched only by these functions: the library loads
 * and every CPU function works on a machine without a GPU or driver. */

/* Number of CUDA devices into *out_count (0 when there is none); PYSPEC_ERR_CUDA with the
 * runtime's message when no driver or device can be found. */
PYSPEC_API pyspec_status pyspec_cuda_device_count(int32_t *out_count, pyspec_error *err);

/* A CUDA verifier owns all device workspace, allocated once: pyspec_cuda_verify_batch
 * never allocates and never waits for the device, so it can be captured in a CUDA graph
 * (the descriptors travel as kernel parameters: a captured call keeps its own copy). One
 * verifier serves one host thread at a time, and its calls must run in stream order (use
 * one stream per verifier, or order the streams): they share the device workspace. */
typedef struct pyspec_cuda_verifier pyspec_cuda_verifier;

/* Creates a verifier on `device` for vocabularies up to max_vocab, calls of up to max_seqs
 * sequences and max_rows verify rows in all (sum of n_draft + 1). */
PYSPEC_API pyspec_status pyspec_cuda_verifier_create(int64_t max_vocab, int64_t max_seqs,
                                                     int64_t max_rows, int32_t device,
                                                     pyspec_cuda_verifier **out,
                                                     pyspec_error *err);

/* Frees a CUDA verifier (waits for its device work). NULL is allowed. */
PYSPEC_API void pyspec_cuda_verifier_free(pyspec_cuda_verifier *verifier);

/* Split rows, off by default (it has run in the host emulation of the kernels, not yet on a
 * GPU): with on != 0, a call with fewer verify rows than the device has multiprocessors
 * first scans each row with several blocks, one chunk of the vocabulary each, and each
 * row's block then works from what they found instead of reading the whole row alone. The
 * tokens are the same either way (everything that decides them is an exact count, maximum
 * or list); log-probabilities may differ in the last bits. Takes effect from the next call. */
PYSPEC_API pyspec_status pyspec_cuda_verifier_split_rows(pyspec_cuda_verifier *verifier, int32_t on,
                                                         pyspec_error *err);

/* pyspec_verify_batch on the GPU, enqueued on `stream` (a cudaStream_t; NULL is the legacy
 * default stream) without waiting for the device. `seqs` is a HOST array of descriptors;
 * every pointer inside them (target_logits, draft_tokens, draft_probs->probs and ->tokens,
 * params.penalty_history, out_tokens, out_logprobs, out_n_accepted, out_top_probs) is a
 * DEVICE pointer on
 * the verifier's device, except `draft_probs` itself, which points at a host struct.
 * Results are ready when the stream is. Emitted tokens are identical to the CPU path's.
 * Launches: ceil(n_seqs / 96) descriptor copies, then 3 kernels (validate; one block per
 * verify row; finish), whatever the draft lengths, and a fourth (the chunk pass) before
 * the row kernel when rows are split (pyspec_cuda_verifier_split_rows). Needs a driver for CUDA 12.1 or later
 * (large kernel parameters). Logprobs match the CPU path's to float rounding, not bitwise;
 * top probabilities sum every term of the row (the CPU path leaves out those more than
 * PYSPEC_TOP_PROB_SPAN below the maximum, so its value may be higher by its bound).
 * Limits of this back end: sparse draft rows of at most 4096 entries (PYSPEC_ERR_CAPACITY
 * otherwise: pass dense rows), n_seqs <= max_seqs and total rows <= max_rows.
 * What the host can check (NULLs, shapes, sampling parameters, capacity) is checked before
 * anything is enqueued and reported here with the CPU path's messages. What needs device
 * data (token ids in range, NaN/+inf logits, draft probabilities) is checked on the device:
 * the first failure is kept in the verifier's device error record (sticky: later calls do
 * not overwrite it) and reported by pyspec_cuda_verifier_last_error. */
PYSPEC_API pyspec_status pyspec_cuda_verify_batch(pyspec_cuda_verifier *verifier,
                                                  const pyspec_sequence *seqs, int64_t n_seqs,
                                                  int64_t n_vocab, int32_t dtype, void *stream,
                                                  pyspec_error *err);

/* Waits for `stream`, then reports (and clears) the first device-side failure of the calls
 * enqueued since the last check: PYSPEC_OK, or the status and message the CPU path would
 * have given (e.g. "seqs[1]: target_logits row 2 holds NaN at vocabulary index 7 ...").
 * Outputs of the failing call are unspecified. */
PYSPEC_API pyspec_status pyspec_cuda_verifier_last_error(pyspec_cuda_verifier *verifier,
                                                         void *stream, pyspec_error *err);

/* Convenience: pyspec_cuda_verify_batch, then pyspec_cuda_verifier_last_error on the same
 * stream (so it returns with the results ready, or with the device-side error). */
PYSPEC_API pyspec_status pyspec_cuda_verify_batch_sync(pyspec_cuda_verifier *verifier,
                                                       const pyspec_sequence *seqs,
                                                       int64_t n_seqs, int64_t n_vocab,
                                                       int32_t dtype, void *stream,
                                                       pyspec_error *err);

/* Small helpers for bindings that have no CUDA library of their own (the Python package):
 * device memory on `device`, and a copy enqueued on `stream` that returns once the stream
 * has run it (kind: 0 host to device, 1 device to host, 2 device to device). */
PYSPEC_API pyspec_status pyspec_cuda_malloc(int32_t device, int64_t bytes, void **out,
                                            pyspec_error *err);
PYSPEC_API void pyspec_cuda_free(int32_t device, void *ptr);
PYSPEC_API pyspec_status pyspec_cuda_memcpy(int32_t device, void *dst, const void *src,
                                            int64_t bytes, int32_t kind, void *stream,
                                            pyspec_error *err);

/* ---- In-graph sampler (libpyspec_llama) ---------------------------------------------------
 * Verify rows sampled inside llama.cpp's graph (llama.cpp's experimental backend-sampler
 * interface), on whatever device runs the model; only one token per row reaches the host.
 * These functions live in a second library, libpyspec_llama, compiled against the headers of
 * the llama-cpp-python whose libllama it links (pyspec/llama_graph_build.py); libpyspec does
 * not have them. Point-mass verification only (row i emits its plain sample at position
 * `position + i`, as pyspec_sample would). Penalties need a window of fixed size
 * (penalty_last_n in [0, PYSPEC_MAX_PENALTY_WINDOW]) and pyspec_graph_sampler_set_history
 * before each decode. */
typedef struct pyspec_graph_sampler pyspec_graph_sampler;

/* The llama-cpp-python version whose llama.h and ggml.h the library was compiled against. */
PYSPEC_API const char * pyspec_graph_llama_version(void);

/* Attaches a sampler for `params` to sequence seq_id of a llama_context (llama_set_sampler):
 * from the next llama_decode on, llama.cpp samples every output row of that sequence in its
 * graph and no longer copies those rows' logits to the host. PYSPEC_ERR_LLAMA when the device
 * that runs the model lacks an op. Free with pyspec_graph_sampler_detach before the context.
 * n_top: -1, no logprobs; 0..PYSPEC_GRAPH_MAX_TOP, each row also computes in the graph what
 * pyspec_row_logprobs does on the host (its sampled token's raw logprob and the n_top most
 * likely tokens'), for pyspec_graph_sampler_read_logprobs. Fixed for the sampler's life:
 * llama.cpp reuses a built graph while the sampler is the same. */
PYSPEC_API pyspec_status pyspec_graph_sampler_attach(void *llama_context, int32_t seq_id,
                                                     const pyspec_sampling_params *params,
                                                     int32_t n_top, pyspec_graph_sampler **out,
                                                     pyspec_error *err);

/* The absolute position of the first output row of the next llama_decode. */
PYSPEC_API pyspec_status pyspec_graph_sampler_set_position(pyspec_graph_sampler *sampler,
                                                           int64_t position, pyspec_error *err);

/* With repetition penalties on: the tokens the penalties look back on for the next
 * decode's n_rows output rows: row r's window is the last penalty_last_n tokens of history
 * followed by drafts[0..r) (n_rows - 1 drafts). Call before each decode. */
PYSPEC_API pyspec_status pyspec_graph_sampler_set_history(pyspec_graph_sampler *sampler,
                                                          const int32_t *history,
                                                          int64_t n_history,
                                                          const int32_t *drafts, int32_t n_rows,
                                                          pyspec_error *err);

/* The sampled tokens of outputs first_output .. first_output + n_rows - 1 of the last decode
 * (llama_get_sampled_token_ith indices). PYSPEC_ERR_LOGITS when a row held NaN or +-inf. */
PYSPEC_API pyspec_status pyspec_graph_sampler_read(pyspec_graph_sampler *sampler,
                                                   int32_t first_output, int32_t n_rows,
                                                   int32_t *out_tokens, pyspec_error *err);

/* With logprobs (n_top >= 0 at attach), for the same outputs as pyspec_graph_sampler_read:
 * each row's sampled-token raw logprob into out_token_logprobs[n_rows], and its n_top most
 * likely tokens (in no set order) and their logprobs into out_top_ids / out_top_logprobs
 * [n_rows * n_top]. */
PYSPEC_API pyspec_status pyspec_graph_sampler_read_logprobs(pyspec_graph_sampler *sampler,
                                                            int32_t first_output, int32_t n_rows,
                                                            float *out_token_logprobs,
                                                            int32_t *out_top_ids,
                                                            float *out_top_logprobs,
                                                            pyspec_error *err);

/* Detaches the sampler from its context (llama.cpp copies logits again) and frees it.
 * NULL is allowed. */
PYSPEC_API void pyspec_graph_sampler_detach(pyspec_graph_sampler *sampler);

/* The in-graph sampler's ops on one host row of logits, outside llama.cpp (ggml's CPU
 * back end, n_threads threads): n_draws samples, draw d with the uniform of positions[d],
 * the penalties (if on) looking back on history.
 * What the statistical tests use: thousands of draws without a model decode per draw. */
PYSPEC_API pyspec_status pyspec_graph_sample_rows(const float *logits, int64_t n_vocab,
                                                  const pyspec_sampling_params *params,
                                                  const int32_t *history, int64_t n_history,
                                                  const int64_t *positions, int64_t n_draws,
                                                  int32_t n_threads, int32_t *out_tokens,
                                                  pyspec_error *err);

/* PYSPEC_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* PYSPEC_H */
