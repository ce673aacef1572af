"""A sparse store on disk trained on a GPU's block (device="cuda_sim", Numba's CUDA simulator):
each swap reads the joined rows from the store into RAM, then the device keeps the block; the Lasso
on CSC columns reaches scikit-learn's optimum with part of the data resident, every row swapped in
copied to the device. The classifiers' CSR rows take the same block (their signs applied by the
store's reader, as on the CPU) and the simulator takes minutes over their hundreds of rounds:
test_gpu.py runs them, and the Lasso, on a real GPU."""

import numpy as np
import pytest
import scipy.sparse as sp

from solvers.duhl import DuHL
from solvers.glm.problems import make_problem_on_disk
from solvers.storage.sparse_on_disk import SparseOnDisk
from solvers.storage.sparse_store import write_sparse_store
from tests.solvers import glm_oracles as oracles

pytestmark = [pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaPerformanceWarning"),
              pytest.mark.usefixtures("simulator")]  # tests/solvers/conftest.py


def data(seed, n, d, density):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=rng)
    X.data = rng.standard_normal(X.data.size)
    w = np.zeros(d)
    w[:5] = 2 * rng.standard_normal(5)
    return X, X @ w + 0.05 * rng.standard_normal(n)


def test_lasso_from_csc_columns_on_a_gpu_block_reaches_scikit_learns_optimum(tmp_path):
    X, y = data(0, 2000, 100, 0.1)
    store = write_sparse_store(tmp_path, X.tocsc(), layout="csc")
    params = {"alpha": 0.05 * float(np.abs(X.T @ (y - y.mean())).max()) / X.shape[0]}
    problem = make_problem_on_disk("lasso", SparseOnDisk(store), y, **params)
    solver = DuHL(host_budget=0.3, tol=1e-9, random_state=0, max_epochs=5000, device="cuda_sim")
    res = solver.solve(problem)
    assert res.status == "converged" and res.trace.certified.iloc[-1] == 1
    assert res.trace.n_resident.max() < problem.n_coords and res.trace.swaps.iloc[-1] > res.trace.n_resident.max()
    assert res.bytes_h2d >= res.trace.swaps.iloc[-1] * problem.coord_bytes.min() and res.trace.bytes_disk.iloc[-1] > 0
    assert any("sparse store on the GPU" in note for note in res.notes)
    best = oracles.regression_oracle("lasso", X, y, params)
    P = oracles.primal("lasso", X, y, res.a, oracles.regression_intercept(X, y, res.a), params)
    assert P - best["P"] <= res.gap + 1e-10 * problem.P0
    assert best["P"] - P <= 1e-10 * problem.P0


def test_a_host_budget_whose_half_holds_no_coordinate_is_refused_by_name(tmp_path):
    """The GPU's block is half of what host_budget leaves (the rows read, and their pinned copy):
    a budget whose half is below one coordinate's data stops with one line naming host_budget."""
    X, y = data(0, 2000, 100, 0.1)
    store = write_sparse_store(tmp_path, X.tocsc(), layout="csc")
    problem = make_problem_on_disk("lasso", SparseOnDisk(store), y, alpha=0.1)
    reserved = 2 * 8192 + store.indptr.nbytes  # the two smallest read buffers and the column pointers
    largest = int(problem.coord_bytes.max())
    with pytest.raises(ValueError, match="'host_budget' parameter of DuHL .* leaves a GPU block of"):
        DuHL(host_budget=(reserved + largest + 16) / problem.coord_bytes.sum(), device="cuda_sim").solve(problem)
