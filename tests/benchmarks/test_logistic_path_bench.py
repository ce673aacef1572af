"""benchmarks.logistic_path on a small dense set: every arm runs, and at a tight tol our paths' held-out
scores are the reference's (liblinear at tol 1e-6, fitted at every fold and C)."""

from benchmarks import logistic_path


def test_every_arm_runs_and_ours_score_as_the_reference(capsys):
    logistic_path.main(["--dense", "300x10", "--Cs", "0.01:1:3", "--folds", "3", "--tol", "1e-10", "--repeats", "1"])
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line.split("|")[2:] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith(("| arm", "| ---"))}
    assert set(rows) == {"duhl-path (warm starts)", "duhl, each C from zero", "liblinear (scikit-learn's CV)"}
    chosen = out.split("the reference chooses C = ")[1].split(",")[0]
    for name in ("duhl-path (warm starts)", "duhl, each C from zero"):
        seconds, _, C, diff = (cell.strip() for cell in rows[name][:4])
        assert float(seconds) > 0 and float(diff) == 0.0 and C == chosen, (name, rows[name])
