"""Compile every CUDA kernel to PTX for a real GPU target, without a GPU.

Not a pytest module (no ``test_`` prefix): run it by hand or from CI with the
numba-cuda target installed (``pip install 'numba-cuda[cu13]'``; CuPy is not
needed) and NUMBA_ENABLE_CUDASIM unset:

    python tests/solvers/ptx_check.py [--cc 9.0] [--cc 8.0] [--cubin] [-v]

It compiles ``solvers.kernels.cuda``'s kernels for the argument types
``solvers.duhl.block.devices.CUDADevice`` passes (see its epoch_*/gaps_* methods and the
dtypes of ``solvers.glm.problems``) and exits non-zero if any signature fails.
``--cubin`` also assembles each PTX to a cubin with nvJitLink (cuda.core's
Linker, from the same wheels), as the launch on a GPU would: ptxas errors too.
"""

import argparse
import os
import sys
import time
import traceback
from types import SimpleNamespace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def signatures():
    """{kernel name: [(label, signature tuple)]} for every type combination the backend launches:
    each model's theta (its NamedTuple type) with float64 data, and every dtype and index
    type with one model (the theta changes only the inlined scalar math). A model whose data term
    is a loss of the margins (a classifier in the primal) runs the Newton pass's kernels in
    place of TPA-SCD's (CUDADevice.epoch_dense / epoch_sparse); every model runs the gap kernels."""
    from numba import typeof, types

    from solvers.glm.models import MODELS

    f8, i8 = types.float64, types.int64
    vec = lambda dt: types.Array(dt, 1, "C")  # noqa: E731
    mat = lambda dt: types.Array(dt, 2, "C")  # noqa: E731
    # (a, z, off) float64 state; coords/order/positions int64 (np.flatnonzero, np.arange, row_coord)
    state = (vec(f8), vec(f8), vec(f8))
    ix = vec(i8)
    thetas, losses = {}, set()
    for model in MODELS.values():
        theta = model.theta(dict(model.params), 1.0)
        thetas.setdefault(type(theta).__name__, typeof(theta))
        if model.math.loss is not None:
            losses.add(type(theta).__name__)
    first = next(name for name in thetas if name not in losses)
    first_loss = next(name for name in thetas if name in losses)
    sigs = {name: [] for name in ("tpa_scd_dense", "tpa_scd_sparse", "gaps_dense", "gaps_sparse",
                                  "gaps_from_dots", "tpa_newton_dense", "tpa_newton_sparse", "newton_setup",
                                  "loss_changes", "g_changes", "margins_commit", "newton_commit")}
    # a Newton pass's state: (a, a0) per coordinate, (z, h, dm) per sample; lam a float
    newton = (vec(f8), vec(f8), vec(f8), vec(f8), vec(f8))
    for val in (types.float64, types.float32):
        # indices int32 (problems.py narrows them when nnz < 2**31), else int64
        for idx in (types.int32, types.int64):
            for name, theta in thetas.items():
                if (val, idx) != (types.float64, types.int32) and name not in (first, first_loss):
                    continue
                csr = (vec(i8), vec(idx), vec(val))  # the resident set's own indptr is int64
                label = f"{name}, data {val}, indices {idx}"
                if name in losses:
                    sigs["tpa_newton_sparse"].append((label, (*csr, ix, ix, *newton, theta)))
                else:
                    sigs["tpa_scd_sparse"].append((label, (*csr, ix, ix, *state, vec(f8), vec(f8), f8, theta)))
                if (val, idx) == (types.float64, types.int32) or name == first:
                    sigs["gaps_sparse"].append((label, (*csr, ix, ix, *state, vec(f8), f8, theta, vec(f8),
                                                        vec(f8))))
                if idx is types.int32:
                    label = f"{name}, rows {val}"
                    if name in losses:
                        sigs["tpa_newton_dense"].append((label, (mat(val), ix, ix, *newton, theta)))
                    else:
                        sigs["tpa_scd_dense"].append((label, (mat(val), ix, ix, *state, vec(f8), vec(f8), f8,
                                                              theta)))
                    if val is types.float64 or name == first:
                        sigs["gaps_dense"].append((label, (mat(val), ix, ix, *state, vec(f8), f8, theta, vec(f8),
                                                           vec(f8))))
                        # gap_kernel="blas": dots = rows @ z in the data's dtype; n (rows of A) int64
                        sigs["gaps_from_dots"].append(
                            (f"{name}, dots {val}", (vec(val), ix, ix, vec(f8), vec(f8), vec(f8), f8, i8, theta,
                                                     vec(f8), vec(f8))))
                if (val, idx) == (types.float64, types.int32) and name in losses:  # no data: one per theta
                    label = f"{name}, samples float64"
                    sigs["newton_setup"].append((label, (vec(f8), vec(f8), vec(f8), vec(f8), theta)))
                    sigs["loss_changes"].append((label, (vec(f8), vec(f8), vec(f8), f8, theta, vec(f8))))
                    sigs["g_changes"].append((label, (ix, ix, vec(f8), vec(f8), f8, theta, vec(f8))))
                    sigs["margins_commit"].append((label, (vec(f8), vec(f8), vec(f8), vec(f8), f8, theta)))
    sigs["newton_commit"].append(("no theta, float64", (ix, ix, vec(f8), vec(f8), f8)))
    return sigs


def _link_cubin(ptx, cc):
    """PTX -> cubin with nvJitLink, no GPU needed; returns the ELF bytes."""
    from cuda.core import Linker, LinkerOptions, ObjectCode

    obj = Linker(ObjectCode.from_ptx(ptx.encode()),
                 options=LinkerOptions(arch=f"sm_{cc[0]}{cc[1]}")).link("cubin")
    code = bytes(obj.code)
    if not code.startswith(b"\x7fELF"):
        raise RuntimeError("nvJitLink did not return an ELF cubin")
    return code


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cc", action="append", default=None,
                        help="compute capability like 9.0 (repeatable; default 9.0)")
    parser.add_argument("--cubin", action="store_true", help="also link each PTX to a cubin (nvJitLink)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    ccs = [tuple(int(x) for x in cc.split(".")) for cc in (args.cc or ["9.0"])]

    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        print("ptx_check: unset NUMBA_ENABLE_CUDASIM (the simulator compiles nothing)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    from numba import cuda

    impl = getattr(cuda, "implementation", "?")
    if impl != "NVIDIA":
        print(f"ptx_check: numba.cuda is the {impl!r} target ({cuda.__file__}); "
              "install numba-cuda[cu13]", file=sys.stderr)
        return 2
    from solvers.kernels import cuda as kernels

    # compile_ptx takes a target cc, but the @cuda.jit(device=True) functions the kernels
    # call (_block_sum, _step) are compiled by CUDADispatcher.compile_device, which asks
    # the driver for the current device's cc (numba_cuda/numba/cuda/dispatcher.py,
    # compile_device: get_current_device().compute_capability) and so fails without a
    # GPU ("CUDA driver library cannot be found"). Stand in a device of the target cc.
    # (Device-function overloads are cached by argument types only, so with several
    # --cc values they are compiled once, for the first.)
    import numba.cuda.dispatcher as dispatcher

    real_get_current_device = dispatcher.get_current_device

    print(f"numba.cuda: {cuda.__file__}; TPB={kernels.TPB}; import {time.perf_counter() - t0:.1f} s")
    failed = 0
    for cc in ccs:
        if not cuda.is_available():
            dispatcher.get_current_device = lambda cc=cc: SimpleNamespace(compute_capability=cc)
        for name, sigs in signatures().items():
            kernel = getattr(kernels, name)
            for label, sig in sigs:
                t1 = time.perf_counter()
                try:
                    ptx, restype = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
                except Exception:  # noqa: BLE001 -- report every failure, then exit non-zero
                    failed += 1
                    print(f"FAIL sm_{cc[0]}{cc[1]} {name} ({label})")
                    traceback.print_exc()
                    continue
                ok = f".target sm_{cc[0]}{cc[1]}" in ptx and ".entry" in ptx
                cubin = ""
                if ok and args.cubin:
                    try:
                        cubin = f", {len(_link_cubin(ptx, cc))} bytes cubin"
                    except Exception:  # noqa: BLE001
                        ok = False
                        traceback.print_exc()
                failed += not ok
                print(f"{'ok  ' if ok else 'FAIL'} sm_{cc[0]}{cc[1]} {name} ({label}): "
                      f"{len(ptx)} chars PTX{cubin}, {time.perf_counter() - t1:.1f} s")
                if args.verbose:
                    lines = ptx.splitlines()
                    externs = [line for line in lines if ".extern" in line]
                    print(f"     {sum('.entry' in line for line in lines)} .entry, "
                          f"{len(externs)} .extern: {externs}")
    dispatcher.get_current_device = real_get_current_device
    print(f"{'FAILED' if failed else 'all compiled'}: {failed} failure(s); {time.perf_counter() - t0:.1f} s in all")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
