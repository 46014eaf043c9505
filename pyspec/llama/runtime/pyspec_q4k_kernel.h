// pyspec: a kernel for Q4_K weights repacked 8 rows at a time (ggml's block_q4_Kx8) against
// 1-4 rows of Q8_K activations, in two variants: AVX-512 VNNI (vpdpbusd) where the compiler
// targets it, AVX2 elsewhere (Zen 3, Intel's client cores). Each weight block is loaded and
// unpacked once for all the rows: a verify pass over 2-4 tokens then costs about what one
// token's GEMV does. Written by pyspec from the block layout (applied to llama.cpp's sources
// at build time by pyspec install-llama); each row's integer sums are exact and its float
// steps are those of ggml's own (AVX2) GEMV, so a row's result does not depend on how many
// rows share the pass, nor on the variant.
#pragma once
#include <immintrin.h>
#include <stdint.h>
#include <string.h>


struct pyspec_q4kx8 { uint16_t d[8]; uint16_t dmin[8]; uint8_t scales[96]; uint8_t qs[1024]; };
struct pyspec_q8k { float d; int8_t qs[256]; int16_t bsums[16]; };

// One sub-block's 12 bytes of 6-bit scales and mins for the 8 rows -> 8 scales, 8 mins.
static inline void pyspec_q4kx8_scales(const uint8_t * q, uint8_t * sc, uint8_t * mn) {
    uint32_t u[3];
    memcpy(u, q, 12);
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    const uint32_t s0 = u[0] & m6;                                      // rows 0-3
    const uint32_t s1 = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);        // rows 4-7
    const uint32_t n0 = u[1] & m6;
    const uint32_t n1 = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);
    memcpy(sc, &s0, 4); memcpy(sc + 4, &s1, 4);
    memcpy(mn, &n0, 4); memcpy(mn + 4, &n1, 4);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// s[r * bs + c] = weight row c . activation row r, for c < nc (a multiple of 8) and r < NR.
// n: the row length (a multiple of 256); vy: NR rows of n / 256 Q8_K blocks, one after another.
template <int NR>
static void pyspec_q4kx8_gemv_rows(int n, float * s, size_t bs, const void * vx, const void * vy, int nc) {
    const int nb = n / 256;
    const pyspec_q8k * a = (const pyspec_q8k *) vy;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    // 4 sub-blocks of mins [sb][j] (int16 lane sb*8+j) -> lane ((q*8+j)*2+e) = mins[2q+e][j]
    int16_t pi[32];
    for (int q = 0; q < 2; q++) for (int j = 0; j < 8; j++) for (int e = 0; e < 2; e++)
        pi[(q * 8 + j) * 2 + e] = (int16_t) ((2 * q + e) * 8 + j);
    const __m512i pairidx = _mm512_loadu_si512(pi);
    // the int32 lanes (bsum[2q], bsum[2q+1]) -> lane (q mod 2)*8+j
    int32_t qi0[16], qi1[16];
    for (int q = 0; q < 2; q++) for (int j = 0; j < 8; j++) { qi0[q * 8 + j] = q; qi1[q * 8 + j] = q + 2; }
    const __m512i qidx0 = _mm512_loadu_si512(qi0), qidx1 = _mm512_loadu_si512(qi1);
    for (int x = 0; x < nc / 8; x++) {
        const pyspec_q4kx8 * b = (const pyspec_q4kx8 *) vx + (size_t) x * nb;
        __m256 acc[NR], accm[NR];
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) { acc[r] = _mm256_setzero_ps(); accm[r] = _mm256_setzero_ps(); }
        for (int l = 0; l < nb; l++) {
            const pyspec_q4kx8 * bl = b + l;
            const pyspec_q8k * al[NR];
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++) al[r] = a + (size_t) r * nb + l;
            uint8_t sc[8][8], mn[8][8];
            for (int sb = 0; sb < 8; sb++) pyspec_q4kx8_scales(bl->scales + 12 * sb, sc[sb], mn[sb]);
            __m512i isum[NR];
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++) isum[r] = _mm512_setzero_si512();
            #pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {  // sub-blocks 2p (low nibbles) and 2p+1 (high)
                __m512i lo[NR], hi[NR];
                #pragma GCC unroll 4
                for (int r = 0; r < NR; r++) { lo[r] = _mm512_setzero_si512(); hi[r] = _mm512_setzero_si512(); }
                #pragma GCC unroll 4
                for (int kk = 0; kk < 4; kk++) {
                    // 8 bytes of each of the 8 rows: low nibbles pair with activations
                    // p*64 + kk*8 + i, high nibbles with the same + 32
                    const __m512i w = _mm512_loadu_si512(bl->qs + (p * 4 + kk) * 64);
                    const __m512i wl = _mm512_and_si512(w, low4);
                    const __m512i wh = _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
                    #pragma GCC unroll 4
                    for (int r = 0; r < NR; r++) {
                        const int8_t * q = al[r]->qs + p * 64 + kk * 8;
                        int64_t ql, qh;
                        memcpy(&ql, q, 8);
                        memcpy(&qh, q + 32, 8);
                        lo[r] = _mm512_dpbusd_epi32(lo[r], wl, _mm512_set1_epi64(ql));
                        hi[r] = _mm512_dpbusd_epi32(hi[r], wh, _mm512_set1_epi64(qh));
                    }
                }
                const __m512i sl = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *) sc[2 * p]), dup));
                const __m512i sh = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *) sc[2 * p + 1]), dup));
                #pragma GCC unroll 4
                for (int r = 0; r < NR; r++)
                    isum[r] = _mm512_add_epi32(isum[r], _mm512_add_epi32(_mm512_mullo_epi32(lo[r], sl), _mm512_mullo_epi32(hi[r], sh)));
            }
            const __m512i mp0 = _mm512_permutexvar_epi16(pairidx, _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *) mn[0])));
            const __m512i mp1 = _mm512_permutexvar_epi16(pairidx, _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *) mn[4])));
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) bl->d));
            const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) bl->dmin));
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                // lanes 2j and 2j+1 hold row j's two halves
                const __m256i rows = _mm512_cvtepi64_epi32(_mm512_add_epi64(isum[r], _mm512_srli_epi64(isum[r], 32)));
                const __m256 ad = _mm256_set1_ps(al[r]->d);
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rows), _mm256_mul_ps(d, ad), acc[r]);
                // a sub-block's bsum is the sum of its two 16-quant bsums (|.| <= 4096: int16)
                const __m128i b0 = _mm_madd_epi16(_mm_loadu_si128((const __m128i *) al[r]->bsums), _mm_set1_epi16(1));
                const __m128i b1 = _mm_madd_epi16(_mm_loadu_si128((const __m128i *) (al[r]->bsums + 8)), _mm_set1_epi16(1));
                const __m512i bw = _mm512_castsi128_si512(_mm_packs_epi32(b0, b1));
                const __m512i prod = _mm512_add_epi32(_mm512_madd_epi16(mp0, _mm512_permutexvar_epi32(qidx0, bw)),
                                                      _mm512_madd_epi16(mp1, _mm512_permutexvar_epi32(qidx1, bw)));
                const __m256i mins = _mm256_add_epi32(_mm512_castsi512_si256(prod), _mm512_extracti64x4_epi64(prod, 1));
                accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dm, ad), accm[r]);
            }
        }
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) _mm256_storeu_ps(s + r * bs + x * 8, _mm256_sub_ps(acc[r], accm[r]));
    }
}

#else  // AVX2, FMA and F16C: the same sums in 256-bit vectors, vpmaddubsw and vpmaddwd for vpdpbusd

// Rows 4h..4h+3 of a block times NR activation rows: out[r] int32 lanes 2j, 2j + 1 hold row
// 4h + j's sums over its two 4-byte columns, each product already times its sub-block's scale.
// One half at a time, the sub-blocks in a loop: unrolled over both halves and all sub-blocks
// the compiler spilled the sums (2-4 rows at 0.9-1.1x ggml's GEMVs in cache, 1.3-1.45x now).
template <int NR>
static inline __attribute__((always_inline)) void pyspec_q4kx8_half_sums(
        const pyspec_q4kx8 * bl, const pyspec_q8k * const * al, const uint8_t (*sc)[8], const int h, __m256i * out) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    // 16-bit lane i of a half's scale vector takes the scale of row 4h + i / 4
    const __m128i spread = h == 0 ? _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
                                  : _mm_setr_epi8(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++) out[r] = _mm256_setzero_si256();
    #pragma GCC unroll 1
    for (int p = 0; p < 4; p++) {  // sub-blocks 2p (low nibbles) and 2p+1 (high)
        const __m256i sl = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *) sc[2 * p]), spread));
        const __m256i sh = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *) sc[2 * p + 1]), spread));
        #pragma GCC unroll 4
        for (int kk = 0; kk < 4; kk++) {
            // 8 bytes of each of 4 rows: low nibbles pair with activations p*64 + kk*8 + i,
            // high nibbles with the same + 32
            const __m256i w = _mm256_loadu_si256((const __m256i *) (bl->qs + (p * 4 + kk) * 64 + 32 * h));
            const __m256i wl = _mm256_and_si256(w, low4);
            const __m256i wh = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                const int8_t * q = al[r]->qs + p * 64 + kk * 8;
                int64_t ql, qh;
                memcpy(&ql, q, 8);
                memcpy(&qh, q + 32, 8);
                // (|pair of products| <= 2 * 15 * 128: no saturation in int16; a scale times
                // 4 products <= 63 * 7680: the int32 is exact)
                const __m256i lo = _mm256_madd_epi16(_mm256_maddubs_epi16(wl, _mm256_set1_epi64x(ql)), sl);
                const __m256i hi = _mm256_madd_epi16(_mm256_maddubs_epi16(wh, _mm256_set1_epi64x(qh)), sh);
                out[r] = _mm256_add_epi32(out[r], _mm256_add_epi32(lo, hi));
            }
        }
    }
}

// s[r * bs + c] = weight row c . activation row r, for c < nc (a multiple of 8) and r < NR.
// n: the row length (a multiple of 256); vy: NR rows of n / 256 Q8_K blocks, one after another.
template <int NR>
static void pyspec_q4kx8_gemv_rows(int n, float * s, size_t bs, const void * vx, const void * vy, int nc) {
    const int nb = n / 256;
    const pyspec_q8k * a = (const pyspec_q8k *) vy;
    for (int x = 0; x < nc / 8; x++) {
        const pyspec_q4kx8 * b = (const pyspec_q4kx8 *) vx + (size_t) x * nb;
        __m256 acc[NR], accm[NR];
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) { acc[r] = _mm256_setzero_ps(); accm[r] = _mm256_setzero_ps(); }
        for (int l = 0; l < nb; l++) {
            const pyspec_q4kx8 * bl = b + l;
            const pyspec_q8k * al[NR];
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++) al[r] = a + (size_t) r * nb + l;
            uint8_t sc[8][8], mn[8][8];
            for (int sb = 0; sb < 8; sb++) pyspec_q4kx8_scales(bl->scales + 12 * sb, sc[sb], mn[sb]);
            __m256i half[2][NR];  // int32 lanes 2j, 2j + 1: row 4h + j's two 4-byte columns
            pyspec_q4kx8_half_sums<NR>(bl, al, sc, 0, half[0]);
            pyspec_q4kx8_half_sums<NR>(bl, al, sc, 1, half[1]);
            // the mins of sub-blocks 2q, 2q + 1 in 16-bit lanes 2j, 2j + 1 (row j)
            __m256i mpair[4];
            for (int q = 0; q < 4; q++)
                mpair[q] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *) mn[2 * q]),
                                                                   _mm_loadl_epi64((const __m128i *) mn[2 * q + 1])));
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) bl->d));
            const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) bl->dmin));
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                // [r0 r1 r4 r5 | r2 r3 r6 r7] -> rows 0-7 in order
                const __m256i rows = _mm256_permute4x64_epi64(_mm256_hadd_epi32(half[0][r], half[1][r]), 0xD8);
                const __m256 ad = _mm256_set1_ps(al[r]->d);
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rows), _mm256_mul_ps(d, ad), acc[r]);
                // a sub-block's bsum is the sum of its two 16-quant bsums (|.| <= 4096: int16)
                const __m128i b0 = _mm_madd_epi16(_mm_loadu_si128((const __m128i *) al[r]->bsums), _mm_set1_epi16(1));
                const __m128i b1 = _mm_madd_epi16(_mm_loadu_si128((const __m128i *) (al[r]->bsums + 8)), _mm_set1_epi16(1));
                const __m256i bw = _mm256_castsi128_si256(_mm_packs_epi32(b0, b1));
                __m256i mins = _mm256_setzero_si256();
                for (int q = 0; q < 4; q++)
                    mins = _mm256_add_epi32(mins, _mm256_madd_epi16(mpair[q], _mm256_permutevar8x32_epi32(bw, _mm256_set1_epi32(q))));
                accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dm, ad), accm[r]);
            }
        }
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) _mm256_storeu_ps(s + r * bs + x * 8, _mm256_sub_ps(acc[r], accm[r]));
    }
}

#endif

// nr rows (any number) of activations, taken 4 at a time.
static inline void pyspec_q4kx8_gemv(int n, float * s, size_t bs, const void * vx, const void * vy, int nr, int nc) {
    const size_t row = (size_t) (n / 256) * sizeof(pyspec_q8k);
    for (int r0 = 0; r0 < nr; r0 += 4) {
        float * out = s + (size_t) r0 * bs;
        const char * in = (const char *) vy + r0 * row;
        switch (nr - r0 < 4 ? nr - r0 : 4) {
            case 1: pyspec_q4kx8_gemv_rows<1>(n, out, bs, vx, in, nc); break;
            case 2: pyspec_q4kx8_gemv_rows<2>(n, out, bs, vx, in, nc); break;
            case 3: pyspec_q4kx8_gemv_rows<3>(n, out, bs, vx, in, nc); break;
            default: pyspec_q4kx8_gemv_rows<4>(n, out, bs, vx, in, nc); break;
        }
    }
}
