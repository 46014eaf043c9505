// pyspec: a kernel for Q6_K weight rows against 1-4 rows of Q8_K activations, in two
// variants: AVX-512 VNNI (512-bit, vpdpwssd) where the compiler targets it, AVX2 elsewhere
// (Zen 3, Intel's client cores, the Skylake-X AVX-512 without VNNI). llama.cpp multiplies a
// Q6_K matrix by a batch one (weight row, token) pair at a time, so a verify pass over k
// tokens unpacks every 6-bit weight k times; here each 256-weight block is unpacked once for
// all the tokens. Written by pyspec from the block layout (applied to llama.cpp's sources at
// build time by pyspec install-llama). Each token's sum is formed exactly as ggml's AVX2
// ggml_vec_dot_q6_K_q8_K forms it (the same integer in each of its 8 lanes per block, the
// same float steps), so a result is bitwise ggml's, whatever the batch and the variant. C,
// so that ggml-cpu.c can include it.
#pragma once
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
// How many weight rows ahead the kernel asks for: the weights stream from the model's
// file mapping in 4 KiB pages, where the hardware prefetcher stops at every page boundary;
// on a Zen 5 a 4-token pass took 41-42 ms without this and 33.5-34.5 with it (docs/llama-build.md).
#define PYSPEC_Q6K_AHEAD 2
// The most tokens a matrix takes through this kernel; longer batches (prompts) go to ggml's
// tiled path, faster from about 33 tokens on (q6k_kernel.py has the measurements).
#define PYSPEC_Q6K_MAX_TOKENS 32

typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } pyspec_q6k_block;
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } pyspec_q6k_q8k_block;

// Asks for block i of the weight row at ahead (its 210 bytes: four cache lines).
static inline __attribute__((always_inline)) void pyspec_q6k_prefetch_block(const char * ahead, int i) {
    const char * next = ahead + (size_t) i * sizeof(pyspec_q6k_block);
    _mm_prefetch(next, _MM_HINT_T0); _mm_prefetch(next + 64, _MM_HINT_T0);
    _mm_prefetch(next + 128, _MM_HINT_T0); _mm_prefetch(next + 192, _MM_HINT_T0);
}

// The same pairwise order as ggml's hsum_float_8.
static inline float pyspec_q6k_hsum8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// out[c] = weight row vx . activation row c (at vy + c * y_stride bytes), c < NC.
// n: the row length, a multiple of 256. ahead: a weight row to prefetch meanwhile, or NULL.
static inline __attribute__((always_inline)) void pyspec_q6k_dot_rows(
        int n, const void * vx, const char * vy, size_t y_stride, float * out, const int NC, const char * ahead) {
    const int nb = n / 256;
    const pyspec_q6k_block * x = (const pyspec_q6k_block *) vx;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    // The high 2 bits of each weight: in the low 256 bits for the first 32-byte chunk of a
    // pair, in the high 256 for the second (ggml takes them from the same qh bytes).
    const __m512i mask_a = _mm512_inserti64x4(_mm512_set1_epi8(0x03), _mm256_set1_epi8(0x0C), 1);
    const __m512i shift_a = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i mask_b = _mm512_inserti64x4(_mm512_set1_epi8(0x30), _mm256_set1_epi8((char) 0xC0), 1);
    const __m512i shift_b = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    // 16-bit lane l of scale vector m holds the scale of weights 64 m + 2 l, 64 m + 2 l + 1.
    __m512i scale_index[4];
    for (int m = 0; m < 4; m++) {
        int16_t idx[32];
        for (int l = 0; l < 32; l++) idx[l] = (int16_t) (4 * m + l / 8);
        scale_index[m] = _mm512_loadu_si512(idx);
    }
    __m256 acc[4];
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const pyspec_q6k_block * b = x + i;
        if (ahead) pyspec_q6k_prefetch_block(ahead, i);
        const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) b->scales));
        const __m512i scales_wide = _mm512_zextsi256_si512(scales16);
        __m512i sums[4];
        for (int c = 0; c < NC; c++) sums[c] = _mm512_setzero_si512();
        for (int j = 0; j < 2; j++) {
            const __m512i bits = _mm512_loadu_si512(b->ql + 64 * j);
            const __m512i high = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *) (b->qh + 32 * j)));
            const __m512i high_a = _mm512_sllv_epi16(_mm512_and_si512(high, mask_a), shift_a);
            const __m512i high_b = _mm512_srlv_epi16(_mm512_and_si512(high, mask_b), shift_b);
            // weights 128 j + 0..63 and 128 j + 64..127, each 0..63 (the -32 comes off below)
            const __m512i q_lo = _mm512_or_si512(_mm512_and_si512(bits, low4), high_a);
            const __m512i q_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(bits, 4), low4), high_b);
            const __m512i sc_lo = _mm512_permutexvar_epi16(scale_index[2 * j], scales_wide);
            const __m512i sc_hi = _mm512_permutexvar_epi16(scale_index[2 * j + 1], scales_wide);
            for (int c = 0; c < NC; c++) {
                const pyspec_q6k_q8k_block * y = (const pyspec_q6k_q8k_block *) (vy + c * y_stride) + i;
                const __m512i y_lo = _mm512_loadu_si512(y->qs + 128 * j);
                const __m512i y_hi = _mm512_loadu_si512(y->qs + 128 * j + 64);
                sums[c] = _mm512_dpwssd_epi32(sums[c], _mm512_maddubs_epi16(q_lo, y_lo), sc_lo);
                sums[c] = _mm512_dpwssd_epi32(sums[c], _mm512_maddubs_epi16(q_hi, y_hi), sc_hi);
            }
        }
        const float xd = _cvtsh_ss(b->d);
        for (int c = 0; c < NC; c++) {
            const pyspec_q6k_q8k_block * y = (const pyspec_q6k_q8k_block *) (vy + c * y_stride) + i;
            // lane k: bytes 4k..4k+3 of every 32-byte chunk, as in ggml's 256-bit sum
            __m256i lanes = _mm256_add_epi32(_mm512_castsi512_si256(sums[c]), _mm512_extracti64x4_epi64(sums[c], 1));
            const __m256i offset = _mm256_slli_epi32(
                _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *) y->bsums), scales16), 5);
            lanes = _mm256_sub_epi32(lanes, offset);
            const float d = y->d * xd;
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc[c]);
        }
    }
    for (int c = 0; c < NC; c++) out[c] = pyspec_q6k_hsum8(acc[c]);
}

#else  // AVX2, FMA and F16C: the same sums in 256-bit vectors, vpmaddwd for vpdpwssd

// Row t: the byte shuffle that puts scale 2 t in bytes 0-7 and scale 2 t + 1 in bytes 8-15.
static const uint8_t pyspec_q6k_scale_picks[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},         {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},         {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},         {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13}, {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

// out[c] = weight row vx . activation row c (at vy + c * y_stride bytes), c < NC.
// n: the row length, a multiple of 256. ahead: a weight row to prefetch meanwhile, or NULL.
static inline __attribute__((always_inline)) void pyspec_q6k_dot_rows(
        int n, const void * vx, const char * vy, size_t y_stride, float * out, const int NC, const char * ahead) {
    const int nb = n / 256;
    const pyspec_q6k_block * x = (const pyspec_q6k_block *) vx;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i low2 = _mm256_set1_epi8(0x03);
    __m256 acc[4];
    #pragma GCC unroll 4
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const pyspec_q6k_block * b = x + i;
        if (ahead) pyspec_q6k_prefetch_block(ahead, i);
        const __m128i scales8 = _mm_loadu_si128((const __m128i *) b->scales);
        __m256i sums[4];
        #pragma GCC unroll 4
        for (int c = 0; c < NC; c++) sums[c] = _mm256_setzero_si256();
        #pragma GCC unroll 2
        for (int j = 0; j < 2; j++) {
            const __m256i bits0 = _mm256_loadu_si256((const __m256i *) (b->ql + 64 * j));
            const __m256i bits1 = _mm256_loadu_si256((const __m256i *) (b->ql + 64 * j + 32));
            const __m256i high = _mm256_loadu_si256((const __m256i *) (b->qh + 32 * j));
            #pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                // weights 128 j + 32 u + 0..31, each 0..63 (the -32 comes off below): the low
                // or high nibbles of ql, bits 2u, 2u + 1 of qh above them
                const __m256i bits = u & 1 ? bits1 : bits0;
                const __m256i nibbles = u < 2 ? bits : _mm256_srli_epi16(bits, 4);
                const __m256i top = _mm256_and_si256(_mm256_srli_epi16(high, 2 * u), low2);
                const __m256i q = _mm256_or_si256(_mm256_and_si256(nibbles, low4), _mm256_slli_epi16(top, 4));
                // the scales of its two halves: scale 2 t in 16-bit lanes 0-7, 2 t + 1 in 8-15
                const __m128i pick = _mm_loadu_si128((const __m128i *) pyspec_q6k_scale_picks[4 * j + u]);
                const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales8, pick));
                #pragma GCC unroll 4
                for (int c = 0; c < NC; c++) {
                    const pyspec_q6k_q8k_block * y = (const pyspec_q6k_q8k_block *) (vy + c * y_stride) + i;
                    const __m256i yq = _mm256_loadu_si256((const __m256i *) (y->qs + 128 * j + 32 * u));
                    sums[c] = _mm256_add_epi32(sums[c], _mm256_madd_epi16(_mm256_maddubs_epi16(q, yq), sc));
                }
            }
        }
        const __m256i scales16 = _mm256_cvtepi8_epi16(scales8);
        const float xd = _cvtsh_ss(b->d);
        #pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const pyspec_q6k_q8k_block * y = (const pyspec_q6k_q8k_block *) (vy + c * y_stride) + i;
            const __m256i offset = _mm256_slli_epi32(
                _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *) y->bsums), scales16), 5);
            const __m256i lanes = _mm256_sub_epi32(sums[c], offset);
            const float d = y->d * xd;
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc[c]);
        }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < NC; c++) out[c] = pyspec_q6k_hsum8(acc[c]);
}

#endif

// out[c] for c < ncols (1 to 4), as above.
static inline void pyspec_q6k_dot(int n, const void * vx, const void * vy, size_t y_stride, int ncols, float * out,
                                  const char * ahead) {
    const char * y = (const char *) vy;
    switch (ncols) {
        case 1: pyspec_q6k_dot_rows(n, vx, y, y_stride, out, 1, ahead); break;
        case 2: pyspec_q6k_dot_rows(n, vx, y, y_stride, out, 2, ahead); break;
        case 3: pyspec_q6k_dot_rows(n, vx, y, y_stride, out, 3, ahead); break;
        default: pyspec_q6k_dot_rows(n, vx, y, y_stride, out, 4, ahead); break;
    }
}

// Rows [row_start, row_end) of a Q6_K matrix (w: row 0, w_stride bytes apart) times ncols
// Q8_K activation rows (y, y_stride bytes apart): token c's result for weight row r goes to
// float r of dst + c * dst_stride bytes. Weight rows are taken 16 at a time, so that a block
// stays in cache while every group of 4 tokens passes over it.
static inline void pyspec_q6k_mul_mat(int n, const char * w, size_t w_stride, int64_t row_start, int64_t row_end,
                                      const char * y, size_t y_stride, int ncols, char * dst, size_t dst_stride) {
    for (int64_t block = row_start; block < row_end; block += 16) {
        const int64_t block_end = block + 16 < row_end ? block + 16 : row_end;
        for (int c0 = 0; c0 < ncols; c0 += 4) {
            const int group = ncols - c0 < 4 ? ncols - c0 : 4;
            for (int64_t r = block; r < block_end; r++) {
                float out[4];
                const char * ahead = c0 == 0 && r + PYSPEC_Q6K_AHEAD < row_end ? w + (r + PYSPEC_Q6K_AHEAD) * w_stride : NULL;
                pyspec_q6k_dot(n, w + r * w_stride, y + c0 * y_stride, y_stride, group, out, ahead);
                for (int c = 0; c < group; c++) ((float *) (dst + (c0 + c) * dst_stride))[r] = out[c];
            }
        }
    }
}
