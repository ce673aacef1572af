"""CoCoA+'s sigma': how much the parts' updates can add up, from the data.

Ma et al. 2015 (CoCoA+, eq. 11 and Lemma 4): aggregation a += gamma sum_k da_[k]
is safe with the local subproblems' parameter

    sigma' >= sigma'_min = gamma max_a ||P A^T a||^2 / sum_k ||P A_[k]^T a_[k]||^2,

and sigma'_min <= gamma K always (Cauchy-Schwarz), which is the safe choice that
needs no data (``sigma="safe"``). The ratio is 1 when the parts' images are
orthogonal and K when they coincide: it measures how correlated the parts'
columns are. :func:`sigma_ratio` returns the max (sigma'_min / gamma) exactly,
as the largest eigenvalue of the Gram matrix of orthonormal bases of the parts'
images (range of P A_[k]^T, P the centring when an intercept is fitted):

- coordinate side (n coordinates <= m): G = Ac Ac^T (n x n); each part's basis
  is W_k = V_k diag(lambda_k)^-1/2 from the eigenpairs of its block G_kk; the
  answer is lambda_max(W^T G W). Cost n^2 m (one Gram), then eigenproblems.
- sample side (m < n): each part's projector onto its image, P_k = U_k U_k^T
  from the eigenpairs of Ac_k^T Ac_k (m x m); the answer is lambda_max(sum P_k).
  Cost n m^2 (nnz-bound for sparse parts).

Directions a part spans with eigenvalue below ``RANK_RTOL`` times its largest are
round-off of the Gram and are left out (as a rank decision). Nothing here is
sampled or iterated: the value is exact up to round-off, and the caller adds a
small margin and clips to gamma K.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

RANK_RTOL = 1e-9  # eigenvalues of a part's Gram below this share of its largest: numerical null space
MARGIN = 1e-6  # relative margin above the computed ratio (round-off of the Gram products)


def _centred_gram_rows(A, mu, lo, hi, m):
    """Ac_[lo:hi] as a dense float64 array (rows = coordinates, centred by mu)."""
    block = A[lo:hi]
    block = block.toarray() if sp.issparse(block) else np.asarray(block, dtype=np.float64)
    block = block.astype(np.float64, copy=False)
    if np.any(mu[lo:hi]):
        block = block - mu[lo:hi, None]
    return block


def _top(matrix):
    return float(np.linalg.eigvalsh(matrix)[-1]) if matrix.shape[0] else 0.0


def _basis_weights(gram_block):
    """V diag(lambda)^-1/2 over the part's numerically non-null directions."""
    lam, V = np.linalg.eigh(gram_block)
    keep = lam > RANK_RTOL * max(float(lam[-1]), 0.0) if lam.size else lam > 0
    keep &= lam > 0
    return V[:, keep] / np.sqrt(lam[keep])


def gram(A, mu):
    """Ac Ac^T (n x n): the centred rows' Gram matrix, the same for every partition."""
    dense = _centred_gram_rows(A, mu, 0, A.shape[0], A.shape[1]) if not sp.issparse(A) or np.any(mu) else None
    if dense is None:
        return np.asarray((A @ A.T).toarray(), dtype=np.float64)
    from scipy.linalg.blas import dsyrk  # half a product's work (the upper triangle), then mirrored

    upper = dsyrk(1.0, dense.T, trans=1)  # dense.T of a C-ordered block is Fortran-ordered: no copy
    return np.triu(upper) + np.triu(upper, 1).T


def _coordinate_side(A, mu, ranges, m, cache=None):
    if cache is not None and "gram" in cache:
        G = cache["gram"]
    else:
        G = gram(A, mu)
        if cache is not None:
            cache["gram"] = G
    weights = [_basis_weights(G[lo:hi, lo:hi]) for lo, hi in ranges]
    cols = np.cumsum([0] + [w.shape[1] for w in weights])
    S = np.empty((cols[-1], cols[-1]))
    for k, ((lo_k, hi_k), W_k) in enumerate(zip(ranges, weights)):
        for j, ((lo_j, hi_j), W_j) in enumerate(zip(ranges, weights)):
            if j < k:
                continue
            block = W_k.T @ G[lo_k:hi_k, lo_j:hi_j] @ W_j
            S[cols[k]:cols[k + 1], cols[j]:cols[j + 1]] = block
            S[cols[j]:cols[j + 1], cols[k]:cols[k + 1]] = block.T
    return _top(S)


def _sample_side(A, mu, ranges, m):
    S = np.zeros((m, m))
    for lo, hi in ranges:
        block = A[lo:hi]
        if sp.issparse(block):
            H = np.asarray((block.T @ block).toarray(), dtype=np.float64)
            if np.any(mu[lo:hi]):  # Ac^T Ac = A^T A - s 1^T - 1 s^T + (mu.mu) 1 1^T, s = A^T mu
                s = np.asarray(block.T @ mu[lo:hi]).ravel()
                H = H - s[:, None] - s[None, :] + float(mu[lo:hi] @ mu[lo:hi])
        else:
            dense = _centred_gram_rows(A, mu, lo, hi, m)
            H = dense.T @ dense
        lam, U = np.linalg.eigh(H)
        keep = (lam > RANK_RTOL * max(float(lam[-1]), 0.0)) & (lam > 0) if lam.size else lam > 0
        U = U[:, keep]
        S += U @ U.T
    return _top(S)


def sigma_ratio(problem, ranges, cache=None) -> float:
    """max_a ||P A^T a||^2 / sum_k ||P A_[k]^T a_[k]||^2 over the parts ``ranges`` ([lo, hi)
    rows of ``problem.A``), in [1, K]; 1.0 for one part. ``cache`` (a dict kept by the caller
    for one problem) keeps the Gram matrix for the next partition."""
    ranges = [(int(lo), int(hi)) for lo, hi in ranges]
    if len(ranges) <= 1:
        return 1.0
    A, mu = problem.A, np.asarray(problem.mu, dtype=np.float64)
    n, m = A.shape
    value = _coordinate_side(A, mu, ranges, m, cache) if n <= m else _sample_side(A, mu, ranges, m)
    # (a part with no image adds nothing; all-zero data gives 0: any sigma' is safe, keep 1)
    return float(min(max(value * (1.0 + MARGIN), 1.0), len(ranges)))
