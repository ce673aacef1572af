"""Project-wide test set-up: tests marked `gpu` need a CUDA device and are skipped without one."""

import pytest


def _gpu_reason():
    """Why GPU tests cannot run here (None when they can)."""
    try:
        from solvers.duhl.devices import NoCudaDevice, check_device

        check_device("cuda")
    except NoCudaDevice as err:
        return str(err)
    from numba import config

    if config.ENABLE_CUDASIM:
        return "NUMBA_ENABLE_CUDASIM=1: the simulator, not a GPU (run `make test-gpu`)"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = _gpu_reason()
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}"))
