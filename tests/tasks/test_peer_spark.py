"""Spark MLlib's peer (tasks/peer_spark.py): its regParam = 1 / (n C) mapping of our C, checked against
scikit-learn's optimum of our objective (the oracle), and Spark's own objective L against ours: P = n C L.

Oracle: scikit-learn's LogisticRegression solved to tol 1e-12; P(w) = 1/2 ||w||^2 + C sum_i log(1 + e^{-y_i
<w, x_i>}) written here. Needs pyspark and Java 17 (the peers extra); skipped, with the reason, without."""

import numpy as np
import pytest

from tasks.peer_spark import SparkPeer, missing_reason, session, write_parquet

if missing_reason():
    pytest.skip(missing_reason(), allow_module_level=True)

from solvers.glm.problems import make_problem  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning")]

RNG = np.random.default_rng(0)
N, D, C = 400, 12, 0.05
X = RNG.standard_normal((N, D))
Y = np.where(X @ RNG.standard_normal(D) + 0.5 * RNG.standard_normal(N) > 0, 1.0, -1.0)


def objective(w):
    return 0.5 * w @ w + C * np.logaddexp(0, -Y * (X @ w)).sum()


def test_spark_reaches_our_optimum_and_its_objective_is_ours_over_n_C(tmp_path):
    from sklearn.linear_model import LogisticRegression

    target = objective(LogisticRegression(C=C, fit_intercept=False, tol=1e-12, max_iter=100000)
                       .fit(X, Y).coef_.ravel())
    problem = make_problem("logistic", X, Y, C=C, fit_intercept=False)
    res = SparkPeer(tol=1e-9, cores=1, folder=str(tmp_path)).solve(problem)
    assert res.status == "converged" and res.rel_gap <= 1e-9  # by our certificate
    assert abs(objective(res.a) - target) <= 1e-9 * target
    assert abs(res.primal - objective(res.a)) <= 1e-12 * target  # our code's P of Spark's w: the formula's
    # the curve: w = 0 at 0 s, then fits by their own time, each better than every quicker one; the last the result
    assert res.trace.epoch.iloc[0] == 0.0 and set(res.trace.epoch) <= {0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0}
    assert (np.diff(res.trace.time_s) >= 0).all() and (np.diff(res.trace.rel_gap) < 0).all()
    assert res.trace.rel_gap.iloc[-1] == res.rel_gap
    # Spark's own objective at its w: L = P / (n C) (its regParam = 1 / (n C), no standardization)
    from pyspark.ml.classification import LogisticRegression as SparkLR
    from pyspark.ml.functions import array_to_vector

    write_parquet(problem, tmp_path / "data.parquet")
    data = session(1).read.parquet(str(tmp_path / "data.parquet")).select(
        array_to_vector("features").alias("features"), "label")
    model = SparkLR(maxIter=100, regParam=1.0 / (N * C), fitIntercept=False, standardization=False, tol=1e-12,
                    family="binomial").fit(data)
    w = model.coefficients.toArray()
    assert abs(model.summary.objectiveHistory[-1] - objective(w) / (N * C)) <= 1e-9 * target / (N * C)


def test_bad_settings_say_so():
    with pytest.raises(ValueError, match=r"The 'cores' parameter of peer_spark must be an int >= 1 or None. Got 0"):
        SparkPeer(cores=0)
    with pytest.raises(ValueError, match=r"Spark's arm here is logistic regression"):
        SparkPeer().solve(make_problem("svm", X, Y, C=C))
