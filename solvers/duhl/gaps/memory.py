"""The host's gap memory, the proofs that spare reads, the refresh plan and the certifier.

**The memory.** Every coordinate's last known gap (and s_i = <A_i, u>): *fresh* when computed at
the current state (the block's gaps at the end of each round, or a host pass), *stale* when older.
DuHL's selection reads the memory as it stands (the paper's stale gap memory); a certificate
needs every gap exact at one state.

**Proofs.** A coordinate at a bound has gap exactly 0 while s_i stays in an interval (the model's
``zero_interval``: |s_i| <= l1 at a_i = 0 for the Lasso and elastic net; a margin s_i >= 1 at
a_i = 0, s_i <= 1 at a_i = C for the hinge SVM), and s_i moves with the dual vector u by at most
||A_i|| times how far u moved since s_i was computed (Cauchy-Schwarz, as in gap safe screening:
Fercoq, Gramfort & Salmon 2015). The memory tracks the length of the path u travelled; a stale
coordinate whose last s_i stays in its interval by more than that bound has gap 0 at the current
state, exactly what a read would give (:func:`proven`, the one proof every loop uses). Near the
optimum most of a sparse model's coordinates need no reads at all.

**The refresh plan and the certifier** (:class:`RefreshPlan`, one record both the Python and the
compiled loop use): a round that does not certify refreshes the oldest stale gaps whose data
fits a byte budget (a cursor sweeps the coordinates), and its row is the memory's estimate; a
round certifies (refreshes every stale gap: with the fresh ones, the exact gap of its start
state) when no gap is stale, on a doubling schedule of rounds (not on disk, where each would be a
read of the stale data), and when the estimate reaches the tolerance after the refreshes have
covered the stale data once (so failed attempts cost at most half the reads).
"""

import numpy as np

from solvers.glm.models import zero_interval
from solvers.kernels.cache import compiled

# s_i +- its bound must stay this far inside the interval: s_i's own rounding never decides a proof
MARGIN = 1e-9
ROUNDING = 1e-12


# ----------------------------------------------------------------------------- proofs ---
@compiled(inline="always")
def proven(theta, a, s, norm, mu, path, at, u_norm):
    """Whether one coordinate's gap is 0 now: its ``s`` (computed when the dual path's length was
    ``at``) stays inside the model's zero interval at ``a`` by more than how far it can have moved
    since (``path``: the length now; ``norm``: ||A_i|| centred; ``mu``: |mu_i|, the intercept's
    share), plus its rounding (``u_norm``: the size of u)."""
    lo, hi = zero_interval(theta, a)
    if not lo <= hi:
        return False
    drift = norm * (path[0] - at[0] + ROUNDING * u_norm)
    drift += mu * (path[1] - at[1])
    lo_margin = MARGIN * abs(lo) if np.isfinite(lo) else 0.0
    hi_margin = MARGIN * abs(hi) if np.isfinite(hi) else 0.0
    return s - drift >= lo + lo_margin and s + drift <= hi - hi_margin


@compiled(fastmath={"reassoc", "contract"})
def dual_step(z_old, z, shift_old, shift, centred, path):
    """How far u = z - shift (s_i = <A_i, z> - shift mu_i) moved, added to ``path``: (||du -
    mean(du)||, |sum(du) - d(shift)|) with an intercept (``centred``), (||du||, 0) without.
    Returns ||z|| (for s's rounding). The sums reassociated: they vectorize."""
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


@compiled
def write_gaps(coords, new_gaps, new_s, mark, gaps, s, stamps, proven_mask):
    """The gaps and s of ``coords``, computed when the dual path's length was the mark ``mark``."""
    for j in range(coords.shape[0]):
        i = coords[j]
        gaps[i], s[i] = new_gaps[j], new_s[j]
        if stamps.shape[0]:
            stamps[i] = mark
        proven_mask[i] = False


@compiled
def prove_stale(fresh, theta, a, s, sqnorm, mu, path, marks, stamps, u_norm, proven_mask, gaps):
    """Marks proven (gap 0) the coordinates not ``fresh`` whose gap the bound proves 0 now
    (``mu`` empty: no intercept)."""
    for i in range(fresh.shape[0]):
        if not fresh[i] and proven(theta, a[i], s[i], np.sqrt(sqnorm[i]), mu[i] if mu.shape[0] else 0.0, path,
                                   marks[stamps[i]], u_norm):
            proven_mask[i] = True
            gaps[i] = 0.0


class GapMemory:
    """Every coordinate's last known gap and s_i, and which are fresh, proven or stale.

    What it keeps per coordinate is most of what a solve from disk keeps beside the data
    (:func:`solvers.duhl.loops.python.host_state_bytes`), so the dual path's lengths are kept once
    per move (``marks``) and each s_i holds the index of its mark (4 bytes, not the two lengths'
    16), and only for models that can prove gaps."""

    def __init__(self, gaps, s, coord_bytes, theta=None, sqnorm=None, mu=None):
        """``theta``: the model's parameters (None: nothing is ever proven); ``sqnorm``: each
        coordinate's centred squared norm; ``mu``: its mean (the intercept's share of s_i)."""
        self.gaps = np.asarray(gaps, dtype=np.float64)
        self.s = np.asarray(s, dtype=np.float64)
        self.coord_bytes = coord_bytes
        n = self.gaps.shape[0]
        # every coordinate's bytes when they are all the same (dense data), else 0: sums without a gather
        self.unit = int(coord_bytes[0]) if n and np.all(coord_bytes == coord_bytes[0]) else 0
        self.fresh = np.ones(n, dtype=bool)
        self.proven = np.zeros(n, dtype=bool)
        self.theta = theta
        self.sqnorm = sqnorm
        self.mu = None if mu is None or not np.any(mu) else np.abs(mu)
        self.path = np.zeros(2)           # how far u has moved: (centred part, intercept part)
        self.marks = np.zeros((16, 2))    # the path's length at each move: marks[:self.mark + 1]
        self.mark = 0
        # which mark each s_i was computed at (int32 while there are fewer moves than 2^31)
        self.stamps = np.zeros(n if theta is not None else 0, dtype=np.int32)

    def stale(self):
        """Coordinates whose gap at the current state is unknown, in coordinate order."""
        return np.flatnonzero(~(self.fresh | self.proven))

    def all_known(self):
        """Whether every gap at the current state is known exactly (computed or proven)."""
        return bool((self.fresh | self.proven).all())

    def estimate(self):
        """(sum of gaps, max |s_i|) over the memory: exact when every entry is known. (A proven
        entry's stale |s_i| is below l1, as its current one is: it never moves the rescaled
        certificate's max past l1.)"""
        s_max = np.maximum(self.s.max(initial=0.0), -self.s.min(initial=0.0))  # max |s_i| without a copy
        return float(self.gaps.sum()), float(s_max)

    def bytes(self, coords):
        """The data bytes of ``coords``."""
        return self.unit * coords.shape[0] if self.unit else int(self.coord_bytes[coords].sum())

    def refresh(self, coords, gaps, s):
        """Gaps of ``coords`` computed at the state the fresh entries hold."""
        write_gaps(coords, gaps, s, self.mark, self.gaps, self.s, self.stamps, self.proven)

    def moved(self, coords, gaps, s, step=None, a=None, u_norm=0.0):
        """The state moved on: only ``coords`` (the block's gaps at the new state) are fresh.
        ``step``: how far u moved (see :func:`dual_step`); then the stale coordinates that the
        bound proves get gap 0 (``u_norm``: ||z|| now, for s_i's rounding)."""
        if step is not None:
            self.path = self.path + step
            if self.stamps.shape[0]:
                self._new_mark()
        self.fresh[:] = False
        self.fresh[coords] = True
        self.proven[:] = False
        write_gaps(coords, gaps, s, self.mark, self.gaps, self.s, self.stamps, self.proven)
        if step is not None and self.theta is not None:
            prove_stale(self.fresh, self.theta, a, self.s, self.sqnorm, self._mu_abs(), self.path, self.marks,
                        self.stamps, u_norm, self.proven, self.gaps)

    def _new_mark(self):
        """The path's length now, as the next mark."""
        self.mark += 1
        if self.mark == self.marks.shape[0]:
            self.marks = np.concatenate([self.marks, np.zeros_like(self.marks)])
        self.marks[self.mark] = self.path

    def _mu_abs(self):
        return np.zeros(0) if self.mu is None else self.mu


# ------------------------------------------------------------- refresh plan and certifier ---
PLAN = np.dtype([
    ("planning", np.bool_),     # refreshes planned by bytes (else every round certifies: refresh "all")
    ("on_disk", np.bool_),      # no doubling schedule of certificates (each would read the stale data)
    ("cursor", np.int64),       # the sweep's next coordinate
    ("wait", np.float64),       # the schedule's last wait, in rounds
    ("next_round", np.float64),  # the schedule's next certified round
    ("refreshed", np.float64),  # bytes refreshed since the last certificate
    ("estimate", np.float64),   # the last row's gap (certified or the memory's estimate)
    ("budget", np.float64),     # the bytes the next plan may refresh
])


def new_plan(planning, on_disk=False):
    """A fresh plan record: the first scheduled certificate at round 2, no estimate yet."""
    state = np.zeros(1, dtype=PLAN).view(np.recarray)[0]
    state.planning, state.on_disk = planning, on_disk
    state.wait, state.next_round, state.estimate = 2.0, 2.0, np.inf
    return state


@compiled(inline="always")
def data_bytes(coords, coord_bytes):
    """The data bytes of ``coords``."""
    total = 0
    for j in range(coords.shape[0]):
        total += coord_bytes[coords[j]]
    return total


@compiled(inline="always")
def certify_due(plan, rnd, stale, coord_bytes, tol_abs):
    """Whether round ``rnd`` refreshes every ``stale`` gap: a certified row."""
    if not plan.planning or stale.shape[0] == 0 or (rnd >= plan.next_round and not plan.on_disk):
        return True
    return plan.estimate <= tol_abs and plan.refreshed >= data_bytes(stale, coord_bytes)


@compiled(inline="always")
def certified(plan, rnd):
    """A certified row at round ``rnd``: the next scheduled one twice as many rounds on."""
    plan.refreshed = 0.0
    plan.wait *= 2.0
    plan.next_round = rnd + plan.wait


@compiled
def plan_refresh(stale, coord_bytes, budget, plan, todo):
    """The oldest ``stale`` gaps (``stale`` in coordinate order, not empty) whose data fits
    ``budget`` (at least one), from the cursor on, wrapping, into ``todo``; their count."""
    n_stale = stale.shape[0]
    start = np.searchsorted(stale, plan.cursor)
    used, take = 0, 0
    while take < n_stale:
        i = stale[(start + take) % n_stale]
        if take > 0 and used + coord_bytes[i] > budget:
            break
        used += coord_bytes[i]
        todo[take] = i
        take += 1
    plan.cursor = todo[take - 1] + 1
    plan.refreshed += used
    return take


class RefreshPlan:
    """The Python loop's face of the plan record (the compiled loop uses the record itself)."""

    def __init__(self, planning, on_disk=False):
        self.state = new_plan(planning, on_disk)

    def due(self, rnd, estimate, stale, coord_bytes, tol_abs):
        self.state.estimate = estimate
        return bool(certify_due(self.state, rnd, stale, coord_bytes, tol_abs))

    def plan(self, stale, coord_bytes, budget):
        """The stale gaps a round that does not certify refreshes (at least one), sorted."""
        if stale.shape[0] == 0:
            return stale
        todo = np.empty(stale.shape[0], dtype=np.int64)
        return np.sort(todo[: plan_refresh(stale, coord_bytes, float(budget), self.state, todo)])

    def certified(self, rnd):
        certified(self.state, rnd)
