/*
 * test_rng.c - Philox4x32-10 against its known answers, and the keyed uniform draws.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* ==== 1. Philox known answers and the uniform ============================================= */

void test_philox_known_answers(void) {
    set_context("Philox4x32-10 known answers (Random123 kat_vectors)");
    static const struct {
        uint32_t counter[4], key[2], out[4];
    } kat[] = {
        { { 0u, 0u, 0u, 0u }, { 0u, 0u }, { 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u } },
        { { 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu },
          { 0xffffffffu, 0xffffffffu },
          { 0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu } },
        { { 0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u },
          { 0xa4093822u, 0x299f31d0u },
          { 0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u } },
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; ++i) {
        uint32_t out[4] = { 0, 0, 0, 0 };
        pyspec_philox4x32_10(kat[i].counter, kat[i].key, out);
        CHECK(memcmp(out, kat[i].out, sizeof out) == 0,
              "vector %zu: got %08x %08x %08x %08x, want %08x %08x %08x %08x", i, out[0], out[1],
              out[2], out[3], kat[i].out[0], kat[i].out[1], kat[i].out[2], kat[i].out[3]);
    }
    /* No status to return, so NULL must simply be survived. */
    uint32_t c[4] = { 0 }, k[2] = { 0 }, o[4];
    pyspec_philox4x32_10(NULL, k, o);
    pyspec_philox4x32_10(c, NULL, o);
    pyspec_philox4x32_10(c, k, NULL);
    CHECK(1, "NULL arguments to pyspec_philox4x32_10 did not crash");
}

void test_uniform(void) {
    set_context("pyspec_uniform");
    const int n = 20000;
    double sum = 0.0;
    int in_range = 1, deterministic = 1;
    for (int i = 0; i < n; ++i) {
        double u = pyspec_uniform(0xDEADBEEFull, i, PYSPEC_PURPOSE_SAMPLE);
        in_range &= u >= 0.0 && u < 1.0;
        deterministic &= u == pyspec_uniform(0xDEADBEEFull, i, PYSPEC_PURPOSE_SAMPLE);
        sum += u;
    }
    CHECK(in_range, "a draw fell outside [0, 1)");
    CHECK(deterministic, "the same (seed, position, purpose) gave two different draws");
    CHECK(fabs(sum / n - 0.5) < 0.01, "mean of %d draws is %g", n, sum / n);
    const int64_t extremes[] = { 0, 1, INT64_MAX, (int64_t)1 << 40 };
    for (size_t i = 0; i < sizeof extremes / sizeof extremes[0]; ++i) {
        double u = pyspec_uniform(UINT64_MAX, extremes[i], PYSPEC_PURPOSE_DRAFT);
        CHECK(u >= 0.0 && u < 1.0, "position %lld gave %g", (long long)extremes[i], u);
    }

    /* Each purpose is its own stream: the acceptance draw must never equal the residual or
     * the sample draw at the same position. */
    const int32_t purposes[] = { PYSPEC_PURPOSE_SAMPLE, PYSPEC_PURPOSE_ACCEPT,
                                 PYSPEC_PURPOSE_RESIDUAL, PYSPEC_PURPOSE_DRAFT };
    for (int a = 0; a < 4; ++a)
        for (int b = a + 1; b < 4; ++b)
            CHECK(pyspec_uniform(7, 100, purposes[a]) != pyspec_uniform(7, 100, purposes[b]),
                  "purposes %d and %d gave the same draw", purposes[a], purposes[b]);
    CHECK(pyspec_uniform(7, 100, 1) != pyspec_uniform(7, 101, 1), "positions 100 and 101 agree");
    CHECK(pyspec_uniform(7, 5, 1) != pyspec_uniform(7, 5 + ((int64_t)1 << 32), 1),
          "the high half of the position is ignored");
    CHECK(pyspec_uniform(7, 100, 1) != pyspec_uniform(8, 100, 1), "seeds 7 and 8 agree");
    CHECK(pyspec_uniform(7, 100, 1) != pyspec_uniform(7 + ((uint64_t)1 << 32), 100, 1),
          "the high half of the seed is ignored");
}
