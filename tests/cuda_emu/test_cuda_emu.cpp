// test_cuda_emu.cpp - runs the CUDA kernels of pyspec on the host (emu.h: one std::thread
// per CUDA thread) and compares what they emit with a plain sequential implementation of
// the portable-draw rules (fixed-point weights, token-id-order draws; see csrc/draw.h), over
// random cases: every dtype, mode (greedy, point-mass, dense q, sparse q with repeated
// tokens), transform combination, ties, -inf entries, penalties, ragged batches, errors.
// Every sequence is also compared with the CPU library, which follows the same rules: the
// CPU and the (emulated) GPU must emit the same tokens, greedy and sampled alike.
//
// This tests the kernels' logic (radix selects, nucleus walk, scans, skipping, error
// records) without a GPU. It does not test the CUDA compiler, memory spaces, or timing.
//
// Usage: test_cuda_emu [n_cases] [block_threads] [big]
//   big = 1: vocabularies of 32000 and 151936, penalty windows of up to 3000 tokens and
//   sparse draft rows of 300 entries (slower).
#include "emu.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>

// The kernels, compiled for the host.
#include "../../csrc/cuda/validate.cu"
#include "../../csrc/cuda/verify_rows.cu"
#include "../../csrc/cuda/stage.h"
#include "spec_reference.h"

// ---- the emulator's state ---------------------------------------------------------------
thread_local emu_dim3 threadIdx;
emu_dim3 blockIdx_shared, blockDim;
namespace emu {
std::unique_ptr<std::barrier<>> block_barrier;
std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
uint64_t warp_exchange[32][32];
alignas(16) unsigned char dynamic_smem[1 << 18];

thread_local unsigned syncs;
std::atomic<unsigned> returned;

void diverged(const char *what) {
    fprintf(stderr, "block %u: %s\n", blockIdx_shared.x, what);
    fflush(stdout);
    std::abort();
}

/* The threads of a block are made once per launch and run the blocks one after the other:
 * between two blocks they meet at the block barrier, thread 0 having set blockIdx. A block
 * whose threads part ways (one returns while others go on to a __syncthreads, or they reach
 * different numbers of them: undefined on a GPU) stops the test with a message. */
void launch(unsigned blocks, unsigned threads, const std::function<void()> &body) {
    blockDim.x = threads;
    block_barrier = std::make_unique<std::barrier<>>(threads);
    warp_barriers.clear();
    for (unsigned w = 0; w < threads / 32; ++w) warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
    std::vector<std::thread> ts;
    std::vector<unsigned> counts(threads);
    ts.reserve(threads);
    for (unsigned t = 0; t < threads; ++t)
        ts.emplace_back([&body, &counts, t, blocks] {
            threadIdx.x = t;
            for (unsigned b = 0; b < blocks; ++b) {
                if (t == 0) {
                    blockIdx_shared.x = b;
                    returned = 0;
                }
                block_barrier->arrive_and_wait();
                syncs = 0;
                body();
                counts[t] = syncs;
                ++returned;
                block_barrier->arrive_and_wait();
                if (t == 0)
                    for (unsigned u = 1; u < counts.size(); ++u)
                        if (counts[u] != counts[0]) diverged("its threads reached different numbers of __syncthreads");
            }
        });
    for (auto &t : ts) t.join();
}
}  // namespace emu

static int32_t pow2_at_least(int64_t n) {
    if (n <= 0) return 0;
    int32_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

// The three kernels of a call, as api.cu enqueues them (descriptors staged by hand).
struct EmuResult { int status; pyspec_cuda_err err; };

/* The emulated device's error record against the reference's, field by field (kind,
 * sequence, row, vocabulary index or token), and the CPU library's message naming the same
 * sequence, row and index. */
static bool same_error_record(const pyspec_cuda_err &em, const RefSeq &ref, int seq, const char *cpu_message) {
    static const int kind_of[] = { PYSPEC_CUDA_ERR_NONE, PYSPEC_CUDA_ERR_LOGIT, PYSPEC_CUDA_ERR_NO_FINITE,
                                   PYSPEC_CUDA_ERR_DRAFTED_Q, PYSPEC_CUDA_ERR_Q };
    const RefRow &r = ref.error;
    if (em.kind != kind_of[r.err_kind] || em.seq != seq || em.row != ref.err_row) return false;
    if (r.err_kind == REF_ERR_LOGIT && em.index != r.err_index) return false;
    if ((r.err_kind == REF_ERR_DRAFTED_Q || r.err_kind == REF_ERR_Q) && em.token != r.err_token) return false;
    char want[96];
    snprintf(want, sizeof want, "seqs[%d]", seq);
    if (!strstr(cpu_message, want)) return false;
    snprintf(want, sizeof want, "row %lld", (long long)ref.err_row);
    if (!strstr(cpu_message, want)) return false;
    if (r.err_kind == REF_ERR_LOGIT) {
        snprintf(want, sizeof want, "index %lld", (long long)r.err_index);
        if (!strstr(cpu_message, want)) return false;
    }
    return true;
}
/* The kernels of a call as api.cu enqueues them; `chunks` > 1 asks for split rows (capped as
 * on a device by the list length, but with no minimum chunk length: small vocabularies split
 * too, into chunks of a few tokens or none). */
static EmuResult run_emulated(const pyspec_sequence *seqs, int64_t n_seqs, int64_t V, int32_t dtype,
                              unsigned threads, int64_t chunks = 1) {
    std::vector<pyspec_cuda_seq> d(n_seqs);
    int64_t base = 0, window = 0, sparse = 0;
    for (int64_t s = 0; s < n_seqs; ++s) {
        pyspec_cuda_stage_seq(&d[s], &seqs[s], base);
        base += seqs[s].n_draft + 1;
        const pyspec_sampling_params &p = seqs[s].params;
        if (pyspec_penalties_on(&p)) {
            int64_t w = p.penalty_last_n < 0 ? p.n_penalty_history + seqs[s].n_draft : p.penalty_last_n;
            window = std::max(window, std::min(w, p.n_penalty_history + seqs[s].n_draft));
        }
        if (seqs[s].draft_probs && seqs[s].draft_probs->tokens && seqs[s].n_draft > 0)
            sparse = std::max(sparse, seqs[s].draft_probs->n_per_row);
    }
    const int64_t total_rows = base;
    std::vector<pyspec_cuda_err> seq_err(n_seqs), row_err(total_rows);
    pyspec_cuda_err err;
    memset(&err, 0, sizeof err);
    const pyspec_cuda_seq *dp = d.data();
    emu::launch((unsigned)n_seqs, 64, [&] { validate_kernel(dp, V, seq_err.data()); });
    const int32_t wc = pow2_at_least(window), sc = pow2_at_least(sparse);
    const pyspec_cuda_split split = pyspec_cuda_split_rows(seqs, n_seqs, V, chunks);
    std::vector<pyspec_cuda_chunk> chunk_out((size_t)total_rows * split.chunks);
    std::vector<unsigned long long> lists((size_t)total_rows * split.chunks * split.list_len + 1);
    if (split.chunks > 1)
        emu::launch((unsigned)(total_rows * split.chunks), threads, [&] {
            chunks_kernel(dp, n_seqs, V, dtype, wc, split, seq_err.data(), chunk_out.data(), lists.data());
        });
    emu::launch((unsigned)total_rows, threads, [&] {
        rows_kernel(dp, n_seqs, V, dtype, wc, sc, split, chunk_out.data(), lists.data(), seq_err.data(),
                    row_err.data());
    });
    emu::launch(1, 64, [&] { finish_kernel(dp, n_seqs, seq_err.data(), row_err.data(), &err); });
    return { err.status, err };
}

// ---- random cases -------------------------------------------------------------------------
static uint16_t to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if (std::isnan(f)) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static uint16_t to_f16(float f) { // round to nearest even, via the float bits
    uint32_t x = __float_as_uint(f), sign = (x >> 16) & 0x8000u;
    if (std::isnan(f)) return 0x7e00;
    float a = std::fabs(f);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u);
    if (a < 6.103515625e-05f) return (uint16_t)(sign | (uint16_t)std::nearbyint(a * 16777216.0f));
    uint32_t ax = __float_as_uint(a);
    uint32_t mant = ax & 0x7fffffu, exp = (ax >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13), rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;
    return (uint16_t)(sign | h);
}

// A bad token id in the penalty history, the drafts or a sparse draft row: the record names
// the list, the row and index within it, the id and the vocabulary size (the statuses alone
// are compared with the CPU path by the random cases).
static int check_token_error_records(void) {
    const int64_t V = 10, K = 2, M = 3;
    std::vector<float> logits((K + 1) * V, 0.0f);
    int32_t history[4] = { 1, 2, 3, 4 }, draft[2] = { 5, 6 };
    int32_t qtok[2 * 4] = { 0, 1, 2, -1, 3, 4, 5, -1 };  // rows of M = 3, stride 4
    float qprob[2 * 4] = { 0.5f, 0.3f, 0.2f, 0.0f, 0.4f, 0.4f, 0.2f, 0.0f };
    pyspec_draft_probs q = { qprob, qtok, 4, M };
    int32_t out[K + 1];
    int64_t n_acc = 0;
    pyspec_sequence seq;
    memset(&seq, 0, sizeof seq);
    seq.target_logits = logits.data();
    seq.logits_row_stride = V;
    seq.draft_tokens = draft;
    seq.n_draft = K;
    seq.draft_probs = &q;
    seq.params.temperature = 1.0f;
    seq.params.top_p = 1.0f;
    seq.params.penalty_last_n = 4;
    seq.params.penalty_repeat = 1.1f;
    seq.params.penalty_history = history;
    seq.params.n_penalty_history = 4;
    seq.out_tokens = out;
    seq.out_n_accepted = &n_acc;
    struct Expect { int kind; int64_t row, index; int32_t token; } want[3] = {
        { PYSPEC_CUDA_ERR_HISTORY_TOKEN, 0, 2, 99 },
        { PYSPEC_CUDA_ERR_DRAFT_TOKEN, 0, 1, -7 },
        { PYSPEC_CUDA_ERR_SPARSE_TOKEN, 1, 2, 12 },
    };
    int failures = 0;
    for (int c = 0; c < 3; ++c) {
        history[2] = c == 0 ? 99 : 3;
        draft[1] = c == 1 ? -7 : 6;
        qtok[4 + 2] = c == 2 ? 12 : 5;
        EmuResult r = run_emulated(&seq, 1, V, PYSPEC_F32, 64);
        const Expect &w = want[c];
        if (r.status != PYSPEC_ERR_TOKEN || r.err.kind != w.kind || r.err.seq != 0 || r.err.row != w.row ||
            r.err.index != w.index || r.err.token != w.token || r.err.q != (double)V) {
            printf("token error record %d: status %d kind %d row %lld index %lld token %d q %g; want kind %d "
                   "row %lld index %lld token %d q %g\n", c, r.status, r.err.kind, (long long)r.err.row,
                   (long long)r.err.index, r.err.token, r.err.q, w.kind, (long long)w.row, (long long)w.index,
                   w.token, (double)V);
            ++failures;
        }
    }
    return failures;
}

// Split rows whose top-k sees every finite candidate, or a few more, or whose chunks each
// hold more than k: rows of two tied finite values spread over the chunks (ties rank by
// id), the rest -inf, so that a chunk's lost count or candidate, or a wrong cut within a
// chunk, changes which tokens are drawn for most seeds (random cases seldom land there:
// their rows have one logit far above the rest). Then a top-k of 500 over a flat row: the
// union of two chunks' lists fills the short list, and more chunks are cut to two.
static int check_split_rows(void) {
    const int64_t V = 4096;
    int failures = 0;
    struct Case { int n_finite, top_k; } cases[] = { { 30, 40 }, { 40, 40 }, { 55, 40 }, { 200, 40 }, { 200, 3 },
                                                     { 4096, 500 } };
    for (const Case &k : cases)
        for (const int64_t chunks : { 2, 5, 16 })
            for (int seed = 0; seed < 12; ++seed) {
                std::vector<float> row(V, -INFINITY);
                const int64_t spacing = V / k.n_finite;
                for (int j = 0; j < k.n_finite; ++j)
                    row[(size_t)(spacing / 2 + spacing * j)] = k.top_k > 100 ? (float)((j * 7919) % 1000) / 1000.0f
                                                                             : (j % 2 ? 1.0f : 0.5f);
                int32_t out = -1;
                int64_t n_acc = -1;
                pyspec_sequence seq;
                memset(&seq, 0, sizeof seq);
                seq.target_logits = row.data();
                seq.logits_row_stride = V;
                seq.params.temperature = 1.0f;
                seq.params.top_k = k.top_k;
                seq.params.top_p = 1.0f;
                seq.params.penalty_repeat = 1.0f;
                seq.params.seed = 1000 + (uint64_t)seed;
                seq.out_tokens = &out;
                seq.out_n_accepted = &n_acc;
                const RefSeq ref = ref_seq(seq, V, PYSPEC_F32);
                const EmuResult r = run_emulated(&seq, 1, V, PYSPEC_F32, 64, chunks);
                if (r.status || ref.status || out != ref.tokens[0]) {
                    ++failures;
                    printf("split row: %d finite, top-k %d, %lld chunks, seed %d: token %d, reference %d\n", k.n_finite, k.top_k,
                           (long long)chunks, seed, out, ref.tokens.empty() ? -1 : ref.tokens[0]);
                }
            }
    return failures;
}

// The split plan never asks for more than a verifier holds (api.cu refuses such a call):
// chunk records for PYSPEC_CUDA_SPLIT_BLOCKS(sms) blocks, sms * PYSPEC_CUDA_UNION_MAX listed
// candidates, and a row's union within the short list; over devices of 1-144
// multiprocessors, calls of 1-300 rows, vocabularies and top-k values around every cap.
static int check_split_plans(void) {
    int failures = 0;
    for (const int32_t sms : { 1, 2, 3, 46, 84, 108, 132, 144 })
        for (int64_t rows = 1; rows <= 300; rows += rows < 20 ? 1 : 7)
            for (const int64_t V : { 1, 100, 4095, 4096, 32000, 151936, 262144 })
                for (const int32_t top_k : { 0, 1, 31, 40, 100, 512, 513, 1024, 1025 }) {
                    pyspec_sequence seq;
                    memset(&seq, 0, sizeof seq);
                    seq.params.temperature = 1.0f;
                    seq.params.top_k = top_k;
                    const pyspec_cuda_split sp =
                        pyspec_cuda_split_rows(&seq, 1, V, pyspec_cuda_wanted_chunks(rows, V, sms));
                    const bool ok = sp.chunks >= 1 && sp.chunks <= PYSPEC_CUDA_MAX_CHUNKS &&
                                    pyspec_cuda_split_fits(sp, rows, sms) &&
                                    (sp.chunks == 1 || V / sp.chunks >= PYSPEC_CUDA_MIN_CHUNK);
                    if (!ok && ++failures <= 5)
                        printf("split plan: sms %d rows %lld V %lld top_k %d: %d chunks, lists of %d\n", sms,
                               (long long)rows, (long long)V, top_k, sp.chunks, sp.list_len);
                }
    return failures;
}

int main(int argc, char **argv) {
    const int n_cases = argc > 1 ? atoi(argv[1]) : 300;
    const unsigned threads = argc > 2 ? (unsigned)atoi(argv[2]) : 64;
    const bool big = argc > 3 && atoi(argv[3]) != 0;
    const int H = big ? 3000 : 12, M = big ? 300 : 8; /* history length, sparse entries per row */
    std::mt19937_64 rng(20261129);
    pyspec_verifier *cpu = NULL;
    pyspec_error e;
    if (pyspec_verifier_create(151936, 1, &cpu, &e)) { printf("cpu: %s\n", e.message); return 2; }
    int failures = check_token_error_records() + check_split_plans() + check_split_rows(), greedy_cpu_diff = 0, sampled_cpu_diff = 0, compared = 0,
        with_errors = 0;
    const int V_LIST[] = { 1, 2, 7, 100, 1000, 5000 };
    const int64_t SPLITS[] = { 2, 3, 5, 16 }; /* chunks per row of the split pass */
    for (int c = 0; c < n_cases; ++c) {
        const int64_t V = big ? (rng() % 2 ? 32000 : 151936) : V_LIST[rng() % 6];
        const int32_t dtype = (int32_t)(rng() % 3);
        const int mode = (int)(rng() % 4); // 0 point, 1 self, 2 dense, 3 sparse
        const int n_seqs = 1 + (int)(rng() % 3);
        const bool ties = rng() % 3 == 0, masks = rng() % 4 == 0, inject = rng() % 25 == 0;
        std::vector<int> ks(n_seqs);
        int rows = 0;
        for (int s = 0; s < n_seqs; ++s) { ks[s] = (int)(rng() % 5); rows += ks[s] + 1; }
        std::vector<float> f((size_t)rows * V);
        std::extreme_value_distribution<float> g(0.0f, 2.0f);
        for (auto &x : f) x = ties ? std::round(g(rng)) : g(rng);
        for (int r = 0; r < rows; ++r) f[(size_t)r * V + rng() % V] += 8.0f;
        if (masks) for (auto &x : f) if (rng() % 3 == 0) x = -INFINITY;
        if (masks && c % 4 < 2) // about as many finite logits as a top-k keeps, or fewer (split too)
            for (int r = 0; r < rows; ++r) {
                const uint64_t keep = 1 + rng() % 60;
                for (int64_t t = 0; t < V; ++t) if (rng() % V >= keep) f[(size_t)r * V + t] = -INFINITY;
            }
        if (masks) for (int r = 0; r < rows; ++r) f[(size_t)r * V + rng() % V] = 1.0f; // one finite
        if (inject) f[rng() % f.size()] = rng() % 2 ? NAN : INFINITY;
        std::vector<uint16_t> h16(f.size());
        const void *logits = f.data();
        if (dtype != PYSPEC_F32) {
            for (size_t j = 0; j < f.size(); ++j) h16[j] = dtype == PYSPEC_F16 ? to_f16(f[j]) : to_bf16(f[j]);
            logits = h16.data();
        }
        const size_t elem = dtype == PYSPEC_F32 ? 4 : 2;
        std::vector<int32_t> drafts(rows), hist((size_t)n_seqs * H), qtok((size_t)rows * M);
        std::vector<float> q(mode == 2 ? (size_t)rows * V : 1), qs((size_t)rows * M);
        std::vector<pyspec_sequence> seqs(n_seqs);
        std::vector<pyspec_draft_probs> dps(n_seqs);
        std::vector<int32_t> out_cpu(rows), out_emu(rows);
        std::vector<float> top_cpu(rows), top_emu(rows); // every other case asks for them
        const bool want_top = c % 4 < 2;
        std::vector<int64_t> n_cpu(n_seqs), n_emu(n_seqs);
        int row0 = 0;
        for (int s = 0; s < n_seqs; ++s) {
            pyspec_sequence &sq = seqs[s];
            memset(&sq, 0, sizeof sq);
            const int k = ks[s];
            for (int i = 0; i < k; ++i) {
                int32_t d = (int32_t)(rng() % V);
                if (mode == 1 || rng() % 2) { // the row's maximum (often accepted)
                    const float *r = f.data() + (size_t)(row0 + i) * V;
                    d = (int32_t)(std::max_element(r, r + V) - r);
                }
                drafts[row0 + i] = d;
                if (mode == 2) {
                    float *qr = q.data() + (size_t)(row0 + i) * V, sum = 0.0f;
                    const bool one_hot = rng() % 4 == 0;
                    for (int64_t t = 0; t < V; ++t) { qr[t] = one_hot ? 0.0f : (float)(rng() % 4 == 0 ? rng() % 100 : 0); sum += qr[t]; }
                    qr[d] += 50.0f; sum += 50.0f;
                    for (int64_t t = 0; t < V; ++t) qr[t] /= sum;
                } else if (mode == 3) {
                    float sum = 0.0f;
                    for (int j = 0; j < M; ++j) {
                        qtok[(size_t)(row0 + i) * M + j] = j == 0 || rng() % 3 == 0 ? d : (int32_t)(rng() % V);
                        qs[(size_t)(row0 + i) * M + j] = (float)(1 + rng() % 50);
                        sum += qs[(size_t)(row0 + i) * M + j];
                    }
                    for (int j = 0; j < M; ++j) qs[(size_t)(row0 + i) * M + j] /= sum;
                }
            }
            for (int j = 0; j < H; ++j) hist[(size_t)s * H + j] = (int32_t)(rng() % std::min<int64_t>(V, big ? 500 : V));
            sq.target_logits = (const char *)logits + (size_t)row0 * V * elem;
            sq.logits_row_stride = V;
            sq.draft_tokens = drafts.data() + row0;
            sq.n_draft = k;
            pyspec_sampling_params &p = sq.params;
            p.seed = rng();
            p.top_p = 1.0f;
            p.penalty_repeat = 1.0f;
            switch (rng() % 10) {
            case 0: p.temperature = 0.0f; break;
            case 1: p.temperature = 1.0f; break;
            case 2: p.temperature = 0.8f; p.top_k = 40; p.top_p = 0.95f; p.min_p = 0.05f; break;
            case 3: p.temperature = 1.2f; p.top_p = 0.7f; break;
            case 4: p.temperature = 1.0f; p.min_p = 0.2f; break;
            case 5: p.temperature = 0.7f; p.top_k = 1 + (int)(rng() % 3); break;
            case 6: p.temperature = 1.0f; p.top_k = 5; p.top_p = 0.5f; break;
            case 7: p.temperature = 1.0f; p.top_k = 50; p.penalty_last_n = big ? 2500 : 8; p.penalty_repeat = 1.3f;
                    p.penalty_freq = 0.5f; p.penalty_present = 0.25f; break;
            case 8: p.temperature = 0.9f; p.top_p = 0.8f; p.penalty_last_n = -1; p.penalty_repeat = 1.5f; break;
            case 9: p.temperature = 1.1f; p.top_k = 1500; p.top_p = 0.9f; p.min_p = 0.01f; break; /* > CAND_MAX */
            }
            p.penalty_history = hist.data() + (size_t)s * H;
            p.n_penalty_history = H;
            sq.position = (int64_t)(rng() % 100000);
            if (mode >= 2) {
                dps[s].probs = mode == 2 ? q.data() + (size_t)row0 * V : qs.data() + (size_t)row0 * M;
                dps[s].tokens = mode == 3 ? qtok.data() + (size_t)row0 * M : NULL;
                dps[s].row_stride = mode == 2 ? V : M;
                dps[s].n_per_row = mode == 3 ? M : 0;
                sq.draft_probs = &dps[s];
            }
            row0 += k + 1;
        }
        // the CPU library
        row0 = 0;
        for (int s = 0; s < n_seqs; ++s) {
            seqs[s].out_tokens = out_cpu.data() + row0; seqs[s].out_n_accepted = &n_cpu[s];
            seqs[s].out_top_probs = want_top ? top_cpu.data() + row0 : NULL;
            row0 += ks[s] + 1;
        }
        const int st_cpu = pyspec_verify_batch(cpu, seqs.data(), n_seqs, V, dtype, 1, &e);
        // the reference, sequence by sequence (its first error is the call's)
        int st_ref = 0, bad_seq = -1;
        std::vector<RefSeq> ref(n_seqs);
        for (int s = 0; s < n_seqs && !st_ref; ++s) {
            ref[s] = ref_seq(seqs[s], V, dtype);
            st_ref = ref[s].status;
            if (st_ref) bad_seq = s;
        }
        // the emulated GPU, whole rows and (every other case) split rows: the same tokens
        for (int pass = 0; pass < 1 + c % 2; ++pass) {
            const int64_t chunks = pass == 0 ? 1 : SPLITS[c / 2 % 4];
            row0 = 0;
            for (int s = 0; s < n_seqs; ++s) {
                seqs[s].out_tokens = out_emu.data() + row0; seqs[s].out_n_accepted = &n_emu[s];
                seqs[s].out_top_probs = want_top ? top_emu.data() + row0 : NULL;
                row0 += ks[s] + 1;
            }
            EmuResult em = run_emulated(seqs.data(), n_seqs, V, dtype, threads, chunks);
            compared += pass == 0;
            if (st_ref || em.status || st_cpu) {
                with_errors += pass == 0;
                if (st_ref != em.status || st_cpu != em.status) {
                    ++failures;
                    printf("case %d chunks %lld: status ref %d emu %d (kind %d seq %lld row %lld) cpu %d (%s)\n", c,
                           (long long)chunks, st_ref, em.status,
                           em.err.kind, (long long)em.err.seq, (long long)em.err.row, st_cpu, e.message);
                } else if (!same_error_record(em.err, ref[bad_seq], bad_seq, e.message)) {
                    ++failures;  // same status, another error: the record, field by field
                    printf("case %d: error record emu kind %d seq %lld row %lld index %lld token %d; ref kind %d "
                           "seq %d row %lld index %lld token %d; cpu: %s\n", c, em.err.kind, (long long)em.err.seq,
                           (long long)em.err.row, (long long)em.err.index, em.err.token, ref[bad_seq].error.err_kind,
                           bad_seq, (long long)ref[bad_seq].err_row, (long long)ref[bad_seq].error.err_index,
                           ref[bad_seq].error.err_token, e.message);
                }
                continue;
            }
            row0 = 0;
            for (int s = 0; s < n_seqs; ++s) {
                bool same = n_emu[s] == ref[s].n_accepted;
                for (int64_t i = 0; same && i <= n_emu[s]; ++i) same = out_emu[row0 + i] == ref[s].tokens[i];
                if (!same) {
                    ++failures;
                    printf("case %d seq %d chunks %lld: V %lld dtype %d mode %d T %g top_k %d top_p %g min_p %g pen %d: emu n %lld, ref n %lld",
                           c, s, (long long)chunks, (long long)V, dtype, mode, seqs[s].params.temperature, seqs[s].params.top_k,
                           seqs[s].params.top_p, seqs[s].params.min_p, seqs[s].params.penalty_last_n,
                           (long long)n_emu[s], (long long)ref[s].n_accepted);
                    for (int64_t i = 0; i <= std::min<int64_t>(n_emu[s], (int64_t)ref[s].tokens.size() - 1); ++i)
                        printf(" [%d %d]", out_emu[row0 + i], ref[s].tokens[i]);
                    printf("\n");
                }
                bool same_cpu = n_emu[s] == n_cpu[s];
                for (int64_t i = 0; same_cpu && i <= n_emu[s]; ++i) same_cpu = out_emu[row0 + i] == out_cpu[row0 + i];
                if (!same_cpu) {
                    if (!(seqs[s].params.temperature > 0.0f)) ++greedy_cpu_diff;
                    else ++sampled_cpu_diff;
                }
                // Top probabilities: the device sums every term, the CPU leaves out those more
                // than PYSPEC_TOP_PROB_SPAN below the maximum (higher by V * exp(-span) at most).
                const double over = (double)V * std::exp(-(double)PYSPEC_TOP_PROB_SPAN);
                for (int64_t i = 0; want_top && same_cpu && i <= n_emu[s]; ++i) {
                    const double got = top_emu[row0 + i], cpu_top = top_cpu[row0 + i];
                    if (!(got > 0.0 && got <= 1.0 && cpu_top >= got * (1 - 1e-4) && cpu_top <= got * (1 + 1e-4 + over))) {
                        ++failures;
                        printf("case %d seq %d row %lld: top probability emu %.8g cpu %.8g\n", c, s, (long long)i, got, cpu_top);
                    }
                }
                row0 += ks[s] + 1;
            }
        }
    }
    printf("%d cases (%d with errors), %d block threads: %d differ from the reference; vs the CPU library: "
           "%d greedy sequences differ, %d sampled sequences differ\n",
           compared, with_errors, threads, failures, greedy_cpu_diff, sampled_cpu_diff);
    pyspec_verifier_free(cpu);
    return failures || greedy_cpu_diff || sampled_cpu_diff ? 1 : 0;
}
