"""When the next expensive step is due: the rounds a linear rate predicts to the tolerance.

Coordinate descent converges linearly, so the gaps of two certificates give a rate per round
and, from it, the rounds left to ``tol``. Every schedule of the solver asks this one helper:
when the all-resident loop's next global gap pass is due, whether the Gram matrix pays, when
the next certified row of the Gram loop is due, and when a GPU's next gap pass is.
"""

import numpy as np

from solvers.kernels.cache import compiled


@compiled(inline="always")
def rounds_left(last_round, last_gap, rounds, gap, tol):
    """The rounds from ``rounds`` until the gap reaches ``tol`` at the rate from (last_round,
    last_gap) to (rounds, gap); NaN when there is no rate (the gap did not fall, or no round
    passed)."""
    if not (0.0 < gap < last_gap) or rounds <= last_round:
        return np.nan
    per_round = np.log(gap / last_gap) / (rounds - last_round)
    return np.log(max(tol, 1e-300) / gap) / per_round


@compiled
def next_pass(schedule, rounds, gap, tol):
    """With every coordinate visited, the round of the next global gap pass: half the rounds
    the rate predicts, at most twice the last wait (and 64 rounds), so a run overshoots its
    target by a bounded share of its rounds. ``schedule`` = [round and gap of the last pass,
    round of the next], updated."""
    last_round, last_gap = schedule[0], schedule[1]
    wait = 1.0
    left = rounds_left(last_round, last_gap, rounds, gap, tol)
    if left == left:
        wait = min(max(0.5 * left, 1.0), 2.0 * (rounds - last_round), 64.0)
    schedule[0], schedule[1], schedule[2] = rounds, gap, rounds + wait


class GapSchedule:
    """When to pay for a gap pass while all data is resident on a GPU (no selection needs
    the gaps): every ``every`` rounds, or ("auto") half the rounds the rate predicts to the
    target, at most twice the last wait and 64 rounds."""

    def __init__(self, tol_abs, every="auto"):
        self.tol_abs = tol_abs
        self.every = every
        self.history = []
        self.next_round = 0

    def checked(self, rnd, gap):
        self.history.append((rnd, gap))
        wait = 1
        if self.every != "auto":
            wait = self.every
        elif len(self.history) >= 2:
            (r1, g1), (r2, g2) = self.history[-2:]
            if 0 < g2 < g1 and self.tol_abs > 0:
                wait = int(np.clip(0.5 * rounds_left(r1, g1, r2, g2, self.tol_abs), 1, 2 * (r2 - r1)))
            elif 0 < g2 < g1:
                wait = 2 * (r2 - r1)
        self.next_round = rnd + min(wait, 64)
