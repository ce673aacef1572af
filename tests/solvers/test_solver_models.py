"""Each model's coordinate update is the exact one-dimensional minimiser of

    s (x - a) + L/2 (x - a)^2 + g(x)

over the domain of g; checked against scipy.optimize.minimize_scalar with g written
out here, on random inputs (including L = 0, the all-zero coordinate)."""

import math
import zlib

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import xlogy

from solvers import models

C = 0.7
ALPHA = 0.3
BIG = 1e4


def _g(name, x):
    if name == "lasso":
        return ALPHA * abs(x)
    if name == "enet":
        return 0.6 * ALPHA * abs(x) + 0.5 * 0.4 * ALPHA * x * x
    if name == "ridge":
        return ALPHA * x * x
    if name == "hinge":
        return -x
    if name == "sqhinge":
        return -x + x * x / (4 * C)
    return float(xlogy(x, x) + xlogy(C - x, C - x) - xlogy(C, C))


B = 5.0  # Lasso's bounded support |x| <= B
SPEC = {  # model code, (p0, p1, p2), domain
    "lasso": (models.ENET, (ALPHA, 0.0, B), (-B, B)),
    "enet": (models.ENET, (0.6 * ALPHA, 0.4 * ALPHA, math.inf), (-BIG, BIG)),
    "ridge": (models.ENET, (0.0, 2 * ALPHA, math.inf), (-BIG, BIG)),
    "hinge": (models.HINGE, (C, 0.0, 0.0), (0.0, C)),
    "sqhinge": (models.SQHINGE, (C, 0.0, 0.0), (0.0, BIG)),
    "logistic": (models.LOGISTIC, (C, 0.0, 0.0), (0.0, C)),
}


def _draws(name, rng, n=60):
    lo, hi = SPEC[name][2]
    for k in range(n):
        if name in ("hinge", "logistic"):
            a = rng.choice([lo, hi, rng.uniform(lo, hi)])
        elif name == "sqhinge":
            a = rng.choice([0.0, rng.exponential(C)])
        else:
            a = float(np.clip(rng.standard_normal() * rng.choice([0.1, 2.0]), lo, hi))
        s = rng.standard_normal() * rng.choice([0.1, 1.0, 5.0, 40.0])
        L = rng.choice([0.0, 1e-3, 0.5, 3.0, 80.0])
        if L == 0.0 and name in ("lasso",):
            # an all-zero (centred) coordinate has s = <A_i, u> = 0 exactly
            s = 0.0
        yield a, s, L


@pytest.mark.parametrize("name", list(SPEC))
def test_coord_update_is_the_exact_1d_minimiser(name):
    code, (p0, p1, p2), (lo, hi) = SPEC[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for a, s, L in _draws(name, rng):
        def obj(x):
            return s * (x - a) + 0.5 * L * (x - a) ** 2 + _g(name, x)

        x = models.coord_update(code, a, s, L, p0, p1, p2)
        assert lo <= x <= hi, (name, a, s, L, x)
        ref = minimize_scalar(obj, bounds=(lo, hi), method="bounded",
                              options=dict(xatol=1e-13, maxiter=5000))
        # Brent may stop a hair inside an active bound; the bounds are candidates too
        cands = [ref.x, lo, hi]
        best = min(cands, key=obj)
        f_best = obj(best)
        assert obj(x) <= f_best + 1e-11 * (1 + abs(f_best)), (name, a, s, L, x, best)
        # the objective is strictly convex here except for the hinge's linear piece
        # (L = 0), so the minimiser is unique and x must be it
        if not (name == "hinge" and L == 0.0):
            curv = L + {"enet": 0.4 * ALPHA, "ridge": 2 * ALPHA, "sqhinge": 0.5 / C,
                        "logistic": 4.0 / C}.get(name, 0.0)
            if curv > 0:
                # strong convexity: |x - x*| <= sqrt(2 (f(x) - f*) / curv) + Brent's tolerance
                slack = math.sqrt(2 * max(obj(x) - f_best, 0.0) / curv) + 1e-5 * (1 + abs(best))
                assert abs(x - best) <= slack + 1e-4 / math.sqrt(curv), (name, a, s, L, x, best)


@pytest.mark.parametrize("name", list(SPEC))
def test_coord_gap_matches_the_generic_formula_and_is_nonnegative(name):
    """gap = a s + g(a) + g*(-s) >= 0, with g* computed here by a numeric sup."""
    code, (p0, p1, p2), (lo, hi) = SPEC[name]
    rng = np.random.default_rng(5)
    for a, s, _ in _draws(name, rng, n=30):
        gap = models.coord_gap(code, a, s, p0, p1, p2)
        # g*(-s) = sup_x -s x - g(x) over the domain
        neg = minimize_scalar(lambda x: s * x + _g(name, x), bounds=(lo, hi), method="bounded",
                              options=dict(xatol=1e-13, maxiter=5000))
        conj = -min(s * t + _g(name, t) for t in (neg.x, lo, hi))
        expected = a * s + _g(name, a) + conj
        assert gap >= -1e-12 * (1 + abs(expected))
        assert gap == pytest.approx(expected, rel=1e-7, abs=1e-8 * (1 + abs(a * s)))


@pytest.mark.parametrize("name", ["lasso", "enet", "ridge", "hinge", "sqhinge", "logistic"])
def test_compiled_kernels_run_the_current_scalar_math(name):
    """The Numba kernels (cache=True) agree with models.coord_gap / coord_update run as
    plain Python. Numba's on-disk cache is keyed on the kernel's own file, not on the
    register_jitable functions it inlines from models.py, so an edit to models.py can
    leave stale compiled kernels behind (delete solvers/kernels/__pycache__); this
    catches it."""
    import scipy.sparse as sp

    import glm_oracles as go
    from solvers.kernels import cpu
    from solvers.problems import make_problem

    X, y = go.make_data(go.kind_of(name), False, np.float64, seed=9)
    params = go.params_for(name, X, y)
    problem = make_problem(go.PROBLEM_NAME[name], X, y, **params)
    rng = np.random.default_rng(2)
    a = go.random_feasible(name, problem.n_coords, params, problem.P0, rng)
    z, off = problem.state_from(a)
    u = z - problem.c * off[0]
    A = problem.A.toarray() if sp.issparse(problem.A) else np.asarray(problem.A, np.float64)
    s = (A - problem.mu[:, None]) @ u
    expected = [models.coord_gap(problem.model, a[i], s[i], *problem.params)
                for i in range(problem.n_coords)]
    np.testing.assert_allclose(problem.coordinate_gaps(a, z, off), expected, rtol=1e-9,
                               atol=1e-12 * problem.P0)
    for i in rng.choice(problem.n_coords, 5, replace=False):
        a1, z1, off1 = a.copy(), z.copy(), off.copy()
        cpu.scd_epoch_dense(np.ascontiguousarray(A), np.arange(problem.n_coords),
                            np.array([i]), a1, z1, off1, problem.mu, problem.sqnorm,
                            problem.c, problem.model, *problem.params)
        x = models.coord_update(problem.model, a[i], s[i], problem.c * problem.sqnorm[i],
                                *problem.params)
        assert a1[i] == pytest.approx(x, rel=1e-9, abs=1e-12)
