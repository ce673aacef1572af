"""GPU kernels (numba.cuda): TPA-SCD epochs and coordinate gaps.

TPA-SCD (Parnell, Dünner et al., "Large-scale stochastic learning using GPUs",
2017): a thread block per coordinate, taken in a random order. The block's
threads split the coordinate's entries, a shared-memory tree reduction gives
<A_i, z>, thread 0 applies the model's exact coordinate update (the same
scalar functions as the CPU kernels, :mod:`solvers.glm.models`) and every thread
adds its share of the change into z with atomicAdd. Blocks run
asynchronously, without locks, as in the paper. One difference: the grid has
G thread blocks (the device's ``concurrency``), each taking every G-th
coordinate of the order, so at most G updates read a stale z at once. With
every coordinate in flight together an epoch is a Jacobi step, which
overshoots, and can diverge, on correlated coordinates.

A model with a loss of the margins (the classifiers in the primal) runs a Newton pass instead,
as the CPU's (:func:`solvers.kernels.cpu.newton_pass_dense`): :func:`newton_setup` keeps the
pass's start (u0, the curvatures h), :func:`tpa_newton_dense` / :func:`tpa_newton_sparse` move
the coordinates on the data term's second-order model (its gradient, linear in the step, added
into z with atomicAdd as TPA-SCD adds into z), :func:`loss_changes` and :func:`g_changes` give
the line search its terms (summed on the device, the step chosen on the host), and
:func:`newton_commit` / :func:`margins_commit` take the step chosen.

Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, device "cuda_sim")
the same kernels run on NumPy arrays, one block after another, so CI exercises
this code without a GPU.
"""

import sys
import threading

import numpy as np

from numba import config, cuda, float64

from solvers.glm.models import coord_gap, coord_update, g_value, loss_change, loss_curvature, loss_grad

# threads per block (a power of two); the simulator runs each thread as a Python
# thread, so it gets few: the strided loops and the reduction still run in full
TPB = 4 if config.ENABLE_CUDASIM else 128


def _one_shared_array_per_block():
    """Make the simulator's ``cuda.shared.array`` give every thread of a block the same array.

    numba-cuda's simulator (0.30.4) allocates a block's shared array for the first thread
    to ask: a dict lookup by the caller's file and line, then an insert. A GIL switch
    between the two gives two threads of one block two arrays, and the block's reduction
    sums another thread's garbage (about one launch in 3,000 with two busy cores: a
    cuda_sim solve then differed from the same solve run again). The same lookup, under
    a lock; dynamic shared memory (shape 0) is left to the simulator.
    """
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared
    if getattr(shared, "_one_per_block", False):
        return
    simulator_array = shared.array
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:
            return simulator_array(self, shape, dtype, alignment)
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            res = self._allocations.get(key)
            if res is None:
                res = self._allocations[key] = np.empty(shape, dtype)
        return res

    shared.array = array
    shared._one_per_block = True


if config.ENABLE_CUDASIM:
    _one_shared_array_per_block()


@cuda.jit(device=True)
def _block_sum(partial, t):
    """Tree reduction of ``partial`` (length TPB) in shared memory; all threads get the sum."""
    cuda.syncthreads()
    step = TPB // 2
    while step > 0:
        if t < step:
            partial[t] += partial[t + step]
        cuda.syncthreads()
        step //= 2
    return partial[0]


@cuda.jit(device=True)
def _step(shared, i, dot, a, off, mu, sqnorm, c, m, theta, t):
    """Thread 0 applies the exact coordinate update; every thread gets the change."""
    if t == 0:
        s = dot - c * off[0] * m * mu[i]
        ai = a[i]
        x = coord_update(theta, ai, s, c * sqnorm[i])
        d = x - ai
        a[i] = x
        shared[0] = d
        if d != 0.0 and mu[i] != 0.0:
            cuda.atomic.add(off, 0, d * mu[i])
    cuda.syncthreads()
    return shared[0]


@cuda.jit
def tpa_scd_dense(rows, coords, order, a, z, off, mu, sqnorm, c, theta):
    """One epoch over ``rows[order]``: thread block b updates coordinates
    coords[order[b]], coords[order[b + G]], ... (G thread blocks), so at most G
    updates are in flight at once."""
    partial = cuda.shared.array(TPB, float64)
    shared = cuda.shared.array(1, float64)
    t = cuda.threadIdx.x
    n_cols = rows.shape[1]
    for w in range(cuda.blockIdx.x, order.shape[0], cuda.gridDim.x):
        j = order[w]
        acc = 0.0
        for k in range(t, n_cols, TPB):
            acc += rows[j, k] * z[k]
        partial[t] = acc
        dot = _block_sum(partial, t)
        d = _step(shared, coords[j], dot, a, off, mu, sqnorm, c, z.shape[0], theta, t)
        if d != 0.0:
            cd = c * d
            for k in range(t, n_cols, TPB):
                cuda.atomic.add(z, k, cd * rows[j, k])
        # the next coordinate's dot product reads z only after this one's update is in
        cuda.syncthreads()


@cuda.jit
def tpa_scd_sparse(indptr, indices, data, coords, order, a, z, off, mu, sqnorm, c, theta):
    """Same as :func:`tpa_scd_dense` for a CSR matrix of coordinates."""
    partial = cuda.shared.array(TPB, float64)
    shared = cuda.shared.array(1, float64)
    t = cuda.threadIdx.x
    for w in range(cuda.blockIdx.x, order.shape[0], cuda.gridDim.x):
        j = order[w]
        start = indptr[j]
        stop = indptr[j + 1]
        acc = 0.0
        for k in range(start + t, stop, TPB):
            acc += data[k] * z[indices[k]]
        partial[t] = acc
        dot = _block_sum(partial, t)
        d = _step(shared, coords[j], dot, a, off, mu, sqnorm, c, z.shape[0], theta, t)
        if d != 0.0:
            cd = c * d
            for k in range(start + t, stop, TPB):
                cuda.atomic.add(z, indices[k], cd * data[k])
        # the next coordinate's dot product reads z only after this one's update is in
        # (its entries are other threads' entries here)
        cuda.syncthreads()


@cuda.jit
def gaps_dense(rows, positions, coords, a, z, off, mu, c, theta, out, out_s):
    """out[b] = gap of coordinate coords[b], whose data is rows[positions[b]], out_s[b] its
    s = <A_i, u>; one thread block each."""
    partial = cuda.shared.array(TPB, float64)
    t = cuda.threadIdx.x
    b = cuda.blockIdx.x
    r = positions[b]
    acc = 0.0
    for k in range(t, rows.shape[1], TPB):
        acc += rows[r, k] * z[k]
    partial[t] = acc
    dot = _block_sum(partial, t)
    if t == 0:
        i = coords[b]
        s = dot - c * off[0] * z.shape[0] * mu[i]
        out_s[b] = s
        out[b] = coord_gap(theta, a[i], s)


@cuda.jit
def gaps_sparse(indptr, indices, data, positions, coords, a, z, off, mu, c, theta, out, out_s):
    """Same as :func:`gaps_dense` for a CSR matrix."""
    partial = cuda.shared.array(TPB, float64)
    t = cuda.threadIdx.x
    b = cuda.blockIdx.x
    r = positions[b]
    acc = 0.0
    for k in range(indptr[r] + t, indptr[r + 1], TPB):
        acc += data[k] * z[indices[k]]
    partial[t] = acc
    dot = _block_sum(partial, t)
    if t == 0:
        i = coords[b]
        s = dot - c * off[0] * z.shape[0] * mu[i]
        out_s[b] = s
        out[b] = coord_gap(theta, a[i], s)


@cuda.jit
def gaps_from_dots(dots, positions, coords, a, off, mu, c, n, theta, out, out_s):
    """out[j] = gap of coordinate coords[j] from dots[positions[j]] = <A_i, z>, a product
    cuBLAS computed (gap_kernel="blas"); one thread per coordinate."""
    j = cuda.grid(1)
    if j < coords.shape[0]:
        i = coords[j]
        s = dots[positions[j]] - c * off[0] * n * mu[i]
        out_s[j] = s
        out[j] = coord_gap(theta, a[i], s)


# ---------------------------------------------------------------- a loss's Newton pass ---
H_FLOOR = 1e-12  # as solvers.kernels.cpu.H_FLOOR


@cuda.jit
def newton_setup(z, u0, h, dm, theta):
    """The pass's start: u0 = z, h = the loss's curvature there, dm = 0; a thread per sample."""
    k = cuda.grid(1)
    if k < z.shape[0]:
        u0[k] = z[k]
        h[k] = loss_curvature(theta, z[k])
        dm[k] = 0.0


@cuda.jit(device=True)
def _newton_step(shared, i, w, G, H, a, a0, theta, t):
    """Thread 0 takes coordinate i's Newton step on the model; every thread gets the change."""
    if t == 0:
        ai = a[i]
        a0[w] = ai
        x = coord_update(theta, ai, G, max(H, H_FLOOR))
        a[i] = x
        shared[0] = x - ai
    cuda.syncthreads()
    return shared[0]


@cuda.jit
def tpa_newton_dense(rows, coords, order, a, a0, z, h, dm, theta):
    """The Newton pass's coordinate steps over ``rows[order]`` (a thread block per coordinate, G
    of them in flight, as :func:`tpa_scd_dense`): s = <A_i, z>, L = <A_i^2, h>, z += h A_i d and
    dm += A_i d; a0[w] keeps the w-th coordinate's value before its step."""
    partial = cuda.shared.array(TPB, float64)
    partial2 = cuda.shared.array(TPB, float64)
    shared = cuda.shared.array(1, float64)
    t = cuda.threadIdx.x
    n_cols = rows.shape[1]
    for w in range(cuda.blockIdx.x, order.shape[0], cuda.gridDim.x):
        j = order[w]
        acc = 0.0
        acc2 = 0.0
        for k in range(t, n_cols, TPB):
            x = rows[j, k]
            acc += x * z[k]
            acc2 += x * x * h[k]
        partial[t] = acc
        partial2[t] = acc2
        G = _block_sum(partial, t)
        H = _block_sum(partial2, t)
        d = _newton_step(shared, coords[j], w, G, H, a, a0, theta, t)
        if d != 0.0:
            for k in range(t, n_cols, TPB):
                xd = rows[j, k] * d
                cuda.atomic.add(dm, k, xd)
                cuda.atomic.add(z, k, h[k] * xd)
        cuda.syncthreads()


@cuda.jit
def tpa_newton_sparse(indptr, indices, data, coords, order, a, a0, z, h, dm, theta):
    """Same as :func:`tpa_newton_dense` for a CSR matrix."""
    partial = cuda.shared.array(TPB, float64)
    partial2 = cuda.shared.array(TPB, float64)
    shared = cuda.shared.array(1, float64)
    t = cuda.threadIdx.x
    for w in range(cuda.blockIdx.x, order.shape[0], cuda.gridDim.x):
        j = order[w]
        start = indptr[j]
        stop = indptr[j + 1]
        acc = 0.0
        acc2 = 0.0
        for e in range(start + t, stop, TPB):
            x = data[e]
            k = indices[e]
            acc += x * z[k]
            acc2 += x * x * h[k]
        partial[t] = acc
        partial2[t] = acc2
        G = _block_sum(partial, t)
        H = _block_sum(partial2, t)
        d = _newton_step(shared, coords[j], w, G, H, a, a0, theta, t)
        if d != 0.0:
            for e in range(start + t, stop, TPB):
                k = indices[e]
                xd = data[e] * d
                cuda.atomic.add(dm, k, xd)
                cuda.atomic.add(z, k, h[k] * xd)
        cuda.syncthreads()


@cuda.jit
def loss_changes(off, u0, dm, lam, theta, out):
    """out[k] = loss_k(v_k + lam dm_k) - loss_k(v_k), the margins v in off[1:]; a thread per sample."""
    k = cuda.grid(1)
    if k < dm.shape[0]:
        out[k] = loss_change(theta, off[k + 1], u0[k], lam * dm[k]) if dm[k] != 0.0 else 0.0


@cuda.jit
def g_changes(coords, order, a, a0, lam, theta, out):
    """out[w] = g(a0 + lam (a - a0)) - g(a0) of the w-th coordinate of the pass."""
    w = cuda.grid(1)
    if w < order.shape[0]:
        i = coords[order[w]]
        out[w] = g_value(theta, a0[w] + lam * (a[i] - a0[w])) - g_value(theta, a0[w])


@cuda.jit
def newton_commit(coords, order, a, a0, lam):
    """a = a0 + lam (a - a0) over the pass's coordinates (the step taken)."""
    w = cuda.grid(1)
    if w < order.shape[0]:
        i = coords[order[w]]
        a[i] = a0[w] + lam * (a[i] - a0[w])


@cuda.jit
def margins_commit(off, z, u0, dm, lam, theta):
    """The margins moved by lam dm, and z = grad f there (u0 where nothing moved)."""
    k = cuda.grid(1)
    if k < z.shape[0]:
        if dm[k] != 0.0 and lam > 0.0:
            off[k + 1] += lam * dm[k]
            z[k] = loss_grad(theta, off[k + 1])
        else:
            z[k] = u0[k]
