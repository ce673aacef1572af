"""The sparse epoch kernel (which prefetches the next rows of its random order) against a
plain-Python loop of the exact coordinate updates: same iterates, same state."""

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
