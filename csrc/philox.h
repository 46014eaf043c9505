/*
 * philox.h - Philox4x32-10 counter-based RNG (Salmon, Moraes, Dror, Shaw: "Parallel random
 * numbers: as easy as 1, 2, 3", SC 2011; the rounds cuRAND uses), and the mapping from
 * (seed, position, purpose) to a uniform. Compiles as C for the host and as CUDA for the
 * device, so both back ends draw identical numbers.
 */
#ifndef PYSPEC_PHILOX_H
#define PYSPEC_PHILOX_H

#include <stdint.h>

#include "hostdevice.h"

#define PYSPEC_PHILOX_M0 0xD2511F53u
#define PYSPEC_PHILOX_M1 0xCD9E8D57u
#define PYSPEC_PHILOX_W0 0x9E3779B9u
#define PYSPEC_PHILOX_W1 0xBB67AE85u

PYSPEC_HD void pyspec_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

/* Ten rounds; the key is bumped between rounds by the Weyl constants. */
PYSPEC_HD void pyspec_philox_block(const uint32_t ctr_in[4], const uint32_t key_in[2],
                                   uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int round = 0; round < 10; ++round) {
        uint32_t hi0, lo0, hi1, lo1;
        pyspec_mulhilo32(PYSPEC_PHILOX_M0, c0, &hi0, &lo0);
        pyspec_mulhilo32(PYSPEC_PHILOX_M1, c2, &hi1, &lo1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PYSPEC_PHILOX_W0;
        k1 += PYSPEC_PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* The uniform in [0, 1) with 53 random bits for one (seed, position, purpose, stream).
 * Counter = (position low, position high, purpose, stream), key = (seed low, seed high):
 * the draw depends on nothing else, so no call order, batch or thread count can change it.
 * The verifier always uses stream 0; a drafter that may draft the same position in several
 * rounds gives each round its own stream, so no round's draw is ever reused. */
PYSPEC_HD double pyspec_uniform_stream(uint64_t seed, int64_t position, int32_t purpose,
                                       uint32_t stream) {
    uint64_t pos = (uint64_t)position;
    uint32_t ctr[4] = { (uint32_t)pos, (uint32_t)(pos >> 32), (uint32_t)purpose, stream };
    uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    uint32_t out[4];
    pyspec_philox_block(ctr, key, out);
    uint64_t bits = ((uint64_t)(out[0] >> 5) << 26) | (uint64_t)(out[1] >> 6);
    return (double)bits * (1.0 / 9007199254740992.0); /* 2^-53 */
}

PYSPEC_HD double pyspec_uniform_keyed(uint64_t seed, int64_t position, int32_t purpose) {
    return pyspec_uniform_stream(seed, position, purpose, 0u);
}

#endif /* PYSPEC_PHILOX_H */
