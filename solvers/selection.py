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

POLICIES = ("gap", "random", "sequential", "importance")


def _fill(order, coord_bytes, budget):
    """The longest prefix of ``order`` whose bytes fit in ``budget``."""
    used = np.cumsum(coord_bytes[order])
    return order[: int(np.searchsorted(used, budget, side="right"))]


class Policy:
    def __init__(self, name, coord_bytes, budget, sqnorm, rng):
        if name not in POLICIES:
            raise ValueError(f"The 'selection' parameter must be one of {POLICIES}. Got {name!r} instead.")
        self.name = name
        self.coord_bytes = coord_bytes
        self.budget = budget
        self.sqnorm = sqnorm
        self.rng = rng
        self.cursor = 0

    def select(self, gap_memory, resident_mask):
        n = self.coord_bytes.shape[0]
        if self.name == "gap":
            # primary key: -gap (largest first); secondary: resident first
            order = np.lexsort((~resident_mask, -gap_memory))
        elif self.name == "sequential":
            order = np.roll(np.arange(n), -self.cursor)
        elif self.name == "random":
            order = self.rng.permutation(n)
        else:
            # Efraimidis-Spirakis: keys log(U)/w give weighted sampling without replacement
            with np.errstate(divide="ignore", invalid="ignore"):
                keys = np.log(self.rng.random(n)) / self.sqnorm
            order = np.argsort(-keys, kind="stable")
        chosen = _fill(order, self.coord_bytes, self.budget)
        if self.name == "sequential":
            self.cursor = (self.cursor + chosen.shape[0]) % n
        return chosen
