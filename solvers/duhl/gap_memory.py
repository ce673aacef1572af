"""The host's gap memory: every coordinate's last known gap (and s_i), fresh or stale.

A gap is *fresh* when it was computed at the current state (the device's block
at the end of each round, or a host pass over every coordinate), *stale* when it
is older. DuHL's selection reads the memory as it stands (the paper's stale gap
memory); a certificate needs every gap fresh. With the data on a slower tier the
host cannot refresh every stale gap each round, so :meth:`plan` picks the oldest
ones (a round-robin cursor over the stale coordinates) that fit a byte budget.
"""

import numpy as np


class GapMemory:
    def __init__(self, gaps, s, coord_bytes):
        self.gaps = np.asarray(gaps, dtype=np.float64)
        self.s = np.asarray(s, dtype=np.float64)
        self.coord_bytes = coord_bytes
        self.fresh = np.ones(self.gaps.shape[0], dtype=bool)
        self._cursor = 0

    def stale(self):
        return np.flatnonzero(~self.fresh)

    def all_fresh(self):
        return bool(self.fresh.all())

    def estimate(self):
        """(sum of gaps, max |s_i|) over the memory: exact when every entry is fresh."""
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

    def moved(self, coords, gaps, s):
        """The state moved on: only ``coords`` (the block's gaps at the new state) are fresh."""
        self.fresh[:] = False
        self.fresh[coords] = True
        self.gaps[coords] = gaps
        self.s[coords] = s
