"""The GPU code path (TPA-SCD and gap kernels, the CUDA backend) under Numba's CUDA simulator.

The simulator runs thread blocks one after another, so one TPA-SCD epoch in a
given coordinate order must equal the CPU kernel's epoch in that order (up to
the reduction's round-off). DuHL on device="cuda_sim" must reach the optimum
of an independent oracle. Problems are tiny: the simulator is ~1e5 times
slower than a GPU.
"""

import time

import numpy as np
import pytest
import scipy.sparse as sp

from solvers.duhl.block import devices, resident
from solvers.duhl.budget import split_budget
from solvers.duhl.solver import DuHL
from solvers.kernels import cpu
from solvers.glm.problems import make_problem

pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaPerformanceWarning")


@pytest.fixture(scope="module")
def cuda_kernels():
    try:
        devices._enable_simulator()
    except RuntimeError as err:  # numba.cuda was imported for a real GPU in this session
        pytest.skip(str(err))
    from solvers.kernels import cuda

    return cuda


def on_device(A):
    """A dense block as the GPU holds it: a device array (a Problem's A is a read-only view, and a host
    array passed to a kernel is copied back into after the launch)."""
    from numba import cuda

    return cuda.to_device(A)


def _tiny(model, sparse):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((14, 9)) + 0.3
    if sparse:
        X = sp.csr_matrix(np.where(rng.random(X.shape) < 0.5, X, 0.0))
    y = X @ rng.standard_normal(9) + 0.1 * rng.standard_normal(14)
    kwargs = {"lasso": dict(alpha=0.05), "elastic_net": dict(alpha=0.05, l1_ratio=0.5),
              "ridge": dict(alpha=1.0), "svm": dict(C=1.0, loss="hinge"),
              "logistic": dict(C=1.0)}[model]
    if model in ("svm", "logistic"):
        y = np.sign(y - np.median(y))
    return make_problem(model, X, y, **kwargs)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("model", ["lasso", "elastic_net", "ridge", "svm", "logistic"])
def test_tpa_epoch_equals_cpu_epoch_in_the_same_order(cuda_kernels, model, sparse):
    p = _tiny(model, sparse)
    n = p.n_coords
    order = np.random.default_rng(0).permutation(n)
    coords = np.arange(n)
    results = []
    for kernel in ("cpu", "cuda"):
        a = np.zeros(n)
        z, off = -p.c * p.b, np.zeros(1)
        for _ in range(3):
            if kernel == "cpu" and sparse:
                cpu.scd_epoch_sparse(p.A.indptr, p.A.indices, p.A.data, coords, order, a, z, off,
                                     p.mu, p.sqnorm, p.c, p.theta)
            elif kernel == "cpu":
                cpu.scd_epoch_dense(p.A, coords, order, a, z, off, p.mu, p.sqnorm, p.c, p.theta)
            elif sparse:
                cuda_kernels.tpa_scd_sparse[n, cuda_kernels.TPB](
                    p.A.indptr, p.A.indices, p.A.data, coords, order, a, z, off, p.mu, p.sqnorm,
                    p.c, p.theta)
            else:
                cuda_kernels.tpa_scd_dense[n, cuda_kernels.TPB](
                    on_device(p.A), coords, order, a, z, off, p.mu, p.sqnorm, p.c, p.theta)
        results.append((a, z, off))
    (a_cpu, z_cpu, off_cpu), (a_gpu, z_gpu, off_gpu) = results
    assert np.abs(a_cpu).max() > 0  # the epochs did something
    np.testing.assert_allclose(a_gpu, a_cpu, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(z_gpu, z_cpu, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(off_gpu, off_cpu, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_gap_kernel_equals_cpu_gaps(cuda_kernels, sparse):
    p = _tiny("svm", sparse)
    rng = np.random.default_rng(3)
    a = rng.uniform(0, p.params["C"], p.n_coords)
    z, off = p.state_from(a)
    rows = np.arange(p.n_coords)
    out, s = np.empty(p.n_coords), np.empty(p.n_coords)
    if sparse:
        cuda_kernels.gaps_sparse[p.n_coords, cuda_kernels.TPB](
            p.A.indptr, p.A.indices, p.A.data, rows, rows, a, z, off, p.mu, p.c, p.theta, out, s)
    else:
        cuda_kernels.gaps_dense[p.n_coords, cuda_kernels.TPB](
            on_device(p.A), rows, rows, a, z, off, p.mu, p.c, p.theta, out, s)
    # the oracle: the hinge gap formula of the DuHL paper, from w = sum a_i y_i x_i
    margins = np.asarray(p.A @ z).ravel()
    expected = p.params["C"] * np.maximum(0, 1 - margins) - a * (1 - margins)
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(s, margins, rtol=1e-10, atol=1e-12)


def test_cuda_without_a_gpu_says_so_in_one_line():
    p = _tiny("lasso", False)
    try:
        import cupy

        if cupy.cuda.is_available():
            pytest.skip("a GPU is present")
    except ImportError:
        pass
    with pytest.raises(devices.NoCudaDevice, match="no CUDA device found: use device=cpu or device=cuda_sim"):
        DuHL(device="cuda").solve(p)


def test_budget_above_free_gpu_memory_is_cut_with_a_warning(cuda_kernels, monkeypatch):
    p = _tiny("lasso", False)
    free = 3 * p.A.shape[1] * p.A.itemsize / 0.9  # room for three coordinates after the 10% margin
    monkeypatch.setattr(resident, "free_device_bytes", lambda device: free)
    with pytest.warns(RuntimeWarning, match=r"memory_budget of .* GB is more than fits on the GPU"):
        block = resident.make_resident_set(p, None, device="cuda_sim")
    assert block.capacity_bytes <= 0.9 * free
    assert block.data.shape[0] == 3


@pytest.mark.parametrize("selection", ["sequential", "gap"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_prefetch_on_cuda_sim_changes_no_iterate(cuda_kernels, sparse, selection):
    """The staging path (prefetch copies, then swaps served from staging rows) takes
    the same steps as plain swaps: thread blocks run one at a time in the simulator."""
    p = _tiny("lasso", sparse)
    budget = int(0.6 * p.coord_bytes.sum())
    share = 0.3
    kw = dict(selection=selection, tol=0.0, max_epochs=3, random_state=2, device="cuda_sim")
    staged = DuHL(memory_budget=f"{budget}B", prefetch=share, **kw).solve(p)
    block, staging = split_budget(p, budget, share)  # the block: what staging leaves
    assert staging > 0
    plain = DuHL(memory_budget=f"{block}B", prefetch=0.0, **kw).solve(p)
    np.testing.assert_array_equal(staged.a, plain.a)
    assert staged.n_rounds == plain.n_rounds > 2
    assert staged.prefetch_hits > 0 and plain.prefetch_hits == 0


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_a_thread_switch_in_a_shared_allocation_splits_no_block(cuda_kernels, sparse, monkeypatch):
    """A GIL switch between the simulator's lookup of a block's shared array and its
    insert (forced here, at every lookup) must not give a block's threads two arrays:
    the gap kernel's reduction still equals the CPU's gaps. Without the lock in
    solvers.kernels.cuda every thread sums its own uninitialised array."""
    from numba.cuda.simulator import kernelapi

    class SwitchingDict(dict):
        def get(self, key, default=None):
            found = super().get(key, default)
            time.sleep(1e-3)  # releases the GIL: the block's other threads run now
            return found

    init = kernelapi.FakeCUDAShared.__init__

    def switching_init(self, *args):
        init(self, *args)
        self._allocations = SwitchingDict()

    monkeypatch.setattr(kernelapi.FakeCUDAShared, "__init__", switching_init)
    p = _tiny("lasso", sparse)
    a = np.random.default_rng(5).standard_normal(p.n_coords)
    z, off = p.state_from(a)
    rows = np.arange(p.n_coords)
    expected, _ = p.coordinate_gaps(a, z, off, rows, with_s=True)
    dev = devices.make_device(p, "cuda_sim")
    if sparse:
        A = p.A
        out, _ = dev.gaps_sparse((A.indptr, A.indices, A.data), rows, rows, (a, z, off), p)
    else:
        out, _ = dev.gaps_dense(on_device(p.A), rows, rows, (a, z, off), p)
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("model", ["lasso", "svm", "logistic"])
def test_blas_gap_kernel_equals_cpu_gaps(cuda_kernels, model):
    """gap_kernel="blas" (a matrix-vector product, then a thread per coordinate) gives
    the CPU kernel's gaps, rows in any order, at a random feasible point."""
    p = _tiny(model, False)
    rng = np.random.default_rng(5)
    a = rng.uniform(0, 0.5, p.n_coords) if model != "lasso" else rng.standard_normal(p.n_coords)
    z, off = p.state_from(a)
    rows = rng.permutation(p.n_coords)
    expected, expected_s = np.empty(p.n_coords), np.empty(p.n_coords)
    cpu.gaps_dense(p.A, rows, rows, a, z, off, p.mu, p.c, p.theta, expected, expected_s)
    dev = devices.make_device(p, "cuda_sim", gap_kernel="blas")
    out, s = dev.gaps_dense(p.A, rows, rows, (a, z, off), p)
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(s, expected_s, rtol=1e-10, atol=1e-12)


def test_duhl_with_blas_gaps_certifies_every_row(cuda_kernels):
    import glm_oracles as go

    rng = np.random.default_rng(1)
    X = rng.standard_normal((14, 9)) + 0.3
    y = X @ rng.standard_normal(9) + 0.1 * rng.standard_normal(14)
    params = {"alpha": 0.05}
    p = make_problem("lasso", X, y, **params)
    res = DuHL(memory_budget=0.5, tol=0.0, max_epochs=4, random_state=0, device="cuda_sim",
               gap_kernel="blas", keep_iterates=100, refresh="all").solve(p)
    assert len(res.trace) > 2 and len(res.iterates) == len(res.trace) and res.trace.certified.all()
    # each row's gap (device gaps and s by cuBLAS + the host's) is P - (the best dual value
    # so far) of its state, P and D written out in glm_oracles from a alone
    best = -np.inf
    for a, gap in zip(res.iterates, res.trace.gap):
        P, D = go.best_dual("lasso", X, y, a, params)
        best = max(best, D)
        assert gap == pytest.approx(P - best, rel=1e-9, abs=1e-12 * p.P0)


def test_gap_kernel_is_validated():
    p = _tiny("lasso", True)
    with pytest.raises(ValueError, match="The 'gap_kernel' parameter of DuHL must be one of"):
        DuHL(gap_kernel="cublas")
    with pytest.raises(ValueError, match="The 'gap_kernel' parameter 'blas' of DuHL runs on device='cuda'"):
        DuHL(gap_kernel="blas")
    with pytest.raises(ValueError, match="The 'gap_kernel' parameter 'blas' of DuHL needs dense data"):
        DuHL(gap_kernel="blas", device="cuda_sim").solve(p)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_tpa_epoch_with_fewer_thread_blocks_than_coordinates(cuda_kernels, sparse):
    """With G thread blocks (concurrency), block b takes order[b], order[b + G], ...; the
    simulator runs blocks one after another, so the epoch is the CPU epoch in the order
    order[0::G], order[1::G], ..."""
    p = _tiny("logistic", sparse)
    n, grid = p.n_coords, 3
    order = np.random.default_rng(4).permutation(n)
    serial = np.concatenate([order[b::grid] for b in range(grid)])
    coords = np.arange(n)
    states = []
    for kernel in ("cpu", "cuda"):
        a, z, off = np.zeros(n), -p.c * p.b, np.zeros(1)
        args = (coords, serial if kernel == "cpu" else order, a, z, off, p.mu, p.sqnorm, p.c,
                p.theta)
        csr = (p.A.indptr, p.A.indices, p.A.data) if sparse else (p.A,)
        if kernel == "cpu":
            (cpu.scd_epoch_sparse if sparse else cpu.scd_epoch_dense)(*csr, *args)
        else:
            (cuda_kernels.tpa_scd_sparse if sparse else cuda_kernels.tpa_scd_dense)[
                grid, cuda_kernels.TPB](*(csr if sparse else (on_device(p.A),)), *args)
        states.append((a, z, off))
    (a_cpu, z_cpu, _), (a_gpu, z_gpu, _) = states
    assert np.abs(a_cpu).max() > 0
    np.testing.assert_allclose(a_gpu, a_cpu, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(z_gpu, z_cpu, rtol=1e-9, atol=1e-12)


def test_concurrency_caps_the_grid_and_is_validated():
    p = _tiny("lasso", False)
    dev = devices.make_device(p, "cuda_sim")
    assert [dev.epoch_grid(n) for n in (1, 3, 4, 9, 10000)] == [1, 1, 2, 3, 100]  # sqrt
    assert devices.make_device(p, "cuda_sim", concurrency=5).epoch_grid(9) == 5
    assert devices.make_device(p, "cuda_sim", concurrency=50).epoch_grid(9) == 9
    for bad in (0, -1, 2.5, "all", True):
        with pytest.raises(ValueError, match="The 'concurrency' parameter of DuHL must be 'auto' or an int >= 1"):
            DuHL(concurrency=bad)


def test_sparse_budget_counts_the_spare_buffer_against_free_gpu_memory(cuda_kernels, monkeypatch):
    p = _tiny("lasso", True)
    total = int(p.coord_bytes.sum())
    monkeypatch.setattr(resident, "free_device_bytes", lambda device: total / 0.9)  # all data fits once
    with pytest.warns(RuntimeWarning, match="twice the budget for sparse data"):
        block = resident.make_resident_set(p, None, device="cuda_sim")
    assert 2 * block.capacity_bytes <= total  # block and spare within the free memory
