"""`make bench-gpu`'s code path, run on Numba's CUDA simulator (tiny sizes; the
numbers mean nothing): the script must not wait for a GPU machine to show its
first AttributeError."""

import pytest

from benchmarks import gpu as bench_gpu


@pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaPerformanceWarning")
def test_bench_gpu_runs_end_to_end_on_the_simulator(capsys):
    try:
        bench_gpu.main(["--device", "cuda_sim"])
    except RuntimeError as err:  # numba.cuda was imported for a real GPU in this session
        if "NUMBA_ENABLE_CUDASIM" in str(err):
            pytest.skip(str(err))
        raise
    out = capsys.readouterr().out
    assert "TPA-SCD epoch" in out and "time to rel_gap 1e-6" in out
    for model in ("lasso", "elastic_net", "ridge", "svm", "logistic"):
        assert f"| {model} |" in out
    for arm in ("gap", "gap, no prefetch", "sequential", "random"):
        assert f"| {arm} |" in out


def test_gpu_reads_runs_of_adjacent_coordinates_match_a_plain_loop():
    import numpy as np

    from benchmarks import gpu_reads

    rng = np.random.default_rng(0)
    for density in (0.02, 0.5, 1.0):
        coords = gpu_reads.pick(1000, 200, density, rng)
        assert np.unique(coords).size == 200 and np.all(np.diff(coords) > 0)
        assert coords[-1] - coords[0] < max(200, int(200 / density))  # within the window
        expected, row = [], 0  # (first coordinate, count, first row), built one coordinate at a time
        for c in coords.tolist():
            if expected and c == expected[-1][0] + expected[-1][1]:
                expected[-1][1] += 1
            else:
                expected.append([c, 1, row])
            row += 1
        got = [list(map(int, t)) for t in zip(*gpu_reads.runs(coords))]
        assert got == expected
    assert gpu_reads.runs(np.arange(5, 9))[1].tolist() == [4]
