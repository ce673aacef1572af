"""Every benchmark module imports and has a command line: a bench that only a GPU machine
runs (gpu.py, gpu_disk.py) would otherwise break unseen when a helper it calls is renamed."""

import importlib
import pkgutil

import pytest

import benchmarks

MODULES = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name != "__main__")


def test_the_benches_are_found():
    assert {"peers", "gpu", "gpu_disk", "disk_reads", "swap_loop"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_each_bench_imports_and_has_a_main(name):
    module = importlib.import_module(f"benchmarks.{name}")
    if name not in ("common",):
        assert callable(getattr(module, "main", None)), f"benchmarks.{name} has no main()"


def test_the_benchmarks_find_the_shared_datasets_beside_the_checkout():
    """benchmarks/ sits at the project root: w8a is ../shared/datasets/w8a from there, and the docs'
    results page is the project's own (a wrong depth skipped every w8a problem)."""
    from pathlib import Path

    import benchmarks.peers as peers
    from benchmarks.common import W8A

    root = Path(peers.__file__).resolve().parents[1]
    assert (root / "pyproject.toml").exists() and peers.ROOT == root
    assert W8A == root.parent / "shared" / "datasets" / "w8a"
    assert peers.RESULTS_PAGE == root / "docs" / "benchmarks" / "results.md"
