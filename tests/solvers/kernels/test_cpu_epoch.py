"""The CPU epoch's pieces against independent references: the sparse epoch kernel (which
prefetches the next rows of its random order) against a plain-Python loop of the exact
coordinate updates; the epochs' shuffle against the uniform distribution over permutations."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from solvers.glm import models
from solvers.glm.problems import make_problem
from solvers.kernels import cpu


@pytest.mark.parametrize("name", ["svm", "logistic"])
def test_sparse_epoch_matches_a_python_loop_over_a_random_order(name):
    rng = np.random.default_rng(3)
    X = sp.random(60, 25, density=0.3, format="csr", random_state=4)
    X = sp.csr_matrix(X.toarray() * (rng.random(60) > 0.1)[:, None])  # some empty samples too
    y = np.where(rng.random(60) > 0.5, 1.0, -1.0)
    problem = make_problem(name, X, y, C=0.5, fit_intercept=False)
    A = problem.A
    a = rng.uniform(0.0, 0.5, problem.n_coords)
    z, off = problem.state_from(a)
    z, off = np.asarray(z, np.float64).copy(), np.asarray(off, np.float64).copy()
    order = np.concatenate([rng.permutation(problem.n_coords), rng.choice(problem.n_coords, 7)])

    a_ref, z_ref = a.copy(), z.copy()
    dense = A.toarray()
    for i in order:  # u = z without intercept (mu = 0)
        x = models.coord_update(problem.theta, a_ref[i], dense[i] @ z_ref, problem.c * problem.sqnorm[i])
        z_ref += problem.c * (x - a_ref[i]) * dense[i]
        a_ref[i] = x

    done = cpu.scd_epoch_sparse(A.indptr, A.indices, A.data, np.arange(problem.n_coords), order, a, z, off,
                                problem.mu, problem.sqnorm, problem.c, problem.theta)
    assert done == order.shape[0]
    np.testing.assert_allclose(a, a_ref, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(z, z_ref, rtol=1e-9, atol=1e-12)


def test_shuffle_draws_every_permutation_equally_often():
    """6 permutations of 3 items, 12,000 shuffles: each count within 5 sigma of 2,000; and where
    one item of 10 lands, over 5,000 shuffles, within 5 sigma of 500 per position."""
    state = cpu.random_state(7)
    counts = dict.fromkeys(itertools.permutations(range(3)), 0)
    x = np.arange(3)
    for _ in range(12_000):
        cpu.shuffle(x, state)
        counts[tuple(x)] += 1
    sigma = np.sqrt(12_000 * (1 / 6) * (5 / 6))
    assert all(abs(c - 2_000) <= 5 * sigma for c in counts.values()), counts
    lands = np.zeros(10, int)
    y = np.arange(10)
    for _ in range(5_000):
        cpu.shuffle(y, state)
        lands[np.flatnonzero(y == 0)[0]] += 1
    assert np.sort(y).tolist() == list(range(10))
    assert np.all(np.abs(lands - 500) <= 5 * np.sqrt(5_000 * 0.1 * 0.9)), lands


def test_random_state_is_never_zero_and_seeds_differ():
    """0 is xorshift's fixed point (a stream of zeros: no shuffle at all)."""
    states = [int(cpu.random_state(seed)[0]) for seed in range(50)]
    assert 0 not in states and len(set(states)) == 50
    a, b = np.arange(100), np.arange(100)
    cpu.shuffle(a, cpu.random_state(1))
    cpu.shuffle(b, cpu.random_state(2))
    assert not np.array_equal(a, b)


def test_dense_row_stats_square_float32_in_float64():
    """Sums and squares of float32 rows in float64 (Numba's float() of a float32 stays float32:
    its squares rounded to float32, 3e-7 off on three values). Oracle: NumPy in float64."""
    import numpy as np

    from solvers.kernels.cpu import dense_row_stats

    A = np.random.default_rng(0).standard_normal((5, 300)).astype(np.float32)
    sums, sq = dense_row_stats(A)
    exact = A.astype(np.float64)
    np.testing.assert_allclose(sums, exact.sum(axis=1), rtol=1e-13)
    np.testing.assert_allclose(sq, (exact * exact).sum(axis=1), rtol=1e-13)
