"""Devices: where a resident set's memory lives, and every byte that moves into it.

- ``cpu``: host memory as the device. The resident set is a separate buffer in
  RAM, so a swap is a real copy; the kernels share (a, z) with the host.
- ``cuda``: CuPy memory; incoming coordinates are gathered into pinned host
  memory and copied on a dedicated copy stream, ordered before compute by a CUDA
  event; TPA-SCD kernels (:mod:`solvers.kernels.cuda`) run on the compute stream.
- ``cuda_sim``: the same CUDA kernels under Numba's CUDA simulator on NumPy
  arrays (tiny problems only: ~1e5 times slower than a GPU).

``bytes_h2d`` counts every byte copied host->device: coordinate data on swaps,
and for GPU devices the (a, z) state sent each round. This module is the only
one that imports CuPy.
"""

import contextlib
import math
import os
import sys
import warnings

import numpy as np

from solvers.kernels import cpu

SIM_SWITCH_INTERVAL_S = 2e-5  # the GIL switch interval while a simulated kernel runs (see _launch)


class NoCudaDevice(RuntimeError):
    """device="cuda" was asked for on a machine without a usable GPU."""

    def __init__(self, detail=""):
        super().__init__("no CUDA device found: use device=cpu or device=cuda_sim"
                         + (f" ({detail})" if detail else ""))


# --------------------------------------------------------------------------- devices


class CPUDevice:
    """Host memory as the device: copies are plain memcpy, kernels are Numba's CPU ones."""

    name = "cpu"
    xp = np

    def __init__(self):
        self.bytes_h2d = 0

    def context(self):
        """Where a block's array work runs (CUDA: the compute stream)."""
        return contextlib.nullcontext()

    def upload_rows(self, dst, dst_rows, src, coords=None, prefetch=False):
        """dst[dst_rows] = src[coords] (src itself when coords is None), counted."""
        rows = src if coords is None else src[coords]
        dst[dst_rows] = rows
        self.bytes_h2d += rows.nbytes

    def upload_into(self, dst, start, src, prefetch=False):
        dst[start:start + src.shape[0]] = src
        self.bytes_h2d += src.nbytes

    def gather(self, dst, start, src, positions, prefetch=False):
        """dst[start:...] = src[positions], both on the device (not counted: no host bytes)."""
        dst[start:start + positions.shape[0]] = src[positions]

    def copy_rows(self, dst, start, src, rows, from_host, prefetch=False):
        """Append CSR rows ``rows`` of src = (host indptr, indices, data) to dst = (indices,
        data) from ``start``; ``from_host``: src is the host's matrix (the bytes are counted).
        Returns the rows' lengths."""
        lengths = np.empty(rows.shape[0], dtype=np.int64)
        end = cpu.copy_csr_rows(*src, rows, *dst, start, lengths)
        if from_host:
            self.bytes_h2d += (end - start) * (dst[0].itemsize + dst[1].itemsize)
        return lengths

    def settle(self):
        """Make later compute wait for the prefetched copies (CUDA)."""

    def synchronize(self):
        """Wait (host) until the block's queued work is done (CUDA)."""

    def begin_round(self, state):
        return state  # shared memory: the kernels update the host's arrays

    def end_round(self, state, dev_state):
        pass

    def to_host(self, x):
        return x

    def epoch_dense(self, data, coords, order, st, p):
        return cpu.epoch_kernels(p.theta)[0](data, coords, order, *st, p.mu, p.sqnorm, p.c, p.theta)

    def epoch_sparse(self, buf, coords, order, st, p):
        return cpu.epoch_kernels(p.theta)[1](*buf, coords, order, *st, p.mu, p.sqnorm, p.c, p.theta)

    def gaps_dense(self, data, rows, coords, st, p):
        """(gaps, s) of coords (data rows ``rows``) at st, as device arrays (see to_host)."""
        out, s = np.empty(rows.shape[0]), np.empty(rows.shape[0])
        cpu.gaps_dense(data, rows, coords, *st, p.mu, p.c, p.theta, out, s)
        return out, s

    def gaps_sparse(self, buf, rows, coords, st, p):
        out, s = np.empty(rows.shape[0]), np.empty(rows.shape[0])
        cpu.gaps_sparse(*buf, rows, coords, *st, p.mu, p.c, p.theta, out, s)
        return out, s


class CUDADevice(CPUDevice):
    """CuPy memory and numba.cuda kernels; ``simulate=True`` runs them on NumPy arrays.

    Streams: every CuPy operation of a block and every kernel runs on the
    compute stream (the block enters :meth:`context`); host->device copies run
    on a copy stream from pinned buffers. A copy's event orders the compute
    stream after it at once, or, for a prefetch, only at :meth:`settle` (the
    start of the next swap), so a prefetch travels while the round computes.
    Temporaries live and die on one stream, so CuPy's per-stream memory pool
    never hands out memory another stream may still read; pinned buffers are
    held until their copy's event has completed.
    """

    def __init__(self, problem, simulate, gap_kernel="tpa", concurrency="auto"):
        super().__init__()
        self.simulate = simulate
        self.gap_kernel = gap_kernel
        self.concurrency = concurrency
        self.name = "cuda_sim" if simulate else "cuda"
        self.parallel = True     # an epoch updates several coordinates at once (see epoch_grid)
        self.cuts = []           # the concurrency after each halving (ResidentSet.run_round)
        self._last_grid = 1
        self._held = []          # (event, pinned buffers) of copies that may be in flight
        self._prefetched = None  # event of the last prefetch copy, not yet waited for
        if simulate:
            _enable_simulator()
            self.xp = np
        else:
            cp = _cupy()
            from numba import cuda

            self.xp = cp
            # an epoch's grid is small on purpose (TPA-SCD keeps about sqrt(n) updates in flight,
            # a block's gap pass one thread block per coordinate): Numba's low-occupancy warning
            # would print at every launch of a small block
            warnings.filterwarnings("ignore", message=".*Grid size .* under-utilization", module="numba")
            self.copy_stream = cp.cuda.Stream(non_blocking=True)
            self.compute_stream = cp.cuda.Stream(non_blocking=True)
            self._kernel_stream = cuda.external_stream(self.compute_stream.ptr)
        from solvers.kernels import cuda as kernels

        self.k = kernels
        with self.context():
            self.mu = self._put(problem.mu)
            self.sqnorm = self._put(problem.sqnorm)

    def context(self):
        return contextlib.nullcontext() if self.simulate else self.compute_stream

    def _put(self, host):
        """A small host array (an order, rows) on the current stream."""
        if self.simulate:
            return np.array(host)
        return self.xp.asarray(host)

    def _launch(self, kernel, n_blocks, *args):
        if n_blocks == 0:
            return
        if self.simulate:
            # the simulator runs a block's threads as Python threads while its own thread polls
            # them: with the default 5 ms GIL switch interval a block waits ~100 ms for its 4
            # threads, with 20 us a few ms (a cuda_sim solve 5x faster); restored after
            interval = sys.getswitchinterval()
            sys.setswitchinterval(SIM_SWITCH_INTERVAL_S)
            try:
                kernel[n_blocks, self.k.TPB](*args)
            finally:
                sys.setswitchinterval(interval)
            return
        from numba import cuda

        # sync=False: the arrays' work is ordered on the compute stream already, so
        # Numba need not block the host on each argument's stream
        args = [cuda.as_cuda_array(x, sync=False) if hasattr(x, "__cuda_array_interface__") else x
                for x in args]
        kernel[n_blocks, self.k.TPB, self._kernel_stream](*args)

    @contextlib.contextmanager
    def _copying(self, prefetch=False):
        """CuPy work on the copy stream; the compute stream waits for it now, or
        (``prefetch``) at the next :meth:`settle`. Yields a list for the pinned
        buffers to hold until the copy is done."""
        if self.simulate:
            yield None
            return
        held = []
        with self.copy_stream:
            yield held
            done = self.copy_stream.record()
        self._held = [(event, bufs) for event, bufs in self._held if not event.done]
        self._held.append((done, held))
        if prefetch:
            self._prefetched = done
        else:
            self.compute_stream.wait_event(done)

    def _pinned(self, shape, dtype, held):
        """A pinned host array, held until its copy is done (inside _copying)."""
        size = int(np.prod(shape))
        pinned = self.xp.cuda.alloc_pinned_memory(max(size * np.dtype(dtype).itemsize, 1))
        staged = np.frombuffer(pinned, dtype, size).reshape(shape)
        held.append(staged)
        return staged

    def _to_device(self, src, held):
        """A new device array holding host ``src``, copied from pinned memory (inside _copying)."""
        self.bytes_h2d += src.nbytes
        if self.simulate:
            return np.array(src)
        staged = self._pinned(src.shape, src.dtype, held)
        staged[...] = src
        dev = self.xp.empty(src.shape, src.dtype)
        dev.set(staged, stream=self.copy_stream)
        return dev

    def upload_rows(self, dst, dst_rows, src, coords=None, prefetch=False):
        """The rows gathered on the host straight into pinned memory (one host copy, not two),
        copied into consecutive destination rows as they are (no scatter on the GPU)."""
        if self.simulate:
            return super().upload_rows(dst, dst_rows, src, coords, prefetch)
        n = src.shape[0] if coords is None else len(coords)
        with self._copying(prefetch) as held:
            staged = self._pinned((n, *src.shape[1:]), src.dtype, held)
            if coords is None:
                staged[...] = src
            else:
                np.take(src, coords, axis=0, out=staged, mode="clip")  # "raise" buffers a copy
            self.bytes_h2d += staged.nbytes
            lo = int(dst_rows[0]) if n else 0
            if n and int(dst_rows[-1]) - lo == n - 1 and np.all(np.diff(dst_rows) == 1):
                dst[lo:lo + n].set(staged, stream=self.copy_stream)
            else:
                dev = self.xp.empty(staged.shape, staged.dtype)
                dev.set(staged, stream=self.copy_stream)
                dst[self._put(dst_rows)] = dev

    def upload_into(self, dst, start, src, prefetch=False):
        with self._copying(prefetch) as held:
            dst[start:start + src.shape[0]] = self._to_device(src, held)

    def gather(self, dst, start, src, positions, prefetch=False):
        # a prefetch's gather stays off the compute stream, like its copies
        with self._copying(prefetch=True) if prefetch else contextlib.nullcontext():
            super().gather(dst, start, src, self._put(positions))

    def copy_rows(self, dst, start, src, rows, from_host, prefetch=False):
        indptr, indices, data = src
        starts, stops = indptr[rows], indptr[rows + 1]
        lengths = (stops - starts).astype(np.int64)
        positions = _row_positions(starts, lengths)
        if from_host:  # gathered on the host, one copy of each array (none for consecutive rows)
            consecutive = rows.shape[0] > 0 and bool(np.all(np.diff(rows) == 1))
            take = slice(int(starts[0]), int(stops[-1])) if consecutive else positions
            self.upload_into(dst[0], start, indices[take].astype(dst[0].dtype, copy=False), prefetch)
            self.upload_into(dst[1], start, data[take], prefetch)
        else:
            self.gather(dst[0], start, indices, positions, prefetch)
            self.gather(dst[1], start, data, positions, prefetch)
        return lengths

    def synchronize(self):
        if not self.simulate:
            self.compute_stream.synchronize()

    def settle(self):
        if self._prefetched is not None:
            self.compute_stream.wait_event(self._prefetched)
            self._prefetched = None

    def begin_round(self, state):
        with self._copying() as held:
            return tuple(self._to_device(x, held) for x in state)

    def end_round(self, state, dev_state):
        for host, dev in zip(state, dev_state):
            host[...] = self.to_host(dev)

    def to_host(self, x):
        if self.simulate:
            return np.asarray(x)
        self.compute_stream.synchronize()
        return x.get(stream=self.compute_stream)

    def epoch_grid(self, n):
        """Thread blocks of an epoch over n coordinates: the most updates in flight at once."""
        cap = math.isqrt(n) if self.concurrency == "auto" else int(self.concurrency)
        self._last_grid = max(1, min(n, cap))
        return self._last_grid

    def fewer_in_flight(self):
        """Halve the updates in flight (after a round that overshot); False at one already."""
        if self._last_grid <= 1:
            return False
        self.concurrency = self._last_grid // 2
        self.cuts.append(self.concurrency)
        return True

    def epoch_dense(self, data, coords, order, st, p):
        if p.loss:
            return self._newton_pass(self.k.tpa_newton_dense, (data,), coords, order, st, p)
        self._launch(self.k.tpa_scd_dense, self.epoch_grid(order.shape[0]), data, coords,
                     self._put(order), *st, self.mu, self.sqnorm, p.c, p.theta)
        return order.shape[0]

    def epoch_sparse(self, buf, coords, order, st, p):
        if p.loss:
            return self._newton_pass(self.k.tpa_newton_sparse, tuple(buf), coords, order, st, p)
        self._launch(self.k.tpa_scd_sparse, self.epoch_grid(order.shape[0]), *buf, coords,
                     self._put(order), *st, self.mu, self.sqnorm, p.c, p.theta)
        return order.shape[0]

    def _newton_pass(self, kernel, data, coords, order, st, p):
        """A loss model's Newton pass (solvers.kernels.cuda): the coordinates' steps on the data
        term's second-order model in TPA-SCD's blocks, then the line search on the pass's step as
        solvers.kernels.cpu's (its sums on the device, the step chosen here)."""
        from solvers.glm.models import zero_interval
        from solvers.kernels.cpu import ARMIJO, LINE_STEPS, LINE_UP

        a, z, off = st
        xp, n, m = self.xp, order.shape[0], z.shape[0]
        per = lambda count: -(-count // self.k.TPB)  # noqa: E731 (thread blocks of a thread per item)
        u0, h, dm, a0 = xp.empty(m), xp.empty(m), xp.empty(m), xp.empty(n)
        order_dev = self._put(order)
        self._launch(self.k.newton_setup, per(m), z, u0, h, dm, p.theta)
        self._launch(kernel, self.epoch_grid(n), *data, coords, order_dev, a, a0, z, h, dm, p.theta)
        slope = float(xp.dot(u0, dm))
        g_out, f_out = xp.empty(n), xp.empty(m)

        def change(lam):  # the objective's change at lam times the pass's step
            self._launch(self.k.g_changes, per(n), coords, order_dev, a, a0, lam, p.theta, g_out)
            self._launch(self.k.loss_changes, per(m), off, u0, dm, lam, p.theta, f_out)
            return float(xp.sum(f_out)), float(xp.sum(g_out))

        lam, taken = 1.0, 0.0
        for trial in range(LINE_STEPS):
            df, dg = change(lam)
            if trial == 0:
                predicted = slope + dg
                full = df + dg
            if df + dg <= ARMIJO * lam * predicted:
                taken = lam
                break
            lam *= 0.5
        lo, hi = zero_interval(p.theta, 0.0)
        if taken == 1.0 and not lo <= hi:  # cpu._longer_step's doubling (a penalty without a kink at 0)
            for _ in range(LINE_UP):
                df, dg = change(2.0 * taken)
                if not df + dg < full:
                    break
                taken, full = 2.0 * taken, df + dg
        if taken != 1.0:
            self._launch(self.k.newton_commit, per(n), coords, order_dev, a, a0, taken)
        self._launch(self.k.margins_commit, per(m), off, z, u0, dm, taken, p.theta)
        return n

    def gaps_dense(self, data, rows, coords, st, p):
        out, s = self.xp.empty(rows.shape[0]), self.xp.empty(rows.shape[0])
        if self.gap_kernel == "blas":
            # one matrix-vector product over the resident rows (cuBLAS gemv; staging rows
            # ride along), in the data's precision, then one thread per coordinate
            a, z, off = st
            dots = data @ z.astype(data.dtype, copy=False)
            blocks = -(-rows.shape[0] // self.k.TPB)
            self._launch(self.k.gaps_from_dots, blocks, dots, self._put(rows), coords, a, off,
                         self.mu, p.c, z.shape[0], p.theta, out, s)
            return out, s
        self._launch(self.k.gaps_dense, rows.shape[0], data, self._put(rows), coords, *st,
                     self.mu, p.c, p.theta, out, s)
        return out, s

    def gaps_sparse(self, buf, rows, coords, st, p):
        out, s = self.xp.empty(rows.shape[0]), self.xp.empty(rows.shape[0])
        self._launch(self.k.gaps_sparse, rows.shape[0], *buf, self._put(rows), coords, *st,
                     self.mu, p.c, p.theta, out, s)
        return out, s


def _row_positions(starts, lengths):
    """Positions of the entries of rows starting at ``starts`` with ``lengths``, in order."""
    return np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))


def _enable_simulator():
    import sys

    from numba import config

    if not config.ENABLE_CUDASIM:
        if "numba.cuda" in sys.modules:
            raise RuntimeError("device='cuda_sim' needs NUMBA_ENABLE_CUDASIM=1 set before "
                               "numba.cuda is first imported")
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        config.ENABLE_CUDASIM = 1


def _cupy():
    try:
        import cupy
    except ImportError as err:
        raise NoCudaDevice("CuPy is not installed: pip install -e .[gpu]") from err
    try:
        if not cupy.cuda.is_available():
            raise NoCudaDevice()
    except Exception as err:  # a missing driver raises from inside CuPy
        raise NoCudaDevice(str(err)) from err
    return cupy


def check_device(device):
    """Raise NoCudaDevice when device="cuda" has no usable GPU (the name is checked by
    solvers.glm.checks wherever a user sets it)."""
    if device == "cuda":
        _cupy()


def free_device_bytes(device):
    """Free memory of the GPU (None for cpu and cuda_sim)."""
    if device != "cuda":
        return None
    return _cupy().cuda.runtime.memGetInfo()[0]


def make_device(problem, device, gap_kernel="tpa", concurrency="auto"):
    """The device object (CPUDevice or CUDADevice) for a problem; the settings are
    checked by the solver that takes them."""
    if device == "cpu":
        return CPUDevice()
    return CUDADevice(problem, simulate=device == "cuda_sim", gap_kernel=gap_kernel,
                      concurrency=concurrency)
