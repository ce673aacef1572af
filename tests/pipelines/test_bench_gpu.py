"""`make bench-gpu`'s code path, run on Numba's CUDA simulator (tiny sizes; the
numbers mean nothing): the script must not wait for a GPU machine to show its
first AttributeError."""

import pytest

from pipelines.bench import gpu as bench_gpu


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
