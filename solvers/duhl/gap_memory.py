"""The host's gap memory: every coordinate's last known gap (and s_i), fresh, proven or stale.

A gap is *fresh* when it was computed at the current state (the device's block
at the end of each round, or a host pass over every coordinate), *stale* when it
is older. DuHL's selection reads the memory as it stands (the paper's stale gap
memory); a certificate needs every gap exact at one state. With the data on a
slower tier the host cannot refresh every stale gap each round, so :meth:`plan`
picks the oldest ones (a round-robin cursor over the stale coordinates) that fit
a byte budget.

*Proven* gaps need no data at all. A coordinate at a bound has gap exactly 0 while
s_i stays in an interval (the model's ``zero_gap``: |s_i| <= l1 at a_i = 0 for the
Lasso and elastic net; a margin s_i >= 1 at a_i = 0, s_i <= 1 at a_i = C for the
hinge SVM), and s_i = <A_i, u> moves with the dual vector u by at most ||A_i||
times how far u moved since s_i was computed (Cauchy-Schwarz, as in gap safe
screening: Fercoq, Gramfort & Salmon 2015). The memory tracks the length of the
path u travelled (:meth:`moved` is told each step); a stale coordinate whose last
s_i stays in its interval by more than that bound has gap 0 at the current state,
exactly what a read would give. Certificates and refreshes read only the
coordinates nothing proves: on disk, most of a sparse model's columns after the
first pass.
"""

import numpy as np

# s_i +- its bound must stay this far inside the interval: s_i's own rounding never decides a proof
MARGIN = 1e-9
ROUNDING = 1e-12


class GapMemory:
    def __init__(self, gaps, s, coord_bytes, zero_gap=None, norms=None, mu=None):
        """``zero_gap(a)``: each coordinate's interval (lo, hi) of s_i with gap 0 at a (None:
        nothing is ever proven); ``norms``: sqrt of each coordinate's centred squared norm;
        ``mu``: its mean (the intercept's share of s_i)."""
        self.gaps = np.asarray(gaps, dtype=np.float64)
        self.s = np.asarray(s, dtype=np.float64)
        self.coord_bytes = coord_bytes
        n = self.gaps.shape[0]
        self.fresh = np.ones(n, dtype=bool)
        self.proven = np.zeros(n, dtype=bool)
        self._cursor = 0
        self.zero_gap = zero_gap
        self.norms = norms
        self.mu = None if mu is None or not np.any(mu) else np.abs(mu)
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

    def plan(self, budget_bytes):
        """The oldest stale coordinates whose data fits ``budget_bytes`` (at least one, when
        any is stale), in the order of a cursor that sweeps the coordinates."""
        stale = self.stale()
        if stale.shape[0] == 0:
            return stale
        start = int(np.searchsorted(stale, self._cursor))
        order = np.concatenate([stale[start:], stale[:start]])
        used = np.cumsum(self.coord_bytes[order])
        take = max(1, int(np.searchsorted(used, budget_bytes, side="right")))
        chosen = order[:take]
        self._cursor = int(chosen[-1]) + 1
        return np.sort(chosen)

    def refresh(self, coords, gaps, s):
        """Gaps of ``coords`` computed at the state the fresh entries hold."""
        self.gaps[coords] = gaps
        self.s[coords] = s
        self.at[coords] = self.path
        self.proven[coords] = False

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
        self.gaps[coords] = gaps
        self.s[coords] = s
        self.at[coords] = self.path
        if step is not None and self.zero_gap is not None:
            self.prove(self.stale(), a, u_norm)

    def prove(self, coords, a, u_norm):
        """Mark the coordinates of ``coords`` (stale) whose gap the bound proves 0 now."""
        lo, hi = self.zero_gap(a[coords])
        candidate = lo <= hi
        coords, lo, hi = coords[candidate], lo[candidate], hi[candidate]
        if coords.shape[0] == 0:
            return
        # how far s_i may have moved, plus its rounding when it was computed (dot products of m terms)
        drift = self.norms[coords] * (self.path[0] - self.at[coords, 0] + ROUNDING * u_norm)
        if self.mu is not None:
            drift += self.mu[coords] * (self.path[1] - self.at[coords, 1])
        s = self.s[coords]
        ok = ((s - drift >= lo + MARGIN * np.abs(np.where(np.isfinite(lo), lo, 0.0)))
              & (s + drift <= hi - MARGIN * np.abs(np.where(np.isfinite(hi), hi, 0.0))))
        done = coords[ok]
        self.proven[done] = True
        self.gaps[done] = 0.0


def dual_step(z_old, z_new, shift_old, shift_new, centred):
    """How far u = z - shift moved, as the bound on |ds_i| needs it (see GapMemory.moved):
    s_i = <A_i, z> - shift mu_i with shift = c m off."""
    dz = z_new - z_old
    if not centred:
        return np.array([norm(dz), 0.0])
    total = float(dz.sum())
    return np.array([norm(dz - total / dz.shape[0]), abs(total - (shift_new - shift_old))])


def norm(x):
    """||x||_2 without BLAS (a BLAS call from this thread waits on its pool's spinning
    threads while the host thread computes gaps: 11 ms for 20,000 numbers, measured)."""
    return float(np.sqrt(np.square(x).sum()))
