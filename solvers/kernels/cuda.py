"""GPU kernels (numba.cuda): TPA-SCD epochs and coordinate gaps.

TPA-SCD (Parnell, Dünner et al., "Large-scale stochastic learning using GPUs",
2017): a thread block per coordinate, taken in a random order. The block's
threads split the coordinate's entries, a shared-memory tree reduction gives
<A_i, z>, thread 0 applies the model's exact coordinate update (the same
scalar functions as the CPU kernels, :mod:`solvers.models`) and every thread
adds its share of the change into z with atomicAdd. Blocks run
asynchronously, without locks, as in the paper. One difference: the grid has
G thread blocks (the device's ``concurrency``), each taking every G-th
coordinate of the order, so at most G updates read a stale z at once. With
every coordinate in flight together an epoch is a Jacobi step, which
overshoots, and can diverge, on correlated coordinates.

Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, device "cuda_sim")
the same kernels run on NumPy arrays, one block after another, so CI exercises
this code without a GPU.
"""

from numba import config, cuda, float64

from solvers.models import coord_gap, coord_update

# threads per block (a power of two); the simulator runs each thread as a Python
# thread, so it gets few: the strided loops and the reduction still run in full
TPB = 4 if config.ENABLE_CUDASIM else 128


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
def _step(shared, i, dot, a, off, mu, sqnorm, c, m, model, p0, p1, p2, t):
    """Thread 0 applies the exact coordinate update; every thread gets the change."""
    if t == 0:
        s = dot - c * off[0] * m * mu[i]
        ai = a[i]
        x = coord_update(model, ai, s, c * sqnorm[i], p0, p1, p2)
        d = x - ai
        a[i] = x
        shared[0] = d
        if d != 0.0 and mu[i] != 0.0:
            cuda.atomic.add(off, 0, d * mu[i])
    cuda.syncthreads()
    return shared[0]


@cuda.jit
def tpa_scd_dense(block, coords, order, a, z, off, mu, sqnorm, c, model, p0, p1, p2):
    """One epoch over ``block[order]``: thread block b updates coordinates
    coords[order[b]], coords[order[b + G]], ... (G thread blocks), so at most G
    updates are in flight at once."""
    partial = cuda.shared.array(TPB, float64)
    shared = cuda.shared.array(1, float64)
    t = cuda.threadIdx.x
    n_cols = block.shape[1]
    for w in range(cuda.blockIdx.x, order.shape[0], cuda.gridDim.x):
        j = order[w]
        acc = 0.0
        for k in range(t, n_cols, TPB):
            acc += block[j, k] * z[k]
        partial[t] = acc
        dot = _block_sum(partial, t)
        d = _step(shared, coords[j], dot, a, off, mu, sqnorm, c, z.shape[0], model, p0, p1, p2, t)
        if d != 0.0:
            cd = c * d
            for k in range(t, n_cols, TPB):
                cuda.atomic.add(z, k, cd * block[j, k])
        # the next coordinate's dot product reads z only after this one's update is in
        cuda.syncthreads()


@cuda.jit
def tpa_scd_sparse(indptr, indices, data, coords, order, a, z, off, mu, sqnorm, c, model,
                   p0, p1, p2):
    """Same as :func:`tpa_scd_dense` for a CSR block of coordinates."""
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
        d = _step(shared, coords[j], dot, a, off, mu, sqnorm, c, z.shape[0], model, p0, p1, p2, t)
        if d != 0.0:
            cd = c * d
            for k in range(start + t, stop, TPB):
                cuda.atomic.add(z, indices[k], cd * data[k])
        # the next coordinate's dot product reads z only after this one's update is in
        # (its entries are other threads' entries here)
        cuda.syncthreads()


@cuda.jit
def gaps_dense(block, rows, coords, a, z, off, mu, c, model, p0, p1, p2, out):
    """out[b] = gap of coordinate coords[b], whose data is block[rows[b]]; one thread block each."""
    partial = cuda.shared.array(TPB, float64)
    t = cuda.threadIdx.x
    b = cuda.blockIdx.x
    r = rows[b]
    acc = 0.0
    for k in range(t, block.shape[1], TPB):
        acc += block[r, k] * z[k]
    partial[t] = acc
    dot = _block_sum(partial, t)
    if t == 0:
        i = coords[b]
        s = dot - c * off[0] * z.shape[0] * mu[i]
        out[b] = coord_gap(model, a[i], s, p0, p1, p2)


@cuda.jit
def gaps_sparse(indptr, indices, data, rows, coords, a, z, off, mu, c, model, p0, p1, p2, out):
    """Same as :func:`gaps_dense` for a CSR block."""
    partial = cuda.shared.array(TPB, float64)
    t = cuda.threadIdx.x
    b = cuda.blockIdx.x
    r = rows[b]
    acc = 0.0
    for k in range(indptr[r] + t, indptr[r + 1], TPB):
        acc += data[k] * z[indices[k]]
    partial[t] = acc
    dot = _block_sum(partial, t)
    if t == 0:
        i = coords[b]
        s = dot - c * off[0] * z.shape[0] * mu[i]
        out[b] = coord_gap(model, a[i], s, p0, p1, p2)


@cuda.jit
def gaps_from_dots(dots, rows, coords, a, off, mu, c, n, model, p0, p1, p2, out):
    """out[j] = gap of coordinate coords[j] from dots[rows[j]] = <A_i, z>, a product
    cuBLAS computed (gap_kernel="blas"); one thread per coordinate."""
    j = cuda.grid(1)
    if j < coords.shape[0]:
        i = coords[j]
        s = dots[rows[j]] - c * off[0] * n * mu[i]
        out[j] = coord_gap(model, a[i], s, p0, p1, p2)
