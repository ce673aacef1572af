"""benchmarks.solver_memory: the snapshot at the swap loop's start sees the solver's arrays."""

from benchmarks.solver_memory import main


def test_the_dual_iterate_is_listed_at_its_size_and_nothing_above_the_peak(capsys):
    rows = 3000
    result = main(["--rows", str(rows), "--features", "256", "--top", "60"])
    assert result["coords"] == rows  # logistic in the dual: a coordinate a sample
    sizes = {(path, line): size for path, line, size in result["lines"]}
    # alpha, float64 a sample, made where DuHL's solve starts its iterate (and the array object's header)
    assert any(path == "solvers/duhl/solver.py" and 8 * rows <= size < 8 * rows + 1024
               for (path, _), size in sizes.items()), sizes
    assert 0 < sum(sizes.values()) <= result["peak"]
    assert "B a coordinate" in capsys.readouterr().out
