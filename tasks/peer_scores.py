"""A peer's point scored by OUR objective code (tasks/peers.py's arms), and the data as a
scikit-learn style peer takes it. See tasks/peers.py for the certificate of each family."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def flip_signs(n, seed=0):
    """The random sign t_i of each sample a peer sees its row and label multiplied by (the losses depend
    on y_i <w, x_i> only: the same objective, and both classes in the labels)."""
    return np.where(np.random.default_rng(seed).random(n) < 0.5, -1.0, 1.0)


def peer_data(problem, seed=0):
    """(X, y) with the Problem's objective, as a scikit-learn style peer takes them: a regression's
    X = A^T and y = b; a classifier's signed samples y_k x_k (A's rows in the dual, A^T's in the
    primal), each with its sign flipped at random, t_k y_k x_k, and labels t_k (the losses depend
    only on y_k <w, x_k>). In the primal X keeps A's layout (CSC / Fortran: what CD solvers want)."""
    if not problem.dual_form and not problem.loss:
        return problem.A.T, problem.b          # Fortran view / CSC: what CD solvers want
    n = problem.n_samples if problem.loss else problem.n_coords
    t = flip_signs(n, seed)
    if problem.loss:  # the features' rows signed by the labels: t_k times A^T's row k
        if problem.sparse:
            return sp.csc_matrix(sp.diags(t) @ problem.A.T, dtype=np.float64), t
        return np.asfortranarray(np.asarray(problem.A, dtype=np.float64).T * t[:, None]), t
    if problem.sparse:
        X = sp.diags(t) @ problem.A
        return sp.csr_matrix(X, dtype=np.float64), t
    return np.asarray(problem.A, dtype=np.float64) * t[:, None], t


def is_hinge(problem):
    return problem.name == "svm" and problem.params["loss"] == "hinge"


def dual_point(problem, w, margins=None):
    """A feasible dual point a (one per sample) built from the primal w by the KKT conditions
    (the model's ``dual_from_margin``); the hinge's margin points, where those conditions
    allow any a_i in [0, C], by a box-constrained least squares fit of w = A^T a."""
    m = np.asarray(problem.A @ w, dtype=np.float64) if margins is None else margins
    a = problem.model.dual_from_margin(problem.theta, m)
    if not is_hinge(problem):
        return a
    C = problem.params["C"]
    free = np.flatnonzero(np.abs(m - 1.0) <= 1e-3)
    if 0 < free.size <= 20000:
        from scipy.optimize import lsq_linear

        fixed = a.copy()
        fixed[free] = 0.0
        target = np.asarray(w - problem.A.T @ fixed, dtype=np.float64)
        AS = problem.A[free].T
        AS = sp.csr_matrix(AS) if problem.sparse else np.asarray(AS, dtype=np.float64)
        fit = lsq_linear(AS, target, bounds=(0.0, C), lsmr_tol="auto", max_iter=200)
        a[free] = fit.x
    return a


def evaluate(problem, w):
    """(primal, dual, gap) of the peer's coefficients, by our objective code: for the
    regressions the certificate our solvers stop on (the state's own smallest valid gap,
    solvers.glm.certificates; no history of other states). A classifier's problem may be on
    disk (its samples read a chunk at a time)."""
    w = np.asarray(w, dtype=np.float64).ravel()
    if not problem.dual_form:
        z, off = problem.state_from(w)
        return problem.certify(w, z, off)[:3]
    off = np.zeros(1)
    zeros = np.zeros(problem.n_coords)
    if problem.on_disk:  # three passes: the margins (s_i = <A_i, w>: the gap pass's), A^T a, the gaps
        gaps0, margins = problem.coordinate_gaps(zeros, w, off, with_s=True)
        primal = 0.5 * float(w @ w) + float(gaps0.sum())
        a = dual_point(problem, w, margins)
        Aa = problem.A.dot_t(a)
        gap = float(problem.coordinate_gaps(a, w, off).sum()) + 0.5 * float((w - Aa) @ (w - Aa))
        return primal, primal - gap, gap
    primal = 0.5 * float(w @ w) + float(problem.coordinate_gaps(zeros, w, off).sum())
    a = dual_point(problem, w)
    Aa = np.asarray(problem.A.T @ a, dtype=np.float64)
    gap = float(problem.coordinate_gaps(a, w, off).sum()) + 0.5 * float((w - Aa) @ (w - Aa))
    return primal, primal - gap, gap
