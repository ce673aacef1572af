"""Compressors: unbiasedness and the omega bound, checked empirically; exact bit costs."""

import math

import numpy as np
import pytest

from solvers.distributed_glm.compression import (Compose, Identity, Natural, RandK, RandomDithering, TopK, index_bits,
                                 make_compressor)

UNBIASED = [Identity(), RandK(3), RandomDithering(1, 2), RandomDithering(2, "inf"),
            RandomDithering(1, 2, bucket_size=4), Natural(), Compose(RandK(4), RandomDithering(2, 2))]


@pytest.mark.parametrize("comp", UNBIASED, ids=repr)
def test_unbiased_and_omega_bound(comp):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(12) * np.linspace(0.1, 3, 12)
    draws = 4000
    qs = np.array([comp.compress(x, rng)[0] for _ in range(draws)])
    mean = qs.mean(axis=0)
    var = float(((qs - x) ** 2).sum(axis=1).mean())
    # unbiased: the mean is within 5 standard errors of x, coordinate-wise
    se = qs.std(axis=0) / math.sqrt(draws) + 1e-12
    assert np.all(np.abs(mean - x) <= 5 * se + 1e-12)
    assert var <= comp.omega(x.shape[0]) * float(x @ x) * 1.1 + 1e-12


def test_top_k_is_a_contraction_and_biased():
    x = np.array([3.0, -1.0, 0.5, 2.0])
    q, bits = TopK(2).compress(x, np.random.default_rng(0))
    np.testing.assert_array_equal(q, [3.0, 0.0, 0.0, 2.0])
    assert ((q - x) ** 2).sum() <= (1 - 2 / 4) * (x @ x)
    assert bits == 2 * (32 + 2) and not TopK(2).unbiased


def test_bit_costs():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(100)
    assert Identity().compress(x, rng)[1] == 3200
    assert RandK(10).compress(x, rng)[1] == 10 * (32 + 7)
    assert Natural().compress(x, rng)[1] == 900
    q, bits = RandomDithering(3, 2, bucket_size=25).compress(x, rng)
    assert bits == 4 * 32 + 100 * index_bits(4) + np.count_nonzero(q)
    comp = make_compressor({"name": "compose", "sparsifier": {"name": "rand_k", "k": 10},
                            "inner": {"name": "dither", "s": 1}})
    q, bits = comp.compress(x, rng)
    assert np.count_nonzero(q) <= 10 and bits == 10 * 7 + 32 + 10 * 1 + np.count_nonzero(q)


def test_bad_settings_name_the_parameter():
    with pytest.raises(ValueError, match="'k' parameter of RandK"):
        RandK(0)
    with pytest.raises(ValueError, match="'p' parameter"):
        RandomDithering(1, p=3)
    with pytest.raises(ValueError, match="compressor"):
        make_compressor("nope")
