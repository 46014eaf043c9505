"""Philox4x32-10 and the (seed, position, purpose) keying."""

import numpy as np
import pytest
from scipy import stats

import pyspec
from pyspec import Purpose

# Random123 known-answer vectors (kat_vectors, philox4x32 10 rounds).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_philox_known_answers(counter, key, expected):
    assert pyspec.philox4x32_10(counter, key) == expected


def test_uniform_is_a_pure_function_of_its_key():
    first = [pyspec.uniform(7, p, Purpose.ACCEPT) for p in range(100)]
    # Interleave other draws: nothing is consumed, so the same keys give the same numbers.
    for p in range(100):
        pyspec.uniform(7, p, Purpose.SAMPLE)
    assert [pyspec.uniform(7, p, Purpose.ACCEPT) for p in range(100)] == first


def test_purposes_seeds_and_positions_give_distinct_streams():
    draws = {
        (s, p, int(k)): pyspec.uniform(s, p, k)
        for s in (0, 1, 2**40)
        for p in (0, 1, 2**33)
        for k in Purpose
    }
    assert len(set(draws.values())) == len(draws)


def test_uniforms_are_uniform():
    u = np.array([pyspec.uniform(3, p, Purpose.SAMPLE) for p in range(20000)])
    assert u.min() >= 0.0 and u.max() < 1.0
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    # Neighbouring positions are not correlated.
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.03
