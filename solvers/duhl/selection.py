"""Block selection policies: which coordinates the device holds next round.

Each policy returns the next resident set, filling the byte budget in its own
priority order:

- ``gap`` (DuHL): largest gap memory first; on ties resident coordinates stay.
- ``sequential``: storage order, round robin (how data that does not fit is
  usually streamed).
- ``random``: a fresh uniformly random block each round.
- ``importance``: a random block drawn without replacement with probability
  proportional to ||A_i||^2, fixed over time (static importance sampling).
"""

import numpy as np


def _fill(order, coord_bytes, budget):
    """The longest prefix of ``order`` whose bytes fit in ``budget``."""
    used = np.cumsum(coord_bytes[order])
    return order[: int(np.searchsorted(used, budget, side="right"))]


def gap_block(gaps, resident, coord_bytes, budget, guess=0):
    """The gap policy's block: the longest prefix of np.lexsort((~resident, -gaps)) (largest
    gap first, NaN last, resident first on ties, then by index) that fits ``budget``, with
    only a prefix of that order sorted: the gaps above the size-th largest one (size about
    ``guess`` coordinates, doubled while the block does not end inside it), then the ties
    at it. A full lexsort was 1.5 ms of a 3.4 ms round on w8a's dual SVM. The compiled loop
    (solvers.duhl.compiled_parts._select) picks the same block, in the same order."""
    n = gaps.shape[0]
    size = min(n, max(int(guess), 16))
    while 2 * size < n:
        threshold = -np.partition(-gaps, size - 1)[size - 1]
        if np.isnan(threshold):
            break
        above = np.flatnonzero(gaps > threshold)
        ties = np.flatnonzero(gaps == threshold)
        order = np.concatenate([above[np.lexsort((~resident[above], -gaps[above]))],
                                ties[np.argsort(~resident[ties], kind="stable")]])
        chosen = _fill(order, coord_bytes, budget)
        if chosen.shape[0] < order.shape[0] or order.shape[0] == n:
            return chosen
        size *= 2
    return _fill(np.lexsort((~resident, -gaps)), coord_bytes, budget)


class Policy:
    def __init__(self, name, coord_bytes, budget, sqnorm, rng):
        self.name = name
        self.coord_bytes = coord_bytes
        self.budget = budget
        self.sqnorm = sqnorm
        self.rng = rng
        self.cursor = 0
        self._next = None  # the next block, when peek drew it ahead (random, importance)
        # coordinates of a mean size that fit: the first guess of the gap policy's block size
        self._guess = int(1.25 * budget * coord_bytes.shape[0] / max(1, int(coord_bytes.sum()))) + 16

    def _order(self, gap_memory, resident_mask):
        """Every coordinate, in the policy's priority order for the next block."""
        n = self.coord_bytes.shape[0]
        if self.name == "gap":
            # primary key: -gap (largest first); secondary: resident first
            return np.lexsort((~resident_mask, -gap_memory))
        if self.name == "sequential":
            return np.roll(np.arange(n), -self.cursor)
        if self.name == "random":
            return self.rng.permutation(n)
        # Efraimidis-Spirakis: keys log(U)/w give weighted sampling without replacement
        with np.errstate(divide="ignore", invalid="ignore"):
            keys = np.log(self.rng.random(n)) / self.sqnorm
        return np.argsort(-keys, kind="stable")

    def select(self, gap_memory, resident_mask):
        if self._next is not None:  # drawn ahead by peek
            chosen, self._next = self._next, None
        elif self.name == "gap":  # the next block's size is likely close to the last one's
            chosen = gap_block(gap_memory, resident_mask, self.coord_bytes, self.budget, self._guess)
            self._guess = chosen.shape[0] + chosen.shape[0] // 4 + 16
        else:
            chosen = _fill(self._order(gap_memory, resident_mask), self.coord_bytes, self.budget)
        if self.name == "sequential":
            self.cursor = (self.cursor + chosen.shape[0]) % self.coord_bytes.shape[0]
        return chosen

    def peek(self, gap_memory, resident_mask, budget):
        """Coordinates not resident now that the next select will likely bring in,
        filling ``budget`` bytes (what to prefetch). Exact for sequential, random
        and importance (their next block is drawn here and used by select); for
        gap, the largest gap memories now (select will see fresher gaps)."""
        if self.name == "gap":
            outside = np.flatnonzero(~resident_mask)
            order = outside[np.argsort(-gap_memory[outside], kind="stable")]
        else:
            upcoming = _fill(self._order(gap_memory, resident_mask), self.coord_bytes, self.budget)
            if self.name != "sequential":
                self._next = upcoming
            order = upcoming[~resident_mask[upcoming]]
        return _fill(order, self.coord_bytes, budget)
