"""Disk -> RAM -> GPU: the RAM tier (solvers.storage.ram_tier) under a GPU block, on Numba's CUDA
simulator (device="cuda_sim"; test_gpu.py runs the same on a real GPU).

Oracles: np.load of the same file (the rows, X^T a), the problem in memory (its coordinate gaps),
scikit-learn's Lasso, Python's sorted() for the RAM set's order, the same DuHL run with the data in
RAM and the same GPU block (its iterates), the byte sizes of the arrays themselves.
"""

import numpy as np
import pytest
from sklearn.linear_model import Lasso as SkLasso

from solvers.duhl.block import resident as duhl_resident
from solvers.duhl.loops import python as python_loop
from solvers.storage.reader import write_coordinate_major
from solvers.storage.on_disk import OnDisk
from solvers.storage.ram_tier import RamTier, ram_choice
from solvers.duhl.solver import DuHL
from solvers.glm.problems import make_problem, make_problem_on_disk

pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaPerformanceWarning")
N, D = 64, 48


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((N, D))
    w = np.zeros(D)
    w[rng.choice(D, 6, replace=False)] = rng.standard_normal(6)
    y = X @ w + 0.1 * rng.standard_normal(N)
    path = tmp_path_factory.mktemp("ram_tier") / "X.npy"
    write_coordinate_major(path, D, N, (X[:, j:j + 32].T for j in range(0, D, 32)), fortran=True)
    return path, X, y


def alpha_of(X, y):
    return 0.05 * np.abs(X.T @ y).max() / len(y)


def test_ram_choice_is_the_block_then_the_largest_gaps():
    rng = np.random.default_rng(0)
    gaps = rng.integers(0, 5, 40).astype(float)  # many ties
    chosen = np.array([7, 3, 30])
    got = ram_choice(chosen, gaps, 12)
    rest = sorted((i for i in range(40) if i not in chosen), key=lambda i: (-gaps[i], i))[:9]
    assert got.tolist() == chosen.tolist() + rest
    assert ram_choice(chosen, gaps, 2).tolist() == [7, 3]


def test_ram_tier_reads_only_what_it_lacks_and_serves_rows_gaps_and_products(store):
    path, X, y = store
    tier = RamTier(OnDisk(path), 20)
    reads = []
    real = tier.disk.read_rows
    tier.disk.read_rows = lambda coords, out, rows: reads.append(list(coords)) or real(coords, out, rows)
    first = np.arange(0, 40, 2)
    assert tier.hold(first) == 20 and sorted(reads[0]) == first.tolist()
    second = np.concatenate([np.arange(20, 40, 2), np.arange(41, 48, 2), np.arange(1, 12, 2)])  # 10 kept, 10 new
    assert tier.hold(second) == 10 and sorted(reads[1]) == sorted(set(second) - set(first))
    assert sorted(tier.held().tolist()) == sorted(second.tolist())
    coords = np.array([45, 2, 20, 46])  # two in RAM, two on disk
    np.testing.assert_array_equal(tier.take(coords), X.T[coords])
    # gaps and s from RAM and disk equal the problem's in memory, bit for bit
    params = dict(alpha=alpha_of(X, y), fit_intercept=False)
    in_ram = make_problem("lasso", X, y, **params)
    a = np.where(np.arange(D) % 3 == 0, 0.1, 0.0)
    z, off = in_ram.state_from(a)
    on_disk = make_problem_on_disk("lasso", tier, y, **params)
    for c in (coords, np.arange(D)):
        got, want = on_disk.coordinate_gaps(a, z, off, c, with_s=True), in_ram.coordinate_gaps(a, z, off, c, with_s=True)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(tier.dot_t(a), X @ a, rtol=1e-13, atol=1e-13)


def test_gpu_under_a_ram_tier_reaches_scikit_learns_optimum(store, simulator, monkeypatch):
    path, X, y = store
    params = dict(alpha=alpha_of(X, y), fit_intercept=False)
    problem = make_problem_on_disk("lasso", OnDisk(path), y, **params)
    blocks = []
    real_assign = duhl_resident.DenseResidentSet.assign

    def assign(rset, coords):  # every GPU block is a subset of the RAM set at that moment
        blocks.append(set(coords.tolist()) <= set(rset.problem.A.held().tolist()))
        return real_assign(rset, coords)

    monkeypatch.setattr(duhl_resident.DenseResidentSet, "assign", assign)
    host = int(0.5 * X.nbytes)
    r = DuHL(host_budget=f"{host}B", memory_budget=0.2, device="cuda_sim", tol=1e-9,
             random_state=0).solve(problem)
    assert r.status == "converged" and r.n_rounds > 1
    assert blocks and all(blocks)
    sk = SkLasso(tol=1e-14, max_iter=100_000, **params).fit(X, y)
    np.testing.assert_allclose(r.a, sk.coef_, atol=1e-6)
    ref = make_problem("lasso", X, y, **params)
    P, D_, gap, _ = ref.certify(r.a, *ref.state_from(r.a))
    assert gap <= 1e-9 * ref.P0 * 1.01  # the certified gap, recomputed in memory
    assert r.trace["bytes_disk"].iloc[-1] >= X.nbytes  # one full pass at least (the first gaps)


def test_the_ram_tier_and_its_buffers_stay_within_host_budget(store, simulator, monkeypatch):
    path, X, y = store
    made = []
    real = RamTier.__init__
    monkeypatch.setattr(RamTier, "__init__", lambda self, *a: made.append(self) or real(self, *a))
    host = int(0.4 * X.nbytes)
    problem = make_problem_on_disk("lasso", OnDisk(path), y, alpha=alpha_of(X, y), fit_intercept=False)
    DuHL(host_budget=f"{host}B", device="cuda_sim", max_epochs=2, random_state=0).solve(problem)
    tier, = made
    assert tier.data.nbytes + tier.disk.buffer().nbytes <= host


def test_same_iterates_as_the_same_gpu_block_with_the_data_in_ram(store, simulator, monkeypatch):
    """With every gap refreshed each round the tiers only change where rows come from (the block
    ranked by the gaps in RAM too, as on disk, not by the reach gaps)."""
    monkeypatch.setattr(python_loop, "block_keys", lambda theta, gaps, *rest: gaps)
    path, X, y = store
    params = dict(alpha=alpha_of(X, y), fit_intercept=False)
    block = f"{int(0.2 * X.nbytes)}B"
    on_disk = make_problem_on_disk("lasso", OnDisk(path), y, **params)
    r_disk = DuHL(host_budget=0.5, memory_budget=block, device="cuda_sim", tol=1e-9, random_state=0,
                  refresh="all").solve(on_disk)
    r_ram = DuHL(memory_budget=block, device="cuda_sim", tol=1e-9, random_state=0, refresh="all",
                 local_epochs=1).solve(make_problem("lasso", X, y, **params))  # ("auto": 1 on disk, 2 in RAM)
    assert r_disk.n_rounds == r_ram.n_rounds > 1
    np.testing.assert_array_equal(r_disk.a, r_ram.a)


def test_a_gpu_block_larger_than_the_ram_tier_is_refused_by_name(store):
    path, X, y = store
    problem = make_problem_on_disk("lasso", OnDisk(path), y, alpha=alpha_of(X, y), fit_intercept=False)
    with pytest.raises(ValueError, match=r"'memory_budget' parameter of DuHL \(0.5 = .* RAM tier holds"):
        DuHL(host_budget=0.25, memory_budget=0.5, device="cuda_sim").solve(problem)
