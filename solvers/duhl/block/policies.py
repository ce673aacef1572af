"""Block selection policies: which coordinates the device holds next round (the Python loop's;
the compiled swap loop applies the same rules).

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

from solvers.duhl.block.gap_block import gap_block_coords
from solvers.kernels import cpu
from solvers.kernels.cache import compiled

_NO_ORDER = np.zeros(0, dtype=np.int64)


def stream(rng):
    """A xorshift state for :func:`solvers.kernels.cpu.shuffle`, drawn from ``rng`` (64 random bits,
    never 0: xorshift's fixed point): the epochs' orders and the random policy's blocks, the same in
    the Python and the compiled swap loop (a compiled call unboxes a Generator slowly, a state fast)."""
    return np.array([rng.bit_generator.random_raw() | 1], dtype=np.uint64)


def fill(order, coord_bytes, budget):
    """The longest prefix of ``order`` whose bytes fit in ``budget``."""
    used = np.cumsum(coord_bytes[order])
    return order[: int(np.searchsorted(used, budget, side="right"))]


@compiled
def fitting(order, start, coord_bytes, budget):
    """How many of the coordinates ``order`` (empty: start, start + 1, ... round robin) fit in
    ``budget`` bytes taken in turn: :func:`fill`'s prefix, without an array of n sums."""
    n = order.shape[0] if order.shape[0] else coord_bytes.shape[0]
    used, k = 0, 0
    while k < n:
        i = order[k] if order.shape[0] else (start + k) % n
        if used + coord_bytes[i] > budget:
            break
        used += coord_bytes[i]
        k += 1
    return k


class Policy:
    def __init__(self, name, coord_bytes, budget, sqnorm, rng):
        self.name = name
        self.coord_bytes = coord_bytes
        self.budget = budget
        self.sqnorm = sqnorm
        self.rng = rng
        self._picks = None  # the random policy's stream (see stream), drawn from rng when first used
        self.cursor = 0
        self._next = None  # the next block, when peek drew it ahead (random, importance)

    def _order(self, gap_memory, resident_mask):
        """Every coordinate, in the priority order of a policy but gap for the next block."""
        n = self.coord_bytes.shape[0]
        if self.name == "sequential":
            return np.roll(np.arange(n), -self.cursor)
        if self.name == "random":
            if self._picks is None:
                self._picks = stream(self.rng)
            order = np.arange(n)
            cpu.shuffle(order, self._picks)
            return order
        # Efraimidis-Spirakis: keys log(U)/w give weighted sampling without replacement
        with np.errstate(divide="ignore", invalid="ignore"):
            keys = np.log(self.rng.random(n)) / self.sqnorm
        return np.argsort(-keys, kind="stable")

    def select(self, gap_memory, resident_mask):
        if self._next is not None:  # drawn ahead by peek
            chosen, self._next = self._next, None
        elif self.name == "gap":
            chosen = gap_block_coords(gap_memory, resident_mask, self.coord_bytes, self.budget)
        elif self.name == "sequential":  # the blocks of a sequential pass, without an order of all n
            n = self.coord_bytes.shape[0]
            k = fitting(_NO_ORDER, self.cursor, self.coord_bytes, self.budget)
            chosen = (self.cursor + np.arange(k)) % n
        elif self.name == "random":
            order = self._order(gap_memory, resident_mask)
            chosen = order[: fitting(order, 0, self.coord_bytes, self.budget)].copy()  # (the order of all n freed)
        else:
            chosen = fill(self._order(gap_memory, resident_mask), self.coord_bytes, self.budget)
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
            upcoming = fill(self._order(gap_memory, resident_mask), self.coord_bytes, self.budget)
            if self.name != "sequential":
                self._next = upcoming
            order = upcoming[~resident_mask[upcoming]]
        return fill(order, self.coord_bytes, budget)


def child(rng):
    """An independent stream for the selection policy, taken without advancing ``rng``: drawing a
    block ahead (prefetch) then changes no epoch's order."""
    try:
        return rng.spawn(1)[0]
    except (TypeError, ValueError):  # a generator without a SeedSequence
        return np.random.default_rng(rng.bit_generator.jumped().random_raw(1)[0])
