/*
 * emu.h - just enough of CUDA to run pyspec's kernels on the host, one thread per CUDA
 * thread, so their logic is tested on machines without a GPU (tests/cuda_emu).
 *
 * A block runs as blockDim.x std::threads at once; __syncthreads is a std::barrier over
 * them, warp shuffles go through a per-warp exchange buffer between two warp barriers,
 * atomics are GCC builtins, __shared__ variables are plain statics (blocks run one after the
 * other). draw.h and philox.h take their host branches (no __CUDA_ARCH__): the same
 * arithmetic by design. Not a simulator of timing, memory spaces or races: only of results.
 */
#ifndef PYSPEC_CUDA_EMU_H
#define PYSPEC_CUDA_EMU_H

#define PYSPEC_CUDA_EMULATE 1

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(n)
#define __align__(n) alignas(n)

typedef int cudaError_t;
typedef void *cudaStream_t;
#define cudaSuccess 0

struct emu_dim3 { unsigned x = 1, y = 1, z = 1; };
extern thread_local emu_dim3 threadIdx;
extern emu_dim3 blockIdx_shared, blockDim;
#define blockIdx blockIdx_shared

namespace emu {
extern std::unique_ptr<std::barrier<>> block_barrier;
extern std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
extern uint64_t warp_exchange[32][32];
extern unsigned char dynamic_smem[1 << 18];
}

namespace emu {
extern thread_local unsigned syncs;    /* this thread's __syncthreads in the current block */
extern std::atomic<unsigned> returned; /* threads of the current block out of the kernel  */
void diverged(const char *what);       /* reports a block's threads parting ways, aborts  */
}
/* A __syncthreads after a thread of the block has left the kernel is undefined on a GPU
 * (and would hang here): reported instead. */
inline void __syncthreads() {
    ++emu::syncs;
    if (emu::returned.load()) emu::diverged("__syncthreads after a thread of the block returned");
    emu::block_barrier->arrive_and_wait();
}

template <typename T> inline T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    static_assert(sizeof(T) <= 8, "shuffle of a large type");
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    emu::warp_exchange[warp][lane] = bits;
    emu::warp_barriers[warp]->arrive_and_wait();
    uint64_t other = emu::warp_exchange[warp][lane ^ (unsigned)lane_mask];
    emu::warp_barriers[warp]->arrive_and_wait();
    T r;
    std::memcpy(&r, &other, sizeof r);
    return r;
}

template <typename T> inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <typename T> inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <typename T> inline T atomicMin(T *p, T v) {
    T cur = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (v < cur && !__atomic_compare_exchange_n(p, &cur, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return cur;
}

inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

struct __half { uint16_t bits; };
inline __half __ushort_as_half(uint16_t bits) { return __half{bits}; }
inline float __half2float(__half h) { /* exact IEEE binary16 -> binary32 */
    const uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16, exp = (h.bits >> 10) & 31, man = h.bits & 1023;
    if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float f = std::ldexp((float)man, -24);
        return sign ? -f : f;
    }
    return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
}

/* cub::BlockScan<unsigned long long, N> with InclusiveSum(in, out, aggregate). */
namespace cub {
template <typename T, int N> struct BlockScan {
    struct TempStorage { T v[1024]; T agg; };
    TempStorage &s;
    explicit BlockScan(TempStorage &t) : s(t) {}
    void InclusiveSum(T in, T &out, T &aggregate) {
        s.v[threadIdx.x] = in;
        __syncthreads();
        if (threadIdx.x == 0) {
            T acc = 0;
            for (unsigned i = 0; i < blockDim.x; ++i) { acc += s.v[i]; s.v[i] = acc; }
            s.agg = acc;
        }
        __syncthreads();
        out = s.v[threadIdx.x];
        aggregate = s.agg;
        __syncthreads();
    }
};
}  // namespace cub

namespace emu {
/* Runs kernel(args...) for every block of a grid, `threads` threads per block. */
void launch(unsigned blocks, unsigned threads, const std::function<void()> &body);
}

#endif /* PYSPEC_CUDA_EMU_H */
