"""The model registry: each model's coordinate update is the exact one-dimensional
minimiser of

    s (x - a) + L/2 (x - a)^2 + g(x)

over the domain of g (checked against scipy.optimize.minimize_scalar with g written
out here, on random inputs, including L = 0, the all-zero coordinate); its gap
is the generic formula with a numeric conjugate; the compiled kernels run the
same math; an unknown model or theta raises."""

import math
import zlib

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import xlogy

from solvers.glm import models
from solvers.glm.models import ElasticNetTheta, LogisticTheta, SVMTheta

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
SPEC = {  # theta, domain
    "lasso": (ElasticNetTheta(ALPHA, 0.0, B), (-B, B)),
    "enet": (ElasticNetTheta(0.6 * ALPHA, 0.4 * ALPHA, math.inf), (-BIG, BIG)),
    "ridge": (ElasticNetTheta(0.0, 2 * ALPHA, math.inf), (-BIG, BIG)),
    "hinge": (SVMTheta(C, 0.0), (0.0, C)),
    "sqhinge": (SVMTheta(C, 1.0), (0.0, BIG)),
    "logistic": (LogisticTheta(C), (0.0, C)),
}


def _draws(name, rng, n=60):
    lo, hi = SPEC[name][1]
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
    theta, (lo, hi) = SPEC[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for a, s, L in _draws(name, rng):
        def obj(x):
            return s * (x - a) + 0.5 * L * (x - a) ** 2 + _g(name, x)

        x = models.coord_update(theta, a, s, L)
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
    theta, (lo, hi) = SPEC[name]
    rng = np.random.default_rng(5)
    for a, s, _ in _draws(name, rng, n=30):
        gap = models.coord_gap(theta, a, s)
        # g*(-s) = sup_x -s x - g(x) over the domain
        neg = minimize_scalar(lambda x: s * x + _g(name, x), bounds=(lo, hi), method="bounded",
                              options=dict(xatol=1e-13, maxiter=5000))
        conj = -min(s * t + _g(name, t) for t in (neg.x, lo, hi))
        expected = a * s + _g(name, a) + conj
        assert gap >= -1e-12 * (1 + abs(expected))
        assert gap == pytest.approx(expected, rel=1e-7, abs=1e-8 * (1 + abs(a * s)))



def _logistic_extremes():
    """(C, a, s, L): a at and next to both bounds (a subnormal a too: its Newton step once
    overflowed to a zero step, and the update returned a), margins up to where sigmoid underflows."""
    for C in (0.7, 1e-3, 50.0):
        for a in (0.0, C, 0.5 * C, 1e-300, 1e-310, 1e-20 * C, C * (1 - 1e-12), 0.3 * C, 0.9 * C):
            for s in (0.0, 1e-3, -1.0, 30.0, -30.0, 300.0, -650.0):
                for L in (0.0, 1e-3, 1.0, 80.0, 1e4):
                    yield C, a, s, L


def test_logistic_update_keeps_the_relative_precision_of_the_smaller_side():
    """The minimiser x* solves log(x/(C-x)) + s + L (x - a) = 0: here found by Brent's method
    in the log-odds t (x = C expit(t), C - x = C expit(-t)), independently of the Newton
    iteration in x. The smaller of x* and C - x* (the one a near-bound optimum is all
    about: a_i ~ C exp(-margin)) must match to 1e-7 relative, in Python and compiled."""
    from numba import njit
    from scipy.optimize import brentq
    from scipy.special import expit

    compiled = njit(lambda theta, a, s, L: models.coord_update(theta, a, s, L))
    for C, a, s, L in _logistic_extremes():
        theta = LogisticTheta(C)

        def phi(t):
            return t + s + L * (C * expit(t) - a)

        lo, hi = -s - L * (C - a) - 1.0, -s + L * a + 1.0
        t = brentq(phi, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
        small = C * expit(-abs(t))
        for x in (models.coord_update(theta, a, s, L), compiled(theta, a, s, L)):
            assert 0.0 <= x <= C
            got = x if t < 0 else C - x
            if small < 1e-290:   # below the normal floats: the bound itself, or next to it
                assert got <= 1e-280, (C, a, s, L, x, t)
            elif t < 0 or small > 1e-12 * C:   # C - x keeps C's absolute precision only
                assert got == pytest.approx(small, rel=1e-7, abs=4e-16 * C), (C, a, s, L, x, t)



def test_logistic_gap_at_the_extremes_against_50_digit_arithmetic():
    """gap = a s + a log a + (C - a) log(C - a) - C log C + C log(1 + e^-s), evaluated in
    50-digit decimal arithmetic from the same float inputs, matches to 1e-9 relative (or
    1e-15 C absolute: a gap summed into P - D needs no more), in Python and compiled;
    including the near-optimal a = C sigmoid(-s), where the gap is a difference of O(C)
    terms that cancel, and margins past where the closed forms switch."""
    from decimal import Decimal, localcontext

    from numba import njit

    compiled = njit(lambda theta, a, s: models.coord_gap(theta, a, s))

    def exact(C, a, s):
        with localcontext() as ctx:
            ctx.prec = 50
            C_, a_, s_ = Decimal(C), Decimal(a), Decimal(s)

            def xlogx(x):
                return x * x.ln() if x > 0 else Decimal(0)
            total = a_ * s_ + xlogx(a_) + xlogx(C_ - a_) - xlogx(C_) + C_ * (1 + (-s_).exp()).ln()
            return float(total)

    for C, a, s, _ in _logistic_extremes():
        for a in (a, C / (1.0 + math.exp(min(s, 700.0))), C * (1 - 1e-9) / (1.0 + math.exp(min(s, 700.0)))):
            theta = LogisticTheta(C)
            want = exact(C, a, s)
            for gap in (models.coord_gap(theta, a, s), compiled(theta, a, s)):
                assert gap >= -1e-15 * C, (C, a, s, gap)
                assert gap == pytest.approx(want, rel=1e-9, abs=1e-15 * C), (C, a, s, gap, want)


@pytest.mark.parametrize("name", ["lasso", "enet", "ridge", "hinge", "sqhinge", "logistic"])
def test_compiled_kernels_run_the_current_scalar_math(name):
    """The Numba kernels (cache=True) agree with models.coord_gap / coord_update run as
    plain Python (the kernels' cache is keyed on models.py's digest, so an edit to the
    model math compiles anew; this would catch stale machine code)."""
    import scipy.sparse as sp

    import glm_oracles as go
    from solvers.kernels import cpu
    from solvers.glm.problems import make_problem

    X, y = go.make_data(go.kind_of(name), False, np.float64, seed=9)
    params = go.params_for(name, X, y)
    problem = make_problem(go.PROBLEM_NAME[name], X, y, **params)
    rng = np.random.default_rng(2)
    a = go.random_feasible(name, problem.n_coords, params, problem.P0, rng)
    z, off = problem.state_from(a)
    u = z - problem.c * off[0]
    A = problem.A.toarray() if sp.issparse(problem.A) else np.asarray(problem.A, np.float64)
    s = (A - problem.mu[:, None]) @ u
    expected = [models.coord_gap(problem.theta, a[i], s[i]) for i in range(problem.n_coords)]
    np.testing.assert_allclose(problem.coordinate_gaps(a, z, off), expected, rtol=1e-9,
                               atol=1e-12 * problem.P0)
    for i in rng.choice(problem.n_coords, 5, replace=False):
        a1, z1, off1 = a.copy(), z.copy(), off.copy()
        cpu.scd_epoch_dense(np.ascontiguousarray(A), np.arange(problem.n_coords),
                            np.array([i]), a1, z1, off1, problem.mu, problem.sqnorm,
                            problem.c, problem.theta)
        x = models.coord_update(problem.theta, a[i], s[i], problem.c * problem.sqnorm[i])
        assert a1[i] == pytest.approx(x, rel=1e-9, abs=1e-12)


def test_every_registered_model_has_an_entry_a_schema_and_a_config_file():
    """One entry per model: its named parameters (with the checks' rules), its
    estimator, and a conf/model/<name>.yaml; the theta type dispatches to its math. A
    classifier solved in the dual scores a peer's w by its dual_from_margin; one solved in the
    primal (features as coordinates) has a loss of the margins as its data term instead, and no
    config of its own: its family's config reaches it through the options (penalty, dual)."""
    from pathlib import Path

    from solvers.glm.checks import RULES
    from solvers.glm.models.sides import OPTION_ENTRIES, SIDES, resolve

    conf = Path(__file__).resolve().parents[3] / "conf" / "model"
    primal_classifiers = set()
    for name, model in models.MODELS.items():
        assert set(model.params) <= set(RULES), (name, set(model.params) - set(RULES))
        theta = model.theta({**model.params}, 1.0)
        assert models.math_of(theta) is model.math
        if model.classifier and not model.dual_form:
            primal_classifiers.add(name)
            assert model.math.loss is not None and model.dual_from_margin is None, name
            assert name in OPTION_ENTRIES and not (conf / f"{name}.yaml").exists(), name
            (family, loss, penalty), = [key for key, sides in SIDES.items() if sides.get(False) == name]
            assert (conf / f"{family}.yaml").exists(), (name, family)
            options = dict(penalty=penalty, dual=False, **({"loss": loss} if family == "svm" else {}),
                           **({"l1_ratio": 0.5} if penalty == "elasticnet" else {}))
            assert resolve(family, options, 10, 3)[0] == name
        else:
            assert (conf / f"{name}.yaml").exists(), name
            assert model.math.loss is None, name
            assert model.classifier == (model.dual_from_margin is not None), name
    # the five: logistic with an L1, elastic-net or L2 penalty, the squared hinge with L1 or L2
    assert primal_classifiers == {"logistic_l1", "logistic_elasticnet", "logistic_l2", "svm_l1", "svm_l2"}


def test_an_unknown_model_raises_in_python_and_in_compiled_code():
    from typing import NamedTuple

    from numba import njit
    from numba.core.errors import TypingError

    class Unregistered(NamedTuple):
        C: float

    with pytest.raises(ValueError, match="'model' parameter must be one of"):
        models.get_model("lasso_plus")
    with pytest.raises(TypeError, match="no model has kernel parameters of type Unregistered"):
        models.coord_update(Unregistered(1.0), 0.0, 0.0, 1.0)

    @njit
    def update(theta):
        return models.coord_update(theta, 0.0, 0.0, 1.0)

    with pytest.raises(TypingError, match="no model has kernel parameters"):
        update(Unregistered(1.0))


def test_kernels_cache_per_version_of_the_model_math():
    """Every cached kernel that inlines model math is named after a hash of every file
    under solvers/ (its cache files with it): an edit to the model math, or to what the
    compiled loops inline from other files (certificates, Anderson's step), compiles anew,
    and a renamed theta class never meets an index that pickled the old one."""
    import hashlib
    from pathlib import Path

    from solvers.duhl.loops import resident, swap
    from solvers.kernels import cpu

    root = Path(models.__file__).resolve().parents[2]
    assert (root / "duhl" / "accel" / "anderson.py").exists() and (root / "glm" / "certificates.py").exists()
    digest = hashlib.blake2b(digest_size=7)
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    code = digest.hexdigest()
    for kernel in (cpu.scd_epoch_dense, cpu.scd_epoch_sparse, cpu.gaps_dense, cpu.gaps_sparse, cpu.sum_g,
                   resident.run_resident_slice, swap.run_swap_slice):
        assert kernel.py_func.__qualname__.endswith(f"__{code}"), kernel
        module = kernel.py_func.__module__.rsplit(".", 1)[-1]
        assert kernel._cache._impl._filename_base.startswith(f"{module}.{kernel.py_func.__qualname__}")
