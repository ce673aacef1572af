"""The host's gap memory: every coordinate's last known gap (and s_i), fresh, proven or stale.

A gap is *fresh* when it was computed at the current state (the device's block
at the end of each round, or a host pass over every coordinate), *stale* when it
is older. DuHL's selection reads the memory as it stands (the paper's stale gap
memory); a certificate needs every gap exact at one state. With the data on a
slower tier the host cannot refresh every stale gap each round, so :meth:`plan`
picks the oldest ones (a round-robin cursor over the stale coordinates) that fit
a byte budget.

*Proven* gaps need no data at all. A coordinate at a bound has gap exactly 0 while
s_i stays in an interval (the model's ``zero_gap``, compiled as its Math's
``zero_interval``: |s_i| <= l1 at a_i = 0 for the Lasso and elastic net; a margin
s_i >= 1 at a_i = 0, s_i <= 1 at a_i = C for the hinge SVM), and s_i = <A_i, u>
moves with the dual vector u by at most ||A_i|| times how far u moved since s_i
was computed (Cauchy-Schwarz, as in gap safe screening: Fercoq, Gramfort & Salmon
2015). The memory tracks the length of the
path u travelled (:meth:`moved` is told each step); a stale coordinate whose last
s_i stays in its interval by more than that bound has gap 0 at the current state,
exactly what a read would give. Certificates and refreshes read only the
coordinates nothing proves: on disk, most of a sparse model's columns after the
first pass.
"""

import numpy as np
from numba import njit

from solvers.glm.models import zero_interval

# s_i +- its bound must stay this far inside the interval: s_i's own rounding never decides a proof
MARGIN = 1e-9
ROUNDING = 1e-12


class GapMemory:
    def __init__(self, gaps, s, coord_bytes, theta=None, norms=None, mu=None):
        """``theta``: the model's parameters, whose compiled zero_interval (the twin of the model's
        zero_gap) gives each coordinate's interval of s_i with gap 0 at a (None: nothing is ever
        proven); ``norms``: sqrt of each coordinate's centred squared norm; ``mu``: its mean (the
        intercept's share of s_i)."""
        self.gaps = np.asarray(gaps, dtype=np.float64)
        self.s = np.asarray(s, dtype=np.float64)
        self.coord_bytes = coord_bytes
        n = self.gaps.shape[0]
        # every coordinate's bytes when they are all the same (dense data), else 0: sums without a gather
        self.unit = int(coord_bytes[0]) if n and np.all(coord_bytes == coord_bytes[0]) else 0
        self.fresh = np.ones(n, dtype=bool)
        self.proven = np.zeros(n, dtype=bool)
        self._cursor = 0
        self.theta = theta
        self.norms = norms
        self.mu = None if mu is None or not np.any(mu) else np.abs(mu)
        self._mu = np.zeros(n) if self.mu is None else self.mu
        self.path = np.zeros(2)           # how far u has moved: (centred part, intercept part)
        self.at = np.zeros((n, 2))        # the path's length when each s_i was computed

    def stale(self):
        """Coordinates whose gap at the current state is unknown."""
        return np.flatnonzero(~(self.fresh | self.proven))

    def all_known(self):
        """Whether every gap at the current state is known exactly (computed or proven)."""
        return bool((self.fresh | self.proven).all())

    def estimate(self):
        """(sum of gaps, max |s_i|) over the memory: exact when every entry is known.
        (A proven entry's stale |s_i| is below l1, as its current one is: it never
        moves the rescaled certificate's max past l1.)"""
        return float(self.gaps.sum()), float(np.abs(self.s).max(initial=0.0))

    def bytes(self, coords):
        """The data bytes of ``coords``."""
        return self.unit * coords.shape[0] if self.unit else int(self.coord_bytes[coords].sum())

    def plan(self, budget_bytes):
        """The oldest stale coordinates whose data fits ``budget_bytes`` (at least one, when
        any is stale), in the order of a cursor that sweeps the coordinates."""
        stale = self.stale()
        if stale.shape[0] == 0:
            return stale
        start = int(np.searchsorted(stale, self._cursor))
        order = np.concatenate([stale[start:], stale[:start]])
        if self.unit:
            take = max(1, min(order.shape[0], int(budget_bytes // self.unit)))
        else:
            take = max(1, int(np.searchsorted(np.cumsum(self.coord_bytes[order]), budget_bytes, side="right")))
        chosen = order[:take]
        self._cursor = int(chosen[-1]) + 1
        tail = stale.shape[0] - start  # chosen in increasing order: the wrapped part first (no sort)
        return chosen if take <= tail else np.concatenate([stale[: take - tail], stale[start:]])

    def refresh(self, coords, gaps, s):
        """Gaps of ``coords`` computed at the state the fresh entries hold."""
        _write(coords, gaps, s, self.path, self.gaps, self.s, self.at, self.proven)

    def moved(self, coords, gaps, s, step=None, a=None, u_norm=0.0):
        """The state moved on: only ``coords`` (the block's gaps at the new state) are fresh.
        ``step``: how far u moved, (||du - mean(du)||, |sum(du) - d(shift)|) with an
        intercept, (||du||, 0) without (see :func:`dual_step`); then the stale coordinates
        at ``a`` = 0 that the bound proves get gap 0 (``u_norm``: ||u|| now, for s_i's
        rounding)."""
        if step is not None:
            self.path = self.path + step
        self.fresh[:] = False
        self.fresh[coords] = True
        self.proven[:] = False
        _write(coords, gaps, s, self.path, self.gaps, self.s, self.at, self.proven)
        if step is not None and self.theta is not None:
            # the stale coordinates, one compiled pass (NumPy's took ~0.45 ms a round for 15,000
            # of them, about a tenth of the dense SVM's round at memory_budget 0.25)
            _prove_stale(self.fresh, self.theta, a, self.s, self.norms, self._mu, self.path, self.at,
                         u_norm, self.proven, self.gaps)


@njit(nogil=True, cache=True)
def _write(coords, new_gaps, new_s, path, gaps, s, at, proven):
    """The gaps and s of ``coords`` computed when the dual path's length was ``path``, not proven
    (NumPy's four scatters: ~0.2 ms a round of the dense SVM's 5,000 at memory_budget 0.25)."""
    for j in range(coords.shape[0]):
        i = coords[j]
        gaps[i], s[i] = new_gaps[j], new_s[j]
        at[i, 0], at[i, 1] = path[0], path[1]
        proven[i] = False


@njit(nogil=True, cache=True)
def _proven(theta, a, s, norm, mu, path, at, u_norm, margin, rounding):
    """Whether one coordinate's gap is 0 now: its s (computed when the dual path's length was
    ``at``) stays inside the model's zero interval at a (solvers.glm.models.zero_interval) by more
    than how far it can have moved since (``path``: the length now), plus its rounding."""
    lo, hi = zero_interval(theta, a)
    if not lo <= hi:
        return False
    drift = norm * (path[0] - at[0] + rounding * u_norm)
    drift += mu * (path[1] - at[1])
    lo_margin = margin * abs(lo) if np.isfinite(lo) else 0.0
    hi_margin = margin * abs(hi) if np.isfinite(hi) else 0.0
    return s - drift >= lo + lo_margin and s + drift <= hi - hi_margin


@njit(nogil=True, cache=True)
def _prove_stale(fresh, theta, a, s, norms, mu, path, at, u_norm, proven, gaps):
    """Marks proven (gap 0) the coordinates not ``fresh`` whose gap the bound proves 0 now."""
    for i in range(fresh.shape[0]):
        if not fresh[i] and _proven(theta, a[i], s[i], norms[i], mu[i], path, at[i], u_norm, MARGIN, ROUNDING):
            proven[i] = True
            gaps[i] = 0.0


def dual_step(z_old, z_new, shift_old, shift_new, centred):
    """How far u = z - shift moved, as the bound on |ds_i| needs it (see GapMemory.moved):
    s_i = <A_i, z> - shift mu_i with shift = c m off (compiled: _step)."""
    step = np.zeros(2)
    _step(z_old, z_new, shift_old, shift_new, centred, step)
    return step


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def _step(z_old, z, shift_old, shift, centred, path):
    """dual_step added to ``path``; returns ||z|| (for s's rounding). Its sums reassociated: they
    vectorize (w8a's 49,749 samples: 82 -> 16 us; one add at a time waits on the last)."""
    m = z.shape[0]
    total = 0.0
    for k in range(m):
        total += z[k] - z_old[k]
    mean = total / m if centred else 0.0
    sq, zz = 0.0, 0.0
    for k in range(m):
        d = z[k] - z_old[k] - mean
        sq += d * d
        zz += z[k] * z[k]
    path[0] += np.sqrt(sq)
    if centred:
        path[1] += abs(total - (shift - shift_old))
    return np.sqrt(zz)
