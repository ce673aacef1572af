"""The certificate's residual statistics (solvers.glm.certificates), summed reassociated
(vectorised), against exactly rounded sums (math.fsum)."""

import math

import numpy as np
import pytest

from solvers.glm.certificates import residual_stats


@pytest.mark.parametrize("m", [0, 1, 3, 8, 13, 442, 4097])
def test_residual_stats_are_the_exactly_rounded_sums_to_rounding(m):
    """(||z - shift||^2, <z - shift, b>) at any length (remainders of every vector width),
    with terms of both signs and spread magnitudes: within a few ulps of m terms of fsum's."""
    rng = np.random.default_rng(m)
    z = rng.standard_normal(m) * np.exp(3 * rng.standard_normal(m))
    b = rng.standard_normal(m)
    shift = 0.37
    u = z - shift
    q, ub = residual_stats(z, shift, b)
    assert q == pytest.approx(math.fsum(u * u), rel=4 * m * 2.0**-52, abs=0.0)
    scale = math.fsum(np.abs(u * b))  # <u, b> cancels: its error is relative to sum |u_k b_k|
    assert abs(ub - math.fsum(u * b)) <= 4 * m * 2.0**-52 * scale
