"""benchmarks.vw_holdout on a small click-like set: every arm is scored, the reference's held-out
log-loss is scikit-learn's optimum's (the oracle), and ours reaches it and suboptimality 1e-6."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression as SkLogistic

pytest.importorskip("vowpalwabbit")

from benchmarks import vw_holdout  # noqa: E402

ARGS = ["--train", "3000", "--test", "1000", "--hash-bits", "12", "--C", "0.1", "--repeats", "1", "--no-bfgs"]


def test_every_arm_is_scored_against_the_optimums_held_out_loss(tmp_path, capsys):
    vw_holdout.main(ARGS + ["--cache", str(tmp_path)])
    out = capsys.readouterr().out
    L_star = float(out.split("L* = ")[1].split(",")[0])
    X, y, X_test, y_test = vw_holdout.click_data(3000, 1000, 12, tmp_path)
    sk = SkLogistic(C=0.1, fit_intercept=False, tol=1e-12, max_iter=100000).fit(X, y)
    assert L_star == pytest.approx(np.logaddexp(0, -y_test * (X_test @ sk.coef_.ravel())).mean(), rel=1e-6)
    summary = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:5]]
               for line in out.split("| arm | time to held-out")[1].splitlines()[2:] if line.startswith("| ")}
    assert set(summary) == {"ours (DuHL, LogisticRegression)", "vw online", "vw online, --l2 ~ 0"}
    held, optimal, _ = summary["ours (DuHL, LogisticRegression)"]
    assert held != "never" and optimal != "never" and float(optimal.split(" s")[0]) > 0
    vw_rows = [line for line in out.splitlines() if line.startswith("| vw online | ") and " passes |" in line]
    assert len(vw_rows) == 10 and all(float(row.split("|")[3]) > 0 for row in vw_rows)
