"""DuHL with the dual models' data on disk (hinge and squared hinge LinearSVC, logistic
regression; a coordinate is a sample y_i x_i): the plain X in C order on disk, the labels'
signs applied as rows are read, the RAM block as the resident set.

Oracles: the same DuHL run with the signed rows in RAM and the same block (its iterates,
bitwise); liblinear / scipy (tests.solvers.glm_oracles) for the optimum; the primal and dual
objectives written out from the textbook (glm_oracles.gap_from_coordinates) for every
certified gap; /proc/self/io for the bytes read; mincore(2) for the page cache; the arrays'
byte sizes.
"""

import time
import tracemalloc

import numpy as np
import pytest

from solvers.duhl import solver as duhl_solver
from solvers.storage.reader import DiskMatrix, aligned_empty, write_coordinate_major
from solvers.storage.on_disk import OnDisk
from solvers.duhl.solver import DuHL
from solvers.glm.problems import make_problem, make_problem_on_disk
from tests.solvers import glm_oracles as oracles
from tests.solvers.storage.test_reader import drop_cache, os_read_bytes, resident_bytes

N, D = 300, 128  # a row of 1024 bytes: O_DIRECT reads straight into the rows, no padding
C = 0.05
# glm_oracles' model names -> make_problem's name and parameters
MODELS = {"hinge": ("svm", {"loss": "hinge"}), "sqhinge": ("svm", {"loss": "squared_hinge"}),
          "logistic": ("logistic", {})}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """X (N x D) in a C-order .npy written a block of rows at a time; labels {0, 1} from a
    noisy linear rule (the class 1 becomes +1)."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((N, D))
    y = (X @ rng.standard_normal(D) + 4.0 * rng.standard_normal(N) > 0).astype(np.float64)
    path = tmp_path_factory.mktemp("dual") / "X.npy"
    write_coordinate_major(path, N, D, (X[i:i + 64] for i in range(0, N, 64)))
    np.testing.assert_array_equal(np.load(path), X)
    return path, X, y


def problems(store, model, **extra):
    path, X, y = store
    name, params = MODELS[model]
    params = {**params, "C": C, "fit_intercept": False, **extra}
    return make_problem_on_disk(name, OnDisk(path), y, **params), make_problem(name, X, y, **params), params


@pytest.mark.parametrize("scale_kind", ["signs", "factors"])
@pytest.mark.parametrize("aligned", [True, False])
def test_reads_deliver_each_coordinate_times_its_factor(tmp_path, aligned, scale_kind):
    """Straight O_DIRECT reads, the bounce buffer (np.save's header), runs and single rows,
    requests cut inside a row: every read equals X[coords] * scale[coords]."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((200, 700))
    path = tmp_path / "X.npy"
    if aligned:
        write_coordinate_major(path, 200, 700, [X])
    else:
        np.save(path, X)
    scale = rng.choice([-1.0, 1.0], 200) if scale_kind == "signs" else rng.uniform(-3, 3, 200)
    for max_request in (4096, 1 << 20):
        m = DiskMatrix(path, scale=scale, max_request=max_request)
        coords = np.concatenate([np.arange(10, 40), rng.permutation(200)[:50]])
        coords = np.unique(coords)[rng.permutation(np.unique(coords).size)]
        out, rows = aligned_empty((coords.size + 7, 700)), rng.permutation(coords.size + 7)[:coords.size]
        m.read_into(coords, out, rows)
        np.testing.assert_array_equal(out[rows], X[coords] * scale[coords, None])
        m.prefetch(np.arange(200), out2 := aligned_empty((200, 700))).result()
        np.testing.assert_array_equal(out2, X * scale[:, None])
        m.close()


def test_a_scaled_read_makes_no_copy_of_the_block(tmp_path):
    """Rows read into a block and multiplied by their factors (the labels' signs) in place: the
    temporaries (tracemalloc's peak) are the reader's bookkeeping, a few hundred bytes a row,
    never a copy of rows (a row here is 4 KB; a copy would sit outside the host budget); the
    rows equal X's times the factors."""
    rng = np.random.default_rng(4)
    X = rng.standard_normal((4000, 512))  # 16 MB
    path = tmp_path / "X.npy"
    write_coordinate_major(path, *X.shape, [X])
    signs = rng.choice([-1.0, 1.0], X.shape[0])
    A = OnDisk(path, scale=signs)
    out = aligned_empty(X.shape)
    coords, rows = rng.permutation(X.shape[0]), rng.permutation(X.shape[0])
    tracemalloc.start()
    A.read_rows(coords, out, rows)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_array_equal(out[rows], X[coords] * signs[coords, None])
    assert peak < 1024 * X.shape[0], peak  # a quarter of a row's bytes, per row


@pytest.mark.parametrize("model", list(MODELS))
def test_same_iterates_as_the_same_block_in_ram(store, model):
    """With every gap refreshed each round the disk tier changes only where the block's rows
    come from: every iterate and every row of the trace equal, bitwise, those of DuHL with the
    signed rows in RAM and the same block budget."""
    path, X, y = store
    on_disk, in_ram, _ = problems(store, model)
    r_disk = DuHL(host_budget=0.3, tol=1e-7, random_state=0, refresh="all", keep_iterates=10_000).solve(on_disk)
    block = int(0.3 * X.nbytes) - on_disk.A.buffer_bytes  # the read buffer's share of the host budget
    r_ram = DuHL(memory_budget=f"{block}B", prefetch=0.2, tol=1e-7, random_state=0, refresh="all",
                 keep_iterates=10_000, local_epochs=1).solve(in_ram)  # ("auto": 1 on disk, 2 in RAM)
    assert r_disk.status == r_ram.status == "converged"
    assert r_disk.n_rounds == r_ram.n_rounds > 3
    np.testing.assert_array_equal(r_disk.a, r_ram.a)
    np.testing.assert_array_equal(r_disk.iterates, r_ram.iterates)
    for column in ("primal", "dual", "gap", "certified", "epoch", "swaps"):
        np.testing.assert_array_equal(r_disk.trace[column], r_ram.trace[column], err_msg=column)


@pytest.mark.parametrize("model", list(MODELS))
def test_reaches_the_oracles_optimum_and_every_certified_gap_is_exact(store, model):
    """host_budget a quarter of the data, refresh "auto": the run ends converged on a certified
    row; w(a) is liblinear's / scipy's optimum; every certified row's primal and dual equal the
    objectives computed here at that row's iterate (rows between certificates are estimates)."""
    path, X, y = store
    on_disk, _, params = problems(store, model)
    r = DuHL(host_budget=0.25, tol=1e-9, random_state=0, keep_iterates=100_000).solve(on_disk)
    assert r.status == "converged"
    trace = r.trace
    assert trace["certified"].iloc[-1] == 1 and trace["rel_gap"].iloc[-1] <= 1e-9
    assert len(r.iterates) == len(trace)
    certified = np.flatnonzero(trace["certified"].to_numpy() == 1)
    assert certified.size >= 2 and (trace["certified"] == 0).any()  # estimates in between
    for k in certified:
        P, Dv = oracles.gap_from_coordinates(model, X, y, r.iterates[k], params, None)
        scale = max(1.0, abs(P))
        assert abs(trace["primal"].iloc[k] - P) <= 1e-10 * scale, k
        assert abs(trace["dual"].iloc[k] - Dv) <= 1e-10 * scale, k
        assert abs(trace["gap"].iloc[k] - (P - Dv)) <= 1e-10 * scale, k
    best = oracles.classification_oracle(model, X, y, params, scaling=None)
    w = X.T @ (r.a * oracles.signs(y))
    P_ours = oracles.primal(model, X, y, w, 0.0, params, None)
    assert P_ours <= best["P"] + 1e-8 * on_disk.P0
    np.testing.assert_allclose(w, best["coef"], atol=1e-4 * max(1.0, np.abs(best["coef"]).max()))


@pytest.mark.parametrize("model", list(MODELS))
def test_bytes_are_counted_as_the_os_counts_them_and_the_ram_budget_holds(store, model, monkeypatch):
    path, X, y = store
    made = []
    real = duhl_solver.make_resident_set
    monkeypatch.setattr(duhl_solver, "make_resident_set", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    budget = int(0.25 * X.nbytes)
    # the kernels loaded first: under memory pressure their cache files are real reads too
    DuHL(host_budget=f"{budget}B", max_epochs=1, random_state=0).solve(problems(store, model)[0])
    made.clear()
    drop_cache(path)
    on_disk, _, _ = problems(store, model)
    assert on_disk.A.bytes_read == X.nbytes  # the row norms: one pass, exactly the matrix (aligned rows)
    before, counted = os_read_bytes(), on_disk.A.bytes_read
    r = DuHL(host_budget=f"{budget}B", tol=1e-8, random_state=0).solve(on_disk)
    read = os_read_bytes() - before
    assert r.status == "converged" and len(made) == 1
    # O_DIRECT: what the reader asked is what the disk read; the process's other reads (code pages
    # paged back in under memory pressure) may add a few KB
    assert 0 <= read - (on_disk.A.bytes_read - counted) <= 64 << 10 and read > X.nbytes
    assert r.trace["bytes_disk"].iloc[-1] == on_disk.A.bytes_read  # a read-ahead left at the end included
    assert np.all(np.diff(r.trace["bytes_disk"].to_numpy()) >= 0)
    held = made[0].data.nbytes + on_disk.A.buffer().nbytes  # block (and its prefetch rows) + read buffer
    assert held <= budget, (made[0].data.nbytes, on_disk.A.buffer().nbytes, budget)
    assert resident_bytes(path) == 0  # nothing left in the page cache


@pytest.mark.parametrize("model", ["hinge", "logistic"])
def test_a_solve_returns_with_no_read_in_flight(store, model, monkeypatch):
    """Reads slowed down so that the last round's read-ahead is still running when the loop ends:
    the solve waits for it, so nothing is read (or counted) after it returns, and the trace's last
    row counts it."""
    real = DiskMatrix._read
    monkeypatch.setattr(DiskMatrix, "_read", lambda self, q: time.sleep(0.002) or real(self, q))
    on_disk, _, _ = problems(store, model)
    r = DuHL(host_budget=0.25, tol=1e-3, random_state=0).solve(on_disk)
    assert r.status == "converged" and r.trace["bytes_prefetched"].iloc[-1] > 0  # reads ahead happened
    counted = on_disk.A.bytes_read
    time.sleep(0.2)  # a read left running would land in here
    assert on_disk.A.bytes_read == counted and on_disk.A.matrix._in_flight == 0
    assert r.trace["bytes_disk"].iloc[-1] == counted  # the trace's last row counts that read-ahead too


def test_logistic_has_no_zero_gap_proof_and_still_certifies(store):
    """Logistic's gaps are never exactly 0, so every gap outside the block stays stale: the
    refresh reads them as the disk allows and a certificate reads all of them; the run ends on
    a certified row at the target, and no certificate came from memory alone (each one read
    every coordinate outside the block)."""
    on_disk, _, _ = problems(store, "logistic")
    assert on_disk.model.zero_gap is None
    r = DuHL(host_budget=0.25, tol=1e-10, random_state=0).solve(on_disk)
    assert r.status == "converged" and r.trace["certified"].iloc[-1] == 1
    assert r.trace["rel_gap"].iloc[-1] <= 1e-10
    reads = np.diff(r.trace["bytes_disk"].to_numpy())[np.flatnonzero(r.trace["certified"].to_numpy()[1:] == 1)]
    assert reads.min() >= 0.7 * on_disk.A.nbytes  # the 75% outside the block, at least


def test_a_budget_that_holds_the_data_reads_it_once(store):
    on_disk, in_ram, _ = problems(store, "hinge")
    read = on_disk.A.bytes_read
    r = DuHL(host_budget="1GB", tol=1e-8, random_state=0).solve(on_disk)
    assert r.status == "converged" and any("read into RAM once" in note for note in r.notes)
    assert on_disk.A.bytes_read - read == on_disk.A.nbytes
    r_ram = DuHL(tol=1e-8, random_state=0).solve(in_ram)
    np.testing.assert_array_equal(r.a, r_ram.a)  # the signed rows loaded equal the signed rows built in RAM


@pytest.mark.parametrize("model", ["hinge", "logistic"])
def test_certify_end_false_returns_the_same_state_without_reading_for_its_certificate(store, model):
    """A solve stopped by max_epochs certifies its end state by reading every gap it has not
    computed; certify_end=False skips that read and nothing else: the same iterates and rows up
    to the last certified one, fewer bytes by at least the rows outside the block, NaN for the
    unread certificate. The skipped certificate, computed here, is the other run's last row."""
    path, X, y = store
    (on_disk, _, params), (other, _, _) = problems(store, model), problems(store, model)
    settings = dict(host_budget=0.25, tol=0.0, max_epochs=1.5, random_state=0, refresh=0.0)
    ended = DuHL(**settings).solve(on_disk)
    left = DuHL(**settings, certify_end=False).solve(other)
    assert ended.status == left.status == "max_epochs"
    np.testing.assert_array_equal(left.a, ended.a)
    rows = len(left.trace)
    assert rows == len(ended.trace) - 1 and ended.trace["certified"].iloc[-1] == 1
    for column in ("primal", "dual", "gap", "certified", "epoch", "swaps"):
        np.testing.assert_array_equal(left.trace[column], ended.trace[column].iloc[:rows], err_msg=column)
    assert np.isnan(left.primal) and np.isnan(left.dual) and np.isnan(left.gap) and np.isnan(left.rel_gap)
    assert ended.gap == ended.trace["gap"].iloc[-1]
    P, Dv = oracles.gap_from_coordinates(model, X, y, left.a, params, None)
    assert abs(ended.gap - (P - Dv)) <= 1e-10 * max(1.0, abs(P))
    block_bytes = int(0.25 * X.nbytes)  # the host budget: the block and the read buffer together
    assert on_disk.A.bytes_read - other.A.bytes_read >= X.nbytes - block_bytes


def test_unsupported_settings_are_named(store, tmp_path):
    path, X, y = store
    with pytest.raises(ValueError, match=r"The 'fit_intercept' parameter of LinearSVC must be False with the data "
                                         r"on disk .*Got True instead"):
        make_problem_on_disk("svm", OnDisk(path), y, C=C)
    with pytest.raises(ValueError, match=r"The 'fit_intercept' parameter of LogisticRegression must be False"):
        make_problem_on_disk("logistic", OnDisk(path), y, C=C, fit_intercept=True)
    fortran = tmp_path / "XF.npy"
    write_coordinate_major(fortran, D, N, [X.T], fortran=True)  # the Lasso's layout: a feature per coordinate
    with pytest.raises(ValueError, match=r"LinearSVC must hold one sample per coordinate .* 128 coordinates of "
                                         r"300 values, and y has shape \(300,\)"):
        make_problem_on_disk("svm", OnDisk(fortran), y, C=C, fit_intercept=False)
    three = np.arange(N) % 3
    with pytest.raises(ValueError, match="exactly two classes"):
        make_problem_on_disk("svm", OnDisk(path), three, C=C, fit_intercept=False)
    with pytest.raises(ValueError, match=r"The 'scale' parameter of DiskMatrix must be None or 300 finite numbers"):
        DiskMatrix(path, scale=np.ones(5))
