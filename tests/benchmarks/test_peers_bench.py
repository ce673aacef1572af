"""The benchmark's row building, summary, table and plot on tiny problems (seconds)."""

import argparse
import math

import numpy as np
import pytest

import benchmarks.peers as bench
from solvers.glm.problems import make_problem

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning",
                                        "ignore::UserWarning")


@pytest.fixture
def tiny_lasso():
    rng = np.random.default_rng(0)
    X = np.asfortranarray(rng.standard_normal((80, 12)))
    y = X[:, :3] @ np.ones(3) + 0.1 * rng.standard_normal(80)
    return make_problem("lasso", X, y, alpha=0.05, fit_intercept=False)


def test_rows_summary_table_and_plot(tiny_lasso, monkeypatch, tmp_path):
    # scikit-learn is always installed; a missing library is skipped with a reason
    monkeypatch.setattr(bench, "PEERS", {"peer_sklearn": bench.PEERS["peer_sklearn"],
                                         "peer_not_installed": ("no_such_lib_xyz", "nothing", None, None, ())})
    monkeypatch.setattr(bench, "missing_reason",
                        lambda name: "nothing is not importable" if name == "peer_not_installed" else None)
    logged = []
    args = argparse.Namespace(repeats=2, max_time=2.0, quick=True)
    rows, curves = bench.bench_problem("tiny", tiny_lasso, True, args, bandwidth=5.0, log=logged.append)
    solvers = [r["solver"] for r in rows]
    assert solvers == ["ours (mem)", "duhl 0.25", "sequential 0.25", "peer_sklearn"]
    assert any("skip peer_not_installed" in line for line in logged)
    for r in rows:
        assert r["t_1e4_s"] <= r["t_1e6_s"] and r["final_rel_gap"] <= 1e-6, r
    assert rows[0]["floor_ms"] > 0 and rows[0]["x_floor"] > 0
    (s,) = bench.summarize(rows)
    assert s["best_peer_1e6"] == "peer_sklearn"
    assert s["ratio_1e6"] == pytest.approx(rows[0]["t_1e6_s"] / rows[3]["t_1e6_s"])
    assert not math.isnan(s["seq_vs_duhl25"])
    table = bench.markdown(rows, "t")
    assert table.count("\n") == len(rows) + 3 and "peer_sklearn" in table
    bench.plot("tiny", curves, tmp_path / "tiny.png")
    assert (tmp_path / "tiny.png").stat().st_size > 0


def test_quick_suite_lists_every_required_problem():
    labels = [label for label, _ in bench.problems(quick=True)]
    assert any("w8a" in label and "lasso" in label for label in labels)
    assert any("w8a" in label and "svm" in label for label in labels)
    assert any("w8a" in label and "logistic" in label for label in labels)
    assert any("diabetes" in label for label in labels)
    assert any("w8a" in label and "logistic l1" in label for label in labels)
    assert any("w8a" in label and "squared hinge l1" in label for label in labels)
    assert any(label.startswith("dense logistic l1") for label in labels)  # tall: the primal side
    assert any("dense" in label for label in labels) and any("sparse" in label for label in labels)


def test_classifiers_take_the_side_dual_auto_picks():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((60, 5)), np.where(rng.random(60) < 0.5, 1.0, -1.0)
    assert bench.classifier("logistic", X, y, C=1.0, fit_intercept=False, penalty="l1").name == "logistic_l1"
    assert bench.classifier("logistic", X, y, C=1.0, fit_intercept=False, penalty="l2").name == "logistic_l2"
    assert bench.classifier("logistic", X[:4], np.array([1.0, -1.0, 1.0, -1.0]), C=1.0, fit_intercept=False).name == "logistic"
    assert bench.classifier("svm", X, y, C=1.0, fit_intercept=False, penalty="l1", loss="squared_hinge").name == "svm_l1"


def test_time_to_reads_the_first_crossing():
    import pandas as pd

    trace = pd.DataFrame({"time_s": [0.1, 0.2, 0.3], "rel_gap": [1e-2, 1e-5, 1e-7]})
    assert bench.time_to(trace, 1e-4) == 0.2 and bench.time_to(trace, 1e-6) == 0.3
    assert math.isnan(bench.time_to(trace, 1e-9))


def test_time_to_counts_certified_rows_only():
    """A DuHL trace's estimate rows (certified 0: the gap memory's stale gaps in the sum, refresh
    "auto") may read below the target before a certificate does: the time is the certificate's."""
    import pandas as pd

    trace = pd.DataFrame({"time_s": [0.1, 0.2, 0.3, 0.4], "rel_gap": [1e-2, 1e-7, 1e-5, 1e-8],
                          "certified": [1, 0, 1, 1]})
    assert bench.time_to(trace, 1e-6) == 0.4 and bench.time_to(trace, 1e-4) == 0.3
    assert math.isnan(bench.time_to(trace[trace.certified == 0], 1e-6))


def test_the_docs_results_page_gets_this_suites_table(tmp_path):
    """make bench rewrites its own suite's section of docs/benchmarks/results.md (date, command,
    table) and leaves the other suite's and the page's head as they were."""
    page = tmp_path / "results.md"
    page.write_text("<!-- head -->\n\n### The quick suite\n\nold quick\n\n### The full suite\n\nold full table\n")
    summary = [dict(problem="w8a lasso", ours_1e6_s=0.0112, best_peer_1e6="peer_snapml", best_peer_1e6_s=0.0361,
                    ratio_1e6=0.0112 / 0.0361, duhl25_vs_mem=1.3)]
    header = dict(mode="quick", cores=2, repeats=7, numba_warmup_s=90.0)
    bench.write_results_page(bench.results_section(summary, header, 159, "2026-11-28 16:00", ["--repeats", "7"]),
                             "quick", page)
    text = page.read_text()
    assert text.startswith("<!-- head -->") and "old quick" not in text and "old full table" in text
    assert '`make bench QUICK=1 ARGS="--repeats 7"`, measured **2026-11-28 16:00 UTC**' in text
    assert "| w8a lasso | 11.2 ms | peer_snapml 36.1 ms | 0.31 | 1.30x |" in text
    assert text.index("### The quick suite") < text.index("### The full suite")


def test_only_runs_the_problems_it_names(tiny_lasso, monkeypatch, tmp_path, capsys):
    """--only TEXT: the problems whose label contains TEXT, and the docs' page left as it is."""
    built = []

    def builder(label):
        def build():
            built.append(label)
            return tiny_lasso, False, None
        return build

    monkeypatch.setattr(bench, "problems", lambda quick: [(name, builder(name)) for name in
                                                          ("tiny lasso", "tiny logistic l1", "other")])
    monkeypatch.setattr(bench, "PEERS", {"peer_sklearn": bench.PEERS["peer_sklearn"]})
    monkeypatch.setattr(bench, "compile_kernels", lambda *a, **k: 0.0)
    monkeypatch.setattr(bench, "read_bandwidth", lambda: 5.0)
    monkeypatch.setattr(bench, "write_results_page", lambda *a, **k: pytest.fail("the docs' page was written"))
    bench.main(["--quick", "--no-tracking", "--max-time", "2", "--out", str(tmp_path), "--only", "logistic l1",
                "--only", "w8a[20000] logistic"])
    assert built == ["tiny logistic l1"]
    assert "tiny logistic l1" in capsys.readouterr().out


def test_the_budget_arms_of_an_l2_logistic_regression_take_the_side_auto_takes_under_a_budget():
    """A tall L2 logistic regression: the all-resident arms on the primal; the 0.25 arms on the
    dual where the features are binary (coupled: dual="auto" under a memory budget), on the
    primal too where they are centred; an L1 penalty has one side for both."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((60, 5)), np.where(rng.random(60) < 0.5, 1.0, -1.0)
    B = (X > 0).astype(np.float64)
    resident, budget_arms, budgeted = bench.sides("logistic", B, y, True, C=1.0, fit_intercept=False)
    assert (resident.name, budget_arms, budgeted.name) == ("logistic_l2", True, "logistic")
    resident, _, budgeted = bench.sides("logistic", X - X.mean(axis=0), y, True, C=1.0, fit_intercept=False)
    assert (resident.name, budgeted) == ("logistic_l2", None)
    assert bench.sides("logistic", B, y, False, C=1.0, fit_intercept=False, penalty="l1")[2] is None
