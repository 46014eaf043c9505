/*
 * block_ops.cuh - block-wide building blocks of the row kernel: reductions, logit loads,
 * the order-preserving key of a float, a shared-memory bitonic sort.
 * Every function here must be called by all threads of the block (they synchronise).
 */
#ifndef PYSPEC_CUDA_BLOCK_OPS_CUH
#define PYSPEC_CUDA_BLOCK_OPS_CUH

#ifndef PYSPEC_CUDA_EMULATE
#  include <cuda_bf16.h>
#  include <cuda_fp16.h>
#endif
#include <stdint.h>

#include "cuda_internal.h"

/* The block's dynamic shared memory (on the host, the emulator's buffer). */
#ifdef PYSPEC_CUDA_EMULATE
#  define DYNAMIC_SHARED(name) unsigned char *name = emu::dynamic_smem
#else
#  define DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

/* A 16-bit logit as float (exact): binary16, or bf16 (the high half of a binary32). */
static __device__ __forceinline__ float half_bits_float(uint16_t bits, int32_t dtype) {
    if (dtype == PYSPEC_F16) return __half2float(__ushort_as_half(bits));
    return __uint_as_float((uint32_t)bits << 16);
}

/* Element i of a row, as float (exact for every dtype). */
static __device__ __forceinline__ float load_logit(const void *row, int32_t dtype, int64_t i) {
    if (dtype == PYSPEC_F32) return ((const float *)row)[i];
    return half_bits_float(((const uint16_t *)row)[i], dtype);
}

/* Order-preserving key: a > b (as floats, -0 == +0 after canonicalising) iff key(a) > key(b). */
static __device__ __forceinline__ uint32_t float_key(float x) {
    if (x == 0.0f) x = 0.0f; /* -0 -> +0: equal logits must tie */
    uint32_t u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static __device__ __forceinline__ float key_float(uint32_t k) {
    uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    return __uint_as_float(u);
}

struct SumOp {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MinOp {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return b < a ? b : a; }
};
struct MaxOp {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return b > a ? b : a; }
};

/* Reduction over the block; every thread gets the result. The order of combination is
 * fixed (warp butterfly, then warps 0, 1, ...), though only exact (integer, min, max)
 * reductions are ever used where results must match the CPU. */
template <typename T, typename Op>
static __device__ __forceinline__ T block_reduce(T v, Op op) {
    __shared__ T partial[32];
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n_warps = blockDim.x >> 5;
    __syncthreads(); /* the previous call's readers are done with partial[] */
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    T r = partial[0];
    for (int w = 1; w < n_warps; ++w) r = op(r, partial[w]);
    return r;
}

/* Ascending bitonic sort of n (a power of two, <= blockDim-strided) keys in shared memory. */
template <typename K>
static __device__ void block_bitonic_sort(K *keys, int n) {
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                int j = i ^ stride;
                if (j > i) {
                    bool up = (i & size) == 0;
                    K a = keys[i], b = keys[j];
                    if ((a > b) == up) { keys[i] = b; keys[j] = a; }
                }
            }
        }
    }
    __syncthreads();
}

#endif /* PYSPEC_CUDA_BLOCK_OPS_CUH */
