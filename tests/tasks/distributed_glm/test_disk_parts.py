"""CoCoA+ parts on disk (tasks/distributed_glm/disk.py), in-process: each part's shard, DuHL from disk under
its host_budget, its block and gap memory carried from round to round; scikit-learn's optimum with a
certified gap, a pass over the shard only in the first round and the exact ones the driver asks for, K = 1
is DuHL from disk itself."""

import numpy as np
import pytest
from sklearn.linear_model import Lasso, LogisticRegression

from solvers.distributed_glm.cocoa import CoCoA
from solvers.distributed_glm.cocoa_part import DISK_REFRESH
from solvers.duhl.solver import DuHL
from tasks.arms import run_arm
from tasks.data import SyntheticRowsData, load_dataset
from tasks.distributed_glm.arms import Placement
from tasks.problems import build_problem_on_disk, labels_for

pytestmark = pytest.mark.timeout(240)

LOGISTIC = {"name": "logistic", "C": 0.01, "fit_intercept": False}
LASSO = {"name": "lasso", "alpha": 0.05, "fit_intercept": True}
DATA = SyntheticRowsData(n_samples=1200, n_features=64, n_informative=8, correlation=0.0, noise=0.5, block_rows=256)


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return load_dataset(DATA, tmp_path_factory.mktemp("cache"))


def solve(ds, model, **settings):
    settings = {"name": "cocoa", "n_parts": 2, "local_epochs": 1, "tol": 1e-7, "max_epochs": 2000, "random_state": 0,
                **settings}
    return run_arm(None, settings, placement=Placement(None, ds.path, ds.X, ds.y, model))


def logistic_objective(X, s, w, C):
    return 0.5 * w @ w + C * np.logaddexp(0, -s * (X @ w)).sum()


@pytest.mark.parametrize("K", [2, 3])
def test_logistic_parts_on_disk_reach_sklearns_optimum(ds, K):
    X, s = np.asarray(ds.X), labels_for("logistic", ds.y)
    res = solve(ds, LOGISTIC, n_parts=K, host_budget=0.3)
    sk = LogisticRegression(C=0.01, fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, s)
    target = logistic_objective(X, s, sk.coef_.ravel(), 0.01)
    assert res.converged and res.trace.certified.iloc[-1] == 1
    assert res.rel_gap <= 1e-7
    assert abs(res.primal - target) <= 1e-6 * target  # P at the certified state (w = v)
    assert abs(logistic_objective(X, s, res.v, 0.01) - target) <= 1e-6 * target
    shard_bytes = [r["bytes"] - 4096 for r in res.shards]  # X.npy's data
    assert len(shard_bytes) == K and sum(shard_bytes) == ds.X.nbytes  # (64 float64: rows need no padding)
    exact = res.trace.certified.to_numpy() == 1
    assert exact[0] and exact[-1] and exact.sum() < len(exact) / 4
    for k in range(K):
        # the first round and the exact ones read the shard whole (every gap) and the block's newcomers (under the
        # 0.3 budget); the others only the newcomers and the oldest remembered gaps: in all under half the shard
        per_round = np.diff(res.trace[f"part{k}_bytes_disk"], prepend=0)
        assert (per_round[exact] >= shard_bytes[k]).all() and (per_round[exact] <= 1.3 * shard_bytes[k]).all()
        assert per_round[~exact].mean() < 0.5 * shard_bytes[k], per_round
    assert res.trace.bytes_disk.iloc[-1] == sum(res.trace[f"part{k}_bytes_disk"].iloc[-1] for k in range(K))
    assert (np.diff(res.trace.part0_bits_sent) == 32 * (64 + 1)).all()  # dv (m floats) and the gap a round


def test_compressed_parts_on_disk_stop_on_a_certified_row(ds):
    """Compressed messages make the driver's state an estimate, the parts' carried gap memories their gaps:
    a row counts as certified only when its state came from exact messages and every part read its gaps whole,
    and the run stops only on such a row, at scikit-learn's optimum."""
    X, s = np.asarray(ds.X), labels_for("logistic", ds.y)
    res = solve(ds, LOGISTIC, n_parts=2, host_budget=0.3,
                compressor={"name": "dither", "s": 4, "p": "inf", "bucket_size": 16})
    sk = LogisticRegression(C=0.01, fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, s)
    target = logistic_objective(X, s, sk.coef_.ravel(), 0.01)
    assert res.converged and res.trace.certified.iloc[-1] == 1 and res.rel_gap <= 1e-7
    assert abs(res.primal - target) <= 1e-6 * target
    exact = res.trace.certified.to_numpy() == 1
    shard = ds.X.nbytes // 2
    for k in range(2):  # a certified row's gaps were read whole by every part
        per_round = np.diff(res.trace[f"part{k}_bytes_disk"], prepend=0)
        assert (per_round[exact] >= shard).all()


def test_l1_logistic_feature_parts_on_disk_reach_liblinears_optimum(ds):
    """In the primal each part holds features (columns), read signed by every sample's label."""
    X, s = np.asarray(ds.X), labels_for("logistic", ds.y)
    C = 0.05
    res = solve(ds, {"name": "logistic_l1", "C": C, "fit_intercept": False}, n_parts=2, host_budget=0.3, tol=1e-9)
    # liblinear in a fixed order, at 1e-11: at 1e-12 its passes stalled to max_iter in some orders (35 s)
    sk = LogisticRegression(l1_ratio=1.0, solver="liblinear", C=C, fit_intercept=False, tol=1e-11,
                            max_iter=100000, random_state=0).fit(X, s)
    objective = lambda w: np.abs(w).sum() + C * np.logaddexp(0, -s * (X @ w)).sum()  # noqa: E731
    target = objective(sk.coef_.ravel())
    assert res.converged and res.trace.certified.iloc[-1] == 1
    assert res.dual <= target * (1 + 1e-12) and res.primal <= target * (1 + 1e-8)
    assert abs(objective(res.a) - res.primal) <= 1e-12 * res.primal
    assert [r["axis"] for r in res.shards] == ["columns", "columns"]
    assert res.trace.bytes_disk.iloc[-1] > 0


def test_lasso_feature_parts_on_disk_reach_sklearns_optimum(ds):
    X, y = np.asarray(ds.X), np.asarray(ds.y)
    res = solve(ds, LASSO, n_parts=2, host_budget=0.4, tol=1e-9)
    sk = Lasso(alpha=0.05, tol=1e-14, max_iter=100000).fit(X, y)
    target = 0.5 * np.mean((y - X @ sk.coef_ - sk.intercept_) ** 2) + 0.05 * np.abs(sk.coef_).sum()
    assert res.converged
    assert abs(res.primal - target) <= 1e-7 * target
    np.testing.assert_allclose(res.a, sk.coef_, atol=1e-5)
    assert [r["axis"] for r in res.shards] == ["columns", "columns"]


def test_one_part_on_disk_is_duhl_from_disk(ds):
    """K = 1, sigma' = 1: the part's first round is one DuHL solve of the whole problem from its shard (the
    same settings: one epoch of the block a DuHL round, no prefetch), run to the target: the same iterates."""
    res = solve(ds, LOGISTIC, n_parts=1, local_epochs=1000, host_budget=0.25, tol=1e-6)
    problem = build_problem_on_disk(LOGISTIC, ds.path, ds.y)
    alone = DuHL(host_budget=0.25, local_epochs=1, tol=1e-6, max_epochs=1000 * 0.25, random_state=0, prefetch=0.0,
                 refresh=DISK_REFRESH).solve(problem)
    assert res.converged and res.n_rounds <= 2
    assert alone.converged
    np.testing.assert_array_equal(res.a, alone.a)


def test_a_shard_its_budget_holds_is_read_once(ds):
    res = solve(ds, LOGISTIC, n_parts=2, host_budget=1.0)
    assert res.converged
    reads = res.trace.part0_bytes_disk
    assert reads.iloc[0] == res.shards[0]["bytes"] - 4096 and (np.diff(reads) == 0).all()


def test_parts_on_disk_refuse_what_they_cannot_do(ds):
    with pytest.raises(ValueError, match=r"with a host_budget trains each part from its shard on disk: run it with a "
                                         r"placement"):
        run_arm(None, {"name": "cocoa", "host_budget": 0.5})
    with pytest.raises(ValueError, match=r"sigma='data' computes sigma' from the data in the driver's RAM"):
        solve(ds, LOGISTIC, host_budget=0.5, sigma="data")
    skeleton_less = CoCoA(n_parts=2, host_budget=0.5)
    with pytest.raises(ValueError, match=r"A part on disk holds its own shard"):
        skeleton_less.solve(build_problem_on_disk(LOGISTIC, ds.path, ds.y))
