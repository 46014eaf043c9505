/*
 * verify_rows.cu - the row kernel: one block of PYSPEC_CUDA_THREADS threads per verify row
 * (of all sequences of a call), resolving that row exactly as verify.c's resolve_row does
 * under the portable-draw rules (draw.h):
 *
 *   1. scan: validate the row (NaN / +inf), apply penalties, find the maximum (and the
 *      argmax, lowest id on ties, for greedy rows);
 *   2. top-k: radix select (4 passes of 8 bits over the order-preserving key of the float,
 *      then over token ids among equal logits) of the k-th candidate in rank order;
 *   3. top-p: the same radix walk, but over fixed-point masses E_t instead of counts, to find
 *      the end of the smallest rank prefix whose mass reaches top_p * Z;
 *   4. min-p: a threshold max + logf(min_p) (the log comes from the host);
 *      the kept set is the intersection of these three rank prefixes;
 *   5. total: integer sum of the fixed-point weights W_t over the kept set;
 *   6. the draw: a block-wide inclusive scan over tiles in token-id order finds the first
 *      token whose running sum exceeds pyspec_draw_target(u, total);
 *   7. modified rejection sampling: p(x) = W_x / total, pyspec_accepts, and on rejection the
 *      residual pyspec_fixed_residual(W_t, total, q_t) drawn the same way.
 * With top-k on and k <= CAND_MAX, steps 3-7 run instead on the top-k survivors gathered
 * into shared memory and ranked there (keep_ranked, draw_short): the same rules on a short
 * list, without further passes over the row.
 * Every quantity that decides a token is an integer or comes from draw.h/rules.h, so the
 * order in which threads add things up cannot change it. Passes re-read the row (it is
 * usually resident in L2); nothing vocabulary-sized is written. tests/cuda_emu runs this
 * kernel on the host against a plain implementation of the rules.
 *
 * The kernel reads as verify.c's resolve_row, one device function per step: penalised_row
 * (the penalty window), scan_row (validity and maximum), build_dist (steps 2-5),
 * choose_token (accept, or draw the sample / corrective token) and raw_normaliser (logprobs,
 * top probabilities).
 *
 * Rows behind a known rejection are skipped: a block first reads its sequence's
 * out_n_accepted (the first stopping row so far, lowered with atomicMin) and leaves when it
 * is already below its row.
 *
 * Split rows (a call with fewer rows than multiprocessors, stage.h decides): a chunk pass
 * first runs several blocks per row, one chunk of the vocabulary each. A chunk block does
 * step 1 on its chunk and, for a sampled top-k row that takes the short list, lists its own
 * top k (the row's top k is among the union of its chunks' lists). The row's block then
 * combines the chunks' scans (a minimum, a maximum and a count: exact) and ranks the union
 * instead of reading the row: greedy and short-list rows read nothing vocabulary-sized
 * there, and every other row skips step 1.
 */
#ifndef PYSPEC_CUDA_EMULATE
#  include <cub/block/block_scan.cuh>
#endif
#include <float.h>
#include <math.h>

#include "block_ops.cuh"
#include "cuda_internal.h"

#include "../draw.h"
#include "../philox.h"
#include "../rules.h"

#define NT PYSPEC_CUDA_THREADS
#define LOADS_IN_FLIGHT 8
#define CAND_MAX PYSPEC_CUDA_CAND_MAX
typedef cub::BlockScan<unsigned long long, NT> BlockScanU64;

/* One row with its penalties, or the chunk [lo, V) of it that a chunk block reads. */
struct Row {
    const void    *data;
    int32_t        dtype;
    int64_t        lo; /* first token read: 0 but in the chunk pass */
    int64_t        V;  /* one past the last token read */
    const int32_t *win; /* sorted penalty window (with repeats), win_n entries, in shared memory */
    int32_t        win_n;
    const uint32_t *bloom; /* 8192-bit filter of the window's tokens */
    float          repeat, freq, present;

    __device__ float penalise(int64_t t, float raw) const {
        if (win_n == 0 || !(raw > -INFINITY)) return raw;
        if (!(bloom[(t >> 5) & 255] & (1u << (t & 31)))) return raw;
        int lo = 0, hi = win_n; /* lower bound of t */
        while (lo < hi) { int m = (lo + hi) >> 1; if (win[m] < t) lo = m + 1; else hi = m; }
        int first = lo;
        hi = win_n; /* upper bound of t */
        while (lo < hi) { int m = (lo + hi) >> 1; if (win[m] <= t) lo = m + 1; else hi = m; }
        int32_t count = lo - first;
        if (count == 0) return raw;
        float l = pyspec_penalised_logit(raw, count, repeat, freq, present);
        if (l > FLT_MAX) l = FLT_MAX; /* as the CPU: a tiny repeat penalty must not make +inf */
        return l;
    }
    __device__ float at(int64_t t) const { return penalise(t, load_logit(data, dtype, t)); }

    /* f(t, raw logit) for this thread's tokens t = lo + threadIdx.x + j * blockDim.x, in that
     * order, the loads issued LOADS_IN_FLIGHT at a time: a block alone on a multiprocessor
     * (batch 1 has k + 1 blocks) waits out one load latency per batch of loads rather than
     * per token. Each thread still sees its tokens in increasing order, so every per-thread
     * sum (the float ones in raw_normaliser too) is what a plain strided loop gives. The
     * dtype is decided once: a 16-bit value converted as it is loaded would make each load
     * wait for the one before. */
    template <typename F> __device__ __forceinline__ void each_raw(F f) const {
        if (dtype == PYSPEC_F32) each_loaded<float>(f);
        else each_loaded<uint16_t>(f);
    }
    __device__ __forceinline__ float as_float(float x) const { return x; }
    __device__ __forceinline__ float as_float(uint16_t bits) const { return half_bits_float(bits, dtype); }
    template <typename E, typename F> __device__ __forceinline__ void each_loaded(F f) const {
        const E *p = (const E *)data;
        const int64_t step = blockDim.x;
        int64_t t = lo + threadIdx.x;
        for (; t + (LOADS_IN_FLIGHT - 1) * step < V; t += LOADS_IN_FLIGHT * step) {
            E raw[LOADS_IN_FLIGHT];
#pragma unroll
            for (int j = 0; j < LOADS_IN_FLIGHT; ++j) raw[j] = p[t + j * step];
#pragma unroll
            for (int j = 0; j < LOADS_IN_FLIGHT; ++j) f(t + j * step, as_float(raw[j]));
        }
        for (; t < V; t += step) f(t, as_float(p[t]));
    }
    /* f(t, penalised logit), likewise. */
    template <typename F> __device__ __forceinline__ void each(F f) const {
        each_raw([&](int64_t t, float raw) { f(t, penalise(t, raw)); });
    }
};

/* A thread's histogram increments, merged while they hit the same bucket: most logits of a
 * row share the top byte of their key, and 512 threads adding 1 to one shared counter
 * serialise. Integer sums, so the counts and masses are exactly those of one add per token. */
struct BucketRun {
    int                c = -1;
    uint32_t           n = 0;
    unsigned long long mass = 0;
    __device__ __forceinline__ void add(int bucket, uint64_t e, uint32_t *count,
                                        unsigned long long *masses) {
        if (bucket != c) {
            flush(count, masses);
            c = bucket;
        }
        ++n;
        mass += e;
    }
    __device__ __forceinline__ void flush(uint32_t *count, unsigned long long *masses) {
        if (n) atomicAdd(&count[c], n);
        if (mass) atomicAdd(&masses[c], mass);
        n = 0;
        mass = 0;
    }
};

/* A rank prefix: every candidate ranking at or before (key, id). */
struct Cut {
    int      all;
    uint32_t key;
    int32_t  id;
    __device__ bool keeps(uint32_t k, int64_t t) const {
        return all || k > key || (k == key && t <= id);
    }
};

struct Kept {
    Cut   k, p;
    int   min_p_on;
    float threshold;
    __device__ bool keeps(float l, int64_t t) const {
        if (!(l > -INFINITY)) return false;
        uint32_t key = float_key(l);
        return k.keeps(key, t) && p.keeps(key, t) && (!min_p_on || l >= threshold);
    }
};

/* With top-k on and at most CAND_MAX candidates, they are gathered into shared memory
 * after the top-k select and everything else (top-p, min-p, weights, draws, residual) works
 * on that short list instead of re-reading the row. cand_key also ranks a split row's union
 * of chunk lists (PYSPEC_CUDA_UNION_MAX == CAND_MAX entries at most). */
struct Shared {
    unsigned long long                   cand_key[CAND_MAX]; /* rank key, then (id << 32 | rank) */
    unsigned long long                   cand_w[CAND_MAX];   /* W by rank                        */
    unsigned long long                   cand_r[CAND_MAX];   /* residual weights, in id order    */
    int32_t                              n_cand;
    unsigned long long                   total;
    uint32_t                             count[256];
    unsigned long long                   mass[256];
    long long                            bcast[4];
    uint32_t                             bloom[256];
    int32_t                              found;
    int32_t                              behind; /* the row is behind a known rejection */
    typename BlockScanU64::TempStorage   scan;
};

/* A chunk block's shared memory: what select_kth and penalised_row use, and a list slot. */
struct ChunkShared {
    uint32_t           count[256];
    unsigned long long mass[256];
    long long          bcast[4];
    uint32_t           bloom[256];
    int32_t            n_listed;
};

/* The k-th candidate (1-based) in rank order among tokens with finite logits inside `in`:
 * radix select over the float key, then over token ids among equal keys. */
template <typename S>
static __device__ Cut select_kth(const Row &r, const Cut &in, int64_t k, S &sh) {
    uint32_t prefix = 0, mask = 0, tie = 0;
    long long need = k;
    for (int b = 24; b >= 0; b -= 8) {
        for (int c = threadIdx.x; c < 256; c += blockDim.x) sh.count[c] = 0;
        __syncthreads();
        BucketRun run;
        r.each([&](int64_t t, float l) {
            if (!(l > -INFINITY)) return;
            const uint32_t key = float_key(l);
            if ((key & mask) == prefix && in.keeps(key, t)) run.add((key >> b) & 255, 0, sh.count, sh.mass);
        });
        run.flush(sh.count, sh.mass);
        __syncthreads();
        if (threadIdx.x == 0) {
            int c = 255;
            for (; c > 0; --c) {
                if ((long long)sh.count[c] >= need) break;
                need -= sh.count[c];
            }
            sh.bcast[0] = c;
            sh.bcast[1] = need;
            sh.bcast[2] = sh.count[c];
        }
        __syncthreads();
        prefix |= (uint32_t)sh.bcast[0] << b;
        mask |= 0xffu << b;
        need = sh.bcast[1];
        tie = (uint32_t)sh.bcast[2];
        __syncthreads();
    }
    Cut cut = { 0, prefix, INT32_MAX };
    if ((long long)tie <= need) return cut; /* every candidate with this logit is inside */
    uint32_t id_prefix = 0, id_mask = 0;
    for (int b = 24; b >= 0; b -= 8) {
        for (int c = threadIdx.x; c < 256; c += blockDim.x) sh.count[c] = 0;
        __syncthreads();
        for (int64_t t = r.lo + threadIdx.x; t < r.V; t += blockDim.x) {
            if (((uint32_t)t & id_mask) != id_prefix) continue;
            float l = r.at(t);
            if (!(l > -INFINITY) || float_key(l) != prefix || !in.keeps(prefix, t)) continue;
            atomicAdd(&sh.count[((uint32_t)t >> b) & 255], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int c = 0;
            for (; c < 255; ++c) {
                if ((long long)sh.count[c] >= need) break;
                need -= sh.count[c];
            }
            sh.bcast[0] = c;
            sh.bcast[1] = need;
        }
        __syncthreads();
        id_prefix |= (uint32_t)sh.bcast[0] << b;
        id_mask |= 0xffu << b;
        need = sh.bcast[1];
        __syncthreads();
    }
    cut.id = (int32_t)id_prefix;
    return cut;
}

/* Untempered fixed-point mass of top-p: E_t = fixed(exp_portable(l - max)). */
static __device__ __forceinline__ uint64_t nucleus_mass(float l, float max_logit, int shift) {
    return pyspec_fixed_weight(pyspec_exp_portable(l - max_logit), shift);
}

/* The end of the smallest rank prefix (of the candidates inside `in`) whose mass reaches
 * target, compared as (double)cum >= target. */
static __device__ Cut select_nucleus(const Row &r, const Cut &in, float max_logit, int shift,
                                     double target, Shared &sh) {
    uint32_t prefix = 0, mask = 0, tie = 0;
    unsigned long long acc = 0; /* mass of the candidates ranking before the current bucket */
    for (int b = 24; b >= 0; b -= 8) {
        for (int c = threadIdx.x; c < 256; c += blockDim.x) { sh.count[c] = 0; sh.mass[c] = 0; }
        __syncthreads();
        BucketRun run;
        r.each([&](int64_t t, float l) {
            if (!(l > -INFINITY)) return;
            const uint32_t key = float_key(l);
            if ((key & mask) != prefix || !in.keeps(key, t)) return;
            run.add((key >> b) & 255, nucleus_mass(l, max_logit, shift), sh.count, sh.mass);
        });
        run.flush(sh.count, sh.mass);
        __syncthreads();
        if (threadIdx.x == 0) {
            int chosen = -1, lowest = 0;
            for (int c = 255; c >= 0; --c) {
                if (sh.count[c] == 0) continue;
                lowest = c;
                if ((double)(acc + sh.mass[c]) >= target) { chosen = c; break; }
                acc += sh.mass[c];
            }
            if (chosen < 0) { chosen = lowest; acc -= sh.mass[lowest]; } /* unreachable */
            sh.bcast[0] = chosen;
            sh.bcast[1] = (long long)acc;
            sh.bcast[2] = sh.count[chosen];
        }
        __syncthreads();
        prefix |= (uint32_t)sh.bcast[0] << b;
        mask |= 0xffu << b;
        acc = (unsigned long long)sh.bcast[1];
        tie = (uint32_t)sh.bcast[2];
        __syncthreads();
    }
    Cut cut = { 0, prefix, INT32_MAX };
    if (tie <= 1) return cut;
    uint32_t id_prefix = 0, id_mask = 0;
    for (int b = 24; b >= 0; b -= 8) {
        for (int c = threadIdx.x; c < 256; c += blockDim.x) { sh.count[c] = 0; sh.mass[c] = 0; }
        __syncthreads();
        for (int64_t t = r.lo + threadIdx.x; t < r.V; t += blockDim.x) {
            if (((uint32_t)t & id_mask) != id_prefix) continue;
            float l = r.at(t);
            if (!(l > -INFINITY) || float_key(l) != prefix || !in.keeps(prefix, t)) continue;
            int c = ((uint32_t)t >> b) & 255;
            atomicAdd(&sh.count[c], 1u);
            uint64_t e = nucleus_mass(l, max_logit, shift);
            if (e) atomicAdd(&sh.mass[c], (unsigned long long)e);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int chosen = -1, highest = 255;
            for (int c = 0; c < 256; ++c) {
                if (sh.count[c] == 0) continue;
                highest = c;
                if ((double)(acc + sh.mass[c]) >= target) { chosen = c; break; }
                acc += sh.mass[c];
            }
            if (chosen < 0) { chosen = highest; acc -= sh.mass[highest]; } /* unreachable */
            sh.bcast[0] = chosen;
            sh.bcast[1] = (long long)acc;
        }
        __syncthreads();
        id_prefix |= (uint32_t)sh.bcast[0] << b;
        id_mask |= 0xffu << b;
        acc = (unsigned long long)sh.bcast[1];
        __syncthreads();
    }
    cut.id = (int32_t)id_prefix;
    return cut;
}

/* The transformed distribution of a row: fixed-point weights over the kept set. */
struct Dist {
    Row      row;
    Kept     kept;
    int      greedy;
    int32_t  best;      /* argmax (greedy rows) */
    float    max_logit;
    float    temperature;
    int      shift;
    uint64_t total;

    __device__ uint64_t weight_of(int64_t t, float l) const {
        if (greedy) return t == best ? ((uint64_t)1 << shift) : 0;
        if (!kept.keeps(l, t)) return 0;
        /* Divide, not multiply by 1/T, as the CPU (a subnormal T). */
        return pyspec_fixed_weight(pyspec_exp_portable((l - max_logit) / temperature), shift);
    }
    __device__ uint64_t weight(int64_t t) const {
        if (greedy) return t == best ? ((uint64_t)1 << shift) : 0;
        return weight_of(t, row.at(t));
    }
};

/* A candidate's rank key: larger ranks earlier (higher logit, then lower id). */
static __device__ __forceinline__ unsigned long long rank_key(uint32_t key, int64_t t) {
    return ((unsigned long long)key << 32) | (0xffffffffu - (uint32_t)t);
}

/* Ranks the n entries of cand_key: pads them to a power of two with keys that rank last and
 * sorts ascending, so rank j is entry p2 - 1 - j. Returns p2. */
static __device__ int32_t rank_entries(int32_t n, Shared &sh) {
    int32_t p2 = 1;
    while (p2 < n) p2 <<= 1;
    for (int j = n + threadIdx.x; j < p2; j += blockDim.x) sh.cand_key[j] = 0;
    block_bitonic_sort(sh.cand_key, p2);
    return p2;
}

/* The row's top-k survivors (inside the cut), ranked in cand_key. Returns their number,
 * min(top_k, finite) <= CAND_MAX, and sets *p2. */
/* Writes the rank keys of the finite candidates that r reads inside `cut` to out[0..cap),
 * in no set order, counting them in *count (shared); returns how many were written. */
static __device__ int32_t gather_inside(const Row &r, const Cut &cut, int32_t *count,
                                        unsigned long long *out, int32_t cap) {
    if (threadIdx.x == 0) *count = 0;
    __syncthreads();
    r.each([&](int64_t t, float l) {
        if (!(l > -INFINITY)) return;
        const uint32_t key = float_key(l);
        if (!cut.keeps(key, t)) return;
        const int slot = atomicAdd(count, 1);
        if (slot < cap) out[slot] = rank_key(key, t);
    });
    __syncthreads();
    return *count < cap ? *count : cap;
}

static __device__ int32_t gather_survivors(const Row &r, const Cut &top_k, Shared &sh, int32_t *p2) {
    const int32_t n = gather_inside(r, top_k, &sh.n_cand, sh.cand_key, CAND_MAX);
    *p2 = rank_entries(n, sh);
    return n;
}

/* A split row: its chunks' records and candidate lists (list_len entries per chunk). */
struct SplitRow {
    const pyspec_cuda_chunk  *chunks;
    const unsigned long long *lists;
    int32_t                   n_chunks, list_len;
};

/* The union of a split row's chunk lists, ranked in cand_key: every chunk listed its own
 * top k (or all its finite candidates), so the row's top k = the union's first n =
 * min(top_k, finite). Returns n (never more than the union holds) and sets *p2. */
static __device__ int32_t gather_listed(const SplitRow &sp, int64_t n, Shared &sh, int32_t *p2) {
    int32_t at = 0;
    for (int32_t c = 0; c < sp.n_chunks; ++c) {
        const unsigned long long *list = sp.lists + (size_t)c * sp.list_len;
        const int32_t m = sp.chunks[c].n_listed;
        for (int32_t j = threadIdx.x; j < m; j += blockDim.x) sh.cand_key[at + j] = list[j];
        at += m;
    }
    __syncthreads();
    *p2 = rank_entries(at, sh);
    return (int32_t)(n < at ? n : at);
}

/* The short-list path, on the ranked top-k survivors (n of them, rank j at entry p2 - 1 - j
 * of cand_key): applies top-p and min-p to the ranked list and computes the weights; leaves
 * the kept ones in id order in cand_key (id << 32 | rank) with their weights in cand_w (by
 * rank). Returns the number kept; sets d->kept.p to the last kept candidate, so d->weight()
 * agrees, and d->total. */
static __device__ int32_t keep_ranked(const pyspec_cuda_seq &s, Dist *d, int32_t n, int32_t p2,
                                      Shared &sh) {
    if (threadIdx.x == 0) {
        /* top-p on the ranked survivors, min-p, then the weights: as the reference does */
        int32_t m = n;
        if (s.top_p < 1.0f) {
            unsigned long long z = 0, cum = 0;
            for (int32_t j = 0; j < n; ++j)
                z += nucleus_mass(key_float((uint32_t)(sh.cand_key[p2 - 1 - j] >> 32)), d->max_logit, d->shift);
            const double target = (double)s.top_p * (double)z;
            for (int32_t j = 0; j < n; ++j) {
                cum += nucleus_mass(key_float((uint32_t)(sh.cand_key[p2 - 1 - j] >> 32)), d->max_logit, d->shift);
                if ((double)cum >= target) { m = j + 1; break; }
            }
        }
        if (s.min_p > 0.0f) {
            const float threshold = d->max_logit + s.log_min_p;
            int32_t keep = 0;
            while (keep < m && key_float((uint32_t)(sh.cand_key[p2 - 1 - keep] >> 32)) >= threshold) ++keep;
            m = keep;
        }
        unsigned long long total = 0;
        for (int32_t j = 0; j < m; ++j) {
            const float l = key_float((uint32_t)(sh.cand_key[p2 - 1 - j] >> 32));
            sh.cand_w[j] = pyspec_fixed_weight(pyspec_exp_portable((l - d->max_logit) / d->temperature), d->shift);
            total += sh.cand_w[j];
        }
        const unsigned long long last = sh.cand_key[p2 - 1 - (m - 1)];
        sh.bcast[0] = m;
        sh.bcast[1] = (long long)(last >> 32);
        sh.bcast[2] = (long long)(0xffffffffu - (uint32_t)(last & 0xffffffffu));
        sh.total = total;
    }
    __syncthreads();
    const int32_t m = (int32_t)sh.bcast[0];
    d->kept.p.all = 0;
    d->kept.p.key = (uint32_t)sh.bcast[1];
    d->kept.p.id = (int32_t)sh.bcast[2];
    d->total = sh.total;
    /* the kept ones in id order: (id << 32 | rank) */
    int32_t q2 = 1;
    while (q2 < m) q2 <<= 1;
    __syncthreads();
    for (int j = threadIdx.x; j < q2; j += blockDim.x) {
        unsigned long long v = ~0ull;
        if (j < m) v = ((unsigned long long)(0xffffffffu - (uint32_t)(sh.cand_key[p2 - 1 - j] & 0xffffffffu)) << 32) | (unsigned)j;
        sh.cand_r[j] = v; /* staging: cand_key is still being read */
    }
    __syncthreads();
    for (int j = threadIdx.x; j < q2; j += blockDim.x) sh.cand_key[j] = sh.cand_r[j];
    block_bitonic_sort(sh.cand_key, q2);
    return m;
}

/* q of one token for a draft row. */
struct DraftRow {
    const float            *probs;  /* dense row, or the sparse row's values */
    const unsigned long long *keys; /* sparse: sorted (token << 32 | j), n entries */
    const float            *sums;   /* sparse: q summed over a token's entries, at its first key */
    int64_t                 n;
    int                     sparse;
    __device__ float q(int64_t t) const {
        if (!sparse) return probs[t];
        unsigned long long want = (unsigned long long)t << 32;
        int64_t lo = 0, hi = n;
        while (lo < hi) { int64_t m = (lo + hi) >> 1; if (keys[m] < want) lo = m + 1; else hi = m; }
        return lo < n && (keys[lo] >> 32) == (unsigned long long)t ? sums[lo] : 0.0f;
    }
};

/* The first token in id order whose running sum of weight(t) exceeds target; -1 if none. */
template <typename WeightF>
static __device__ int32_t draw_in_id_order(int64_t V, const WeightF &weight, uint64_t target,
                                           Shared &sh) {
    if (threadIdx.x == 0) sh.found = -1;
    __syncthreads();
    unsigned long long carry = 0;
    for (int64_t base = 0; base < V; base += blockDim.x) {
        const int64_t t = base + threadIdx.x;
        unsigned long long w = t < V ? weight(t) : 0, incl, tile_sum;
        BlockScanU64(sh.scan).InclusiveSum(w, incl, tile_sum);
        unsigned long long cum = carry + incl;
        if (w > 0 && cum > target && cum - w <= target) sh.found = (int32_t)t;
        __syncthreads();
        if (sh.found >= 0) break;
        carry += tile_sum;
    }
    int32_t r = sh.found;
    __syncthreads();
    return r;
}

/* First entry (in id order) of the short list whose running sum of w exceeds target. */
template <typename WeightF>
static __device__ int32_t draw_short(int32_t m, const WeightF &w, uint64_t target, Shared &sh) {
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t found = -1;
        unsigned long long cum = 0;
        for (int32_t j = 0; j < m; ++j) {
            const unsigned long long x = w(j);
            cum += x;
            if (x && cum > target) { found = (int32_t)(sh.cand_key[j] >> 32); break; }
        }
        sh.found = found;
    }
    __syncthreads();
    const int32_t r = sh.found;
    __syncthreads();
    return r;
}

static __device__ void fail_row(pyspec_cuda_err *e, int32_t status, int32_t kind, int64_t seq,
                                int64_t row, int64_t index, int32_t token, float value, double q) {
    e->kind = kind;
    e->seq = seq;
    e->row = row;
    e->index = index;
    e->token = token;
    e->value = value;
    e->q = q;
    e->status = status;
}

/* The row a block resolves: its sequence, its index there, and where its failure goes. */
struct RowTask {
    const pyspec_cuda_seq *seq;
    int64_t                seq_index;
    int64_t                row;
    pyspec_cuda_err       *err;

    /* Ends the row as failed: thread 0 records the error, marks the row's token and stops
     * the sequence there (the finish kernel reports the first failure in the CPU's order).
     * Every thread calls it and then returns. */
    __device__ void fail(int32_t status, int32_t kind, int64_t index, int32_t token, float value,
                         double q) const {
        if (threadIdx.x != 0) return;
        fail_row(err, status, kind, seq_index, row, index, token, value, q);
        seq->out_tokens[row] = -1;
        atomicMin((long long *)seq->out_n_accepted, (long long)row);
    }
};

/* The sequence owning row g among all rows of the call (row_base ascends). */
static __device__ __forceinline__ int64_t owning_sequence(const pyspec_cuda_seq *seqs,
                                                          int64_t n_seqs, int64_t g) {
    int64_t lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        int64_t m = (lo + hi + 1) >> 1;
        if (seqs[m].row_base <= g) lo = m; else hi = m - 1;
    }
    return lo;
}

/* Penalties (penalties.c: pyspec_row_penalties): row i's logits with its penalty window, the
 * last pen_last_n tokens of the history followed by drafts[0..i), sorted into `win` in
 * shared memory, with the bloom filter that lets most tokens skip the lookup. */
template <typename S>
static __device__ __forceinline__ Row penalised_row(const pyspec_cuda_seq &s, int64_t i, int64_t V,
                                                    int32_t dtype, int32_t window_cap,
                                                    int32_t *win, S &sh) {
    Row r;
    r.data = (const char *)s.logits + (size_t)(i * s.row_stride) * (dtype == PYSPEC_F32 ? 4 : 2);
    r.dtype = dtype;
    r.lo = 0;
    r.V = V;
    r.win = win;
    r.win_n = 0;
    r.bloom = sh.bloom;
    r.repeat = s.pen_repeat;
    r.freq = s.pen_freq;
    r.present = s.pen_present;
    if (!s.pen_on) return r;
    const int64_t total = s.n_history + i;
    int64_t len = s.pen_last_n < 0 ? total : (total < s.pen_last_n ? total : s.pen_last_n);
    if (len > window_cap) len = window_cap; /* checked on the host */
    for (int c = threadIdx.x; c < 256; c += blockDim.x) sh.bloom[c] = 0;
    __syncthreads();
    for (int j = threadIdx.x; j < window_cap; j += blockDim.x) {
        int32_t tok = INT32_MAX;
        if (j < len) {
            int64_t idx = total - len + j;
            tok = idx < s.n_history ? s.history[idx] : s.draft[idx - s.n_history];
            atomicOr(&sh.bloom[(tok >> 5) & 255], 1u << (tok & 31));
        }
        win[j] = tok;
    }
    if (len > 0) block_bitonic_sort(win, window_cap);
    __syncthreads();
    r.win_n = (int32_t)len;
    return r;
}

/* What one pass over a row finds (row_scan.c's scans): the first NaN / +inf, the maximum
 * penalised logit with its token, and how many finite candidates there are. */
struct RowScan {
    int64_t            bad;      /* first invalid index; INT64_MAX: none */
    unsigned long long best_key; /* float key << 32 | (~id): larger ranks earlier; 0: no finite logit */
    long long          n_finite;
};

static __device__ __forceinline__ RowScan scan_row(const Row &r) {
    RowScan scan = { INT64_MAX, 0, 0 };
    r.each_raw([&](int64_t t, float raw) {
        if (isnan(raw) || raw == INFINITY) { if (t < scan.bad) scan.bad = t; return; }
        const float l = r.penalise(t, raw);
        if (!(l > -INFINITY)) return;
        ++scan.n_finite;
        const unsigned long long k = ((unsigned long long)float_key(l) << 32) | (0xffffffffu - (uint32_t)t);
        if (k > scan.best_key) scan.best_key = k;
    });
    scan.bad = block_reduce(scan.bad, MinOp());
    scan.best_key = block_reduce(scan.best_key, MaxOp());
    scan.n_finite = block_reduce(scan.n_finite, SumOp());
    return scan;
}

/* top-p over the whole row (the top-k survivors, when top-k is on): the nucleus of the
 * untempered masses. */
static __device__ __forceinline__ void apply_top_p(const pyspec_cuda_seq &s, Dist &d, Shared &sh) {
    const Row &r = d.row;
    unsigned long long z = 0;
    r.each([&](int64_t t, float l) {
        if (l > -INFINITY && d.kept.k.keeps(float_key(l), t)) z += nucleus_mass(l, d.max_logit, d.shift);
    });
    z = block_reduce(z, SumOp());
    d.kept.p = select_nucleus(r, d.kept.k, d.max_logit, d.shift, (double)s.top_p * (double)z, sh);
}

/* The integer total of the tempered fixed-point weights over the kept set. */
static __device__ __forceinline__ uint64_t total_weight(const Dist &d) {
    unsigned long long total = 0;
    d.row.each([&](int64_t t, float l) { total += d.weight_of(t, l); });
    return block_reduce(total, SumOp());
}

/* The transformed distribution (distribution.c: pyspec_build_dist) of a scanned row: the
 * temperature, the kept set (top-k, then top-p and min-p) and the total of its weights.
 * Returns the length of the short list when the kept set lives in shared memory (top-k on
 * with at most CAND_MAX survivors), else -1. A split row whose chunks listed their top k
 * (split != NULL) ranks the union of the lists instead of selecting from the row. */
static __device__ __forceinline__ int32_t build_dist(const pyspec_cuda_seq &s, const Row &r,
                                                     const RowScan &scan, const SplitRow *split,
                                                     Dist &d, Shared &sh) {
    d.row = r;
    d.best = (int32_t)(0xffffffffu - (uint32_t)(scan.best_key & 0xffffffffu));
    d.max_logit = key_float((uint32_t)(scan.best_key >> 32));
    d.greedy = !(s.temperature > 0.0f);
    d.temperature = s.temperature;
    d.shift = pyspec_weight_shift(r.V);
    d.kept.k.all = 1;
    d.kept.p.all = 1;
    d.kept.min_p_on = 0;
    d.kept.threshold = -INFINITY;
    if (d.greedy) {
        d.total = (uint64_t)1 << d.shift;
        return -1;
    }
    const bool top_k_on = s.top_k > 0 && s.top_k < r.V;
    const long long survivors = scan.n_finite < s.top_k ? scan.n_finite : s.top_k;
    int32_t p2 = 0;
    if (split) {
        const int32_t n = gather_listed(*split, survivors, sh, &p2);
        return keep_ranked(s, &d, n, p2, sh);
    }
    if (top_k_on && scan.n_finite > s.top_k) d.kept.k = select_kth(r, d.kept.k, s.top_k, sh);
    if (top_k_on && survivors <= CAND_MAX) {
        const int32_t n = gather_survivors(r, d.kept.k, sh, &p2);
        return keep_ranked(s, &d, n, p2, sh);
    }
    if (s.top_p < 1.0f) apply_top_p(s, d, sh);
    if (s.min_p > 0.0f) {
        d.kept.min_p_on = 1;
        d.kept.threshold = d.max_logit + s.log_min_p; /* pyspec_min_p_threshold, log on the host */
    }
    d.total = total_weight(d);
    return -1;
}

/* The weight of entry j (in id order) of the short list. */
static __device__ __forceinline__ unsigned long long short_weight(const Shared &sh, int32_t j) {
    return sh.cand_w[sh.cand_key[j] & 0xffffffffu];
}

/* An inverse-CDF draw from the row's distribution with the uniform u. */
static __device__ __forceinline__ int32_t draw_from_dist(const Dist &d, int32_t n_short, double u,
                                                         Shared &sh) {
    const uint64_t target = pyspec_draw_target(u, d.total);
    if (d.greedy) return d.best;
    if (n_short >= 0)
        return draw_short(n_short, [&](int32_t j) -> unsigned long long { return short_weight(sh, j); },
                          target, sh);
    return draw_in_id_order(d.row.V, [&](int64_t t) -> unsigned long long { return d.weight(t); },
                            target, sh);
}

/* q of draft row i: a dense row as it is; a sparse row's (token, entry) pairs sorted into
 * shared memory, with each token's q summed in entry order. */
static __device__ __forceinline__ DraftRow load_draft_row(const pyspec_cuda_seq &s, int64_t i,
                                                          int32_t sparse_cap,
                                                          unsigned long long *sp_keys,
                                                          float *sp_sums) {
    DraftRow q;
    q.sparse = s.q_tokens != NULL;
    q.probs = s.q_probs + i * s.q_stride;
    q.keys = sp_keys;
    q.sums = sp_sums;
    q.n = s.q_n;
    if (!q.sparse) return q;
    const int32_t *tok = s.q_tokens + i * s.q_stride;
    for (int j = threadIdx.x; j < sparse_cap; j += blockDim.x)
        sp_keys[j] = j < s.q_n ? ((unsigned long long)(uint32_t)tok[j] << 32) | (unsigned)j : ~0ull;
    block_bitonic_sort(sp_keys, sparse_cap);
    for (int j = threadIdx.x; j < s.q_n; j += blockDim.x) {
        unsigned long long t = sp_keys[j] >> 32;
        if (j > 0 && (sp_keys[j - 1] >> 32) == t) continue;
        float sum = 0.0f;
        for (int m = j; m < s.q_n && (sp_keys[m] >> 32) == t; ++m)
            sum += q.probs[sp_keys[m] & 0xffffffffu];
        sp_sums[j] = sum;
    }
    __syncthreads();
    return q;
}

/* The residual max(0, p - q) over the kept set as fixed-point weights
 * pyspec_fixed_residual(W_t, total, q_t), summed into *residual; the short list keeps each
 * in sh.cand_r, the row path recomputes them when it draws. q is checked on the kept set,
 * as on the CPU: returns the lowest token whose q is not a probability, or LLONG_MAX. */
static __device__ __forceinline__ long long sum_residual(const Dist &d, int32_t n_short,
                                                         const DraftRow &q, Shared &sh,
                                                         unsigned long long *residual) {
    unsigned long long sum = 0;
    long long bad_q = LLONG_MAX;
    if (n_short >= 0) { /* the short list, in id order */
        for (int32_t j = threadIdx.x; j < n_short; j += blockDim.x) {
            const int32_t t = (int32_t)(sh.cand_key[j] >> 32);
            const float qt = q.q(t);
            sh.cand_r[j] = 0;
            if (!pyspec_draft_q_in_range(qt)) { if (t < bad_q) bad_q = t; continue; }
            sh.cand_r[j] = pyspec_fixed_residual(short_weight(sh, j), d.total, (double)qt);
            sum += sh.cand_r[j];
        }
    } else {
        d.row.each([&](int64_t t, float l) {
            const uint64_t w = d.weight_of(t, l);
            if (!w && !(d.greedy ? t == d.best : d.kept.keeps(l, t))) return;
            const float qt = q.q(t);
            if (!pyspec_draft_q_in_range(qt)) { if (t < bad_q) bad_q = t; return; }
            sum += pyspec_fixed_residual(w, d.total, (double)qt);
        });
    }
    bad_q = block_reduce(bad_q, MinOp());
    *residual = block_reduce(sum, SumOp());
    return bad_q;
}

/* The corrective token after a rejection: drawn from the residual, or from p itself when
 * p <= q on the whole support (the residual is then empty). */
static __device__ __forceinline__ int32_t draw_corrective(const Dist &d, int32_t n_short,
                                                          const DraftRow &q,
                                                          unsigned long long residual,
                                                          double u_res, Shared &sh) {
    if (residual == 0) return draw_from_dist(d, n_short, u_res, sh);
    const uint64_t target = pyspec_draw_target(u_res, residual);
    if (n_short >= 0)
        return draw_short(n_short, [&](int32_t j) -> unsigned long long { return sh.cand_r[j]; },
                          target, sh);
    const uint64_t total = d.total;
    auto residual_of = [&](int64_t t) -> unsigned long long {
        uint64_t w = d.weight(t);
        return w ? pyspec_fixed_residual(w, total, (double)q.q(t)) : 0;
    };
    return draw_in_id_order(d.row.V, residual_of, target, sh);
}

/* The token row i emits (verify.c: resolve_row) and whether it ends the sequence: the bonus
 * row and point-mass drafts draw from p; otherwise modified rejection sampling accepts the
 * draft or draws the corrective token. Returns false, the failure recorded, when q is not a
 * probability where it is read. */
static __device__ __forceinline__ bool choose_token(const RowTask &task, const Dist &d,
                                                    int32_t n_short, int32_t sparse_cap,
                                                    unsigned long long *sp_keys, float *sp_sums,
                                                    Shared &sh, int32_t *token, int *stops) {
    const pyspec_cuda_seq &s = *task.seq;
    const int64_t i = task.row;
    const int64_t pos = s.position + i;
    if (i == s.n_draft || !s.q_probs) { /* bonus row, or a point-mass draft */
        *token = draw_from_dist(d, n_short, pyspec_uniform_keyed(s.seed, pos, PYSPEC_PURPOSE_SAMPLE), sh);
        *stops = i == s.n_draft || *token != s.draft[i];
        return true;
    }
    const DraftRow q = load_draft_row(s, i, sparse_cap, sp_keys, sp_sums);
    const int32_t x = s.draft[i];
    const float qx = q.q(x);
    if (!pyspec_draft_q_in_range(qx) || !(qx > 0.0f)) {
        task.fail(PYSPEC_ERR_DRAFT_PROBS, PYSPEC_CUDA_ERR_DRAFTED_Q, 0, x, 0.0f, (double)qx);
        return false;
    }
    const double px = (double)d.weight(x) / (double)d.total;
    const double u = pyspec_uniform_keyed(s.seed, pos, PYSPEC_PURPOSE_ACCEPT);
    if (pyspec_accepts(u, (double)qx, px)) {
        *token = x;
        *stops = 0;
        return true;
    }
    unsigned long long residual = 0;
    const long long bad_q = sum_residual(d, n_short, q, sh, &residual);
    if (bad_q != LLONG_MAX) {
        const float q_bad = threadIdx.x == 0 ? q.q(bad_q) : 0.0f; /* read by the recorder only */
        task.fail(PYSPEC_ERR_DRAFT_PROBS, PYSPEC_CUDA_ERR_Q, 0, (int32_t)bad_q, 0.0f, (double)q_bad);
        return false;
    }
    const double u_res = pyspec_uniform_keyed(s.seed, pos, PYSPEC_PURPOSE_RESIDUAL);
    *token = draw_corrective(d, n_short, q, residual, u_res, sh);
    *stops = 1;
    return true;
}

/* The raw row's softmax normaliser (expf: not bit-exact) relative to the raw maximum: with
 * penalties the distribution's maximum is the penalised one, and a raw logit far above it
 * would overflow expf. Every term, not only those within the host's PYSPEC_TOP_PROB_SPAN:
 * a block sums the row in one strided pass anyway. */
struct RawNorm {
    float  max;
    double z;
};

/* Over the tokens r reads: the row, or a chunk of it in the chunk pass. */
static __device__ __forceinline__ RawNorm raw_normaliser(const Row &r) {
    float raw_max = -INFINITY;
    r.each_raw([&](int64_t, float raw) { raw_max = fmaxf(raw_max, raw); });
    raw_max = block_reduce(raw_max, MaxOp());
    double z = 0.0;
    r.each_raw([&](int64_t, float raw) {
        if (raw > -INFINITY) z += (double)expf(raw - raw_max);
    });
    z = block_reduce(z, SumOp());
    return RawNorm{raw_max, z};
}

/* Whether a sequence's rows take the split short list (stage.h: pyspec_cuda_listed_top_k,
 * against the call's list length). */
static __device__ __forceinline__ bool split_short_list(const pyspec_cuda_seq &s, int64_t V,
                                                        int32_t list_len) {
    return s.temperature > 0.0f && s.top_k > 0 && s.top_k < V && s.top_k <= list_len;
}

/* The scan of a split row: its chunks' scans combined (exact: a minimum, a maximum, a sum). */
static __device__ __forceinline__ RowScan combined_scan(const pyspec_cuda_chunk *chunks, int32_t n) {
    RowScan scan = { INT64_MAX, 0, 0 };
    for (int32_t c = 0; c < n; ++c) {
        if (chunks[c].bad < scan.bad) scan.bad = chunks[c].bad;
        if (chunks[c].best_key > scan.best_key) scan.best_key = chunks[c].best_key;
        scan.n_finite += chunks[c].n_finite;
    }
    return scan;
}

/* The chunk pass: block b scans chunk b % chunks of row b / chunks (step 1, penalties
 * applied) and, for a row that takes the split short list, lists the chunk's top k. */
static __global__ void __launch_bounds__(NT)
chunks_kernel(const pyspec_cuda_seq *seqs, int64_t n_seqs, int64_t V, int32_t dtype,
              int32_t window_cap, pyspec_cuda_split split, const pyspec_cuda_err *seq_err,
              pyspec_cuda_chunk *chunks, unsigned long long *lists) {
    DYNAMIC_SHARED(dyn);
    __shared__ ChunkShared sh;
    const int64_t g = blockIdx.x / split.chunks, c = blockIdx.x % split.chunks;
    const int64_t si = owning_sequence(seqs, n_seqs, g);
    const pyspec_cuda_seq &s = seqs[si];
    if (seq_err[si].status != PYSPEC_OK) return; /* the row kernel leaves too */
    Row r = penalised_row(s, g - s.row_base, V, dtype, window_cap, (int32_t *)dyn, sh);
    const int64_t length = (V + split.chunks - 1) / split.chunks;
    r.lo = c * length < V ? c * length : V;
    r.V = r.lo + length < V ? r.lo + length : V;
    const RowScan scan = scan_row(r);
    int32_t n_listed = 0;
    if (scan.bad == INT64_MAX && split_short_list(s, V, split.list_len)) {
        const Cut all = { 1, 0, 0 };
        const Cut cut = scan.n_finite > s.top_k ? select_kth(r, all, s.top_k, sh) : all;
        n_listed = gather_inside(r, cut, &sh.n_listed, lists + (size_t)blockIdx.x * split.list_len,
                                 split.list_len); /* == min(top_k, finite) */
    }
    RawNorm norm{ -INFINITY, 0.0 };
    if (scan.bad == INT64_MAX && (s.out_logprobs || s.out_top_probs)) norm = raw_normaliser(r);
    if (threadIdx.x == 0)
        chunks[blockIdx.x] = pyspec_cuda_chunk{ scan.bad, scan.best_key, scan.n_finite, n_listed, norm.max, norm.z };
}

/* The raw normaliser of a split row from its chunks' (max_c, z_c): z = sum z_c e^(max_c - max),
 * in double. (Floats differ from one block's sum in the last bits: logprobs are not
 * bit-exact on the device anyway.) */
static __device__ __forceinline__ RawNorm combined_norm(const pyspec_cuda_chunk *chunks, int32_t n) {
    RawNorm norm{ -INFINITY, 0.0 };
    for (int32_t c = 0; c < n; ++c) norm.max = fmaxf(norm.max, chunks[c].raw_max);
    for (int32_t c = 0; c < n; ++c)
        if (chunks[c].raw_max > -INFINITY) norm.z += chunks[c].raw_z * exp((double)chunks[c].raw_max - (double)norm.max);
    return norm;
}

static __global__ void __launch_bounds__(NT)
rows_kernel(const pyspec_cuda_seq *seqs, int64_t n_seqs, int64_t V, int32_t dtype,
            int32_t window_cap, int32_t sparse_cap, pyspec_cuda_split split,
            const pyspec_cuda_chunk *chunks, const unsigned long long *lists,
            const pyspec_cuda_err *seq_err, pyspec_cuda_err *row_err) {
    DYNAMIC_SHARED(dyn);
    __shared__ Shared sh;
    const int64_t g = blockIdx.x;
    const int64_t si = owning_sequence(seqs, n_seqs, g);
    const pyspec_cuda_seq &s = seqs[si];
    const int64_t i = g - s.row_base;
    if (seq_err[si].status != PYSPEC_OK) return;
    /* Behind a known rejection: one read for the whole block (another block's atomicMin may
     * land between two warps' reads, and a block must leave with all its threads). */
    if (threadIdx.x == 0) sh.behind = *(volatile long long *)s.out_n_accepted < i;
    __syncthreads();
    if (sh.behind) return;
    const RowTask task = { &s, si, i, &row_err[g] };

    /* Shared memory: sparse keys, their sums, then the penalty window. */
    unsigned long long *sp_keys = (unsigned long long *)dyn;
    float *sp_sums = (float *)(sp_keys + sparse_cap);
    int32_t *win = (int32_t *)(sp_sums + sparse_cap);

    const Row r = penalised_row(s, i, V, dtype, window_cap, win, sh);
    const bool split_row = split.chunks > 1;
    const pyspec_cuda_chunk *row_chunks = chunks + g * split.chunks; /* read when split_row */
    const RowScan scan = split_row ? combined_scan(row_chunks, split.chunks) : scan_row(r);
    if (scan.bad != INT64_MAX) {
        /* the value is read by the thread that records it only */
        const float value = threadIdx.x == 0 ? load_logit(r.data, dtype, scan.bad) : 0.0f;
        task.fail(PYSPEC_ERR_LOGITS, PYSPEC_CUDA_ERR_LOGIT, scan.bad, 0, value, 0.0);
        return;
    }
    if (scan.best_key == 0) {
        task.fail(PYSPEC_ERR_LOGITS, PYSPEC_CUDA_ERR_NO_FINITE, -1, 0, 0.0f, 0.0);
        return;
    }

    Dist d;
    SplitRow listed = { NULL, NULL, 0, 0 };
    if (split_row && split_short_list(s, V, split.list_len))
        listed = { row_chunks, lists + (size_t)g * split.chunks * split.list_len, split.chunks, split.list_len };
    const int32_t n_short = build_dist(s, r, scan, listed.chunks ? &listed : NULL, d, sh);
    int32_t token;
    int stops;
    if (!choose_token(task, d, n_short, sparse_cap, sp_keys, sp_sums, sh, &token, &stops)) return;
    if (token < 0) token = d.best; /* unreachable: the target is below the total */

    RawNorm norm{0.0f, 1.0};
    if (s.out_logprobs || s.out_top_probs)
        norm = split_row ? combined_norm(row_chunks, split.chunks) : raw_normaliser(r);
    if (threadIdx.x == 0) {
        s.out_tokens[i] = token;
        if (s.out_logprobs)
            s.out_logprobs[i] =
                (float)((double)load_logit(r.data, r.dtype, token) - (double)norm.max - log(norm.z));
        if (s.out_top_probs) s.out_top_probs[i] = (float)(1.0 / norm.z);
        task.err->status = PYSPEC_OK;
        if (stops) atomicMin((long long *)s.out_n_accepted, (long long)i);
    }
}

#ifndef PYSPEC_CUDA_EMULATE
size_t pyspec_cuda_rows_smem(int32_t window_cap, int32_t sparse_cap) {
    return (size_t)sparse_cap * (sizeof(unsigned long long) + sizeof(float)) +
           (size_t)window_cap * sizeof(int32_t);
}

size_t pyspec_cuda_rows_static_smem(void) {
    cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, rows_kernel) != cudaSuccess) return 65536;
    return attr.sharedSizeBytes;
}

cudaError_t pyspec_cuda_rows_set_max_smem(size_t bytes) {
    return cudaFuncSetAttribute(rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

cudaError_t pyspec_cuda_chunks_set_max_smem(size_t bytes) {
    return cudaFuncSetAttribute(chunks_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

cudaError_t pyspec_cuda_launch_chunks(const pyspec_cuda_seq *d_seqs, int64_t n_seqs,
                                      int64_t total_rows, int64_t n_vocab, int32_t dtype,
                                      int32_t window_cap, pyspec_cuda_split split,
                                      const pyspec_cuda_err *d_seq_err,
                                      pyspec_cuda_chunk *d_chunks, unsigned long long *d_lists,
                                      cudaStream_t stream) {
    const size_t smem = (size_t)window_cap * sizeof(int32_t);
    chunks_kernel<<<(unsigned)(total_rows * split.chunks), NT, smem, stream>>>(
        d_seqs, n_seqs, n_vocab, dtype, window_cap, split, d_seq_err, d_chunks, d_lists);
    return cudaGetLastError();
}

cudaError_t pyspec_cuda_launch_rows(const pyspec_cuda_seq *d_seqs, int64_t n_seqs,
                                    int64_t total_rows, int64_t n_vocab, int32_t dtype,
                                    int32_t window_cap, int32_t sparse_cap,
                                    pyspec_cuda_split split, const pyspec_cuda_chunk *d_chunks,
                                    const unsigned long long *d_lists,
                                    const pyspec_cuda_err *d_seq_err, pyspec_cuda_err *d_row_err,
                                    cudaStream_t stream) {
    size_t smem = pyspec_cuda_rows_smem(window_cap, sparse_cap);
    rows_kernel<<<(unsigned)total_rows, NT, smem, stream>>>(d_seqs, n_seqs, n_vocab, dtype,
                                                            window_cap, sparse_cap, split, d_chunks,
                                                            d_lists, d_seq_err, d_row_err);
    return cudaGetLastError();
}
#endif /* PYSPEC_CUDA_EMULATE */
