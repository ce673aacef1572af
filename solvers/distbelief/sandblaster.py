"""Sandblaster's load balancing as a state machine: work units, backups, reissues.

A full-batch gradient is cut into ``n_units`` row ranges. Units are handed to
workers as they free up; once none is left to hand out, an idle worker gets a
*backup* copy of a unit still running elsewhere. The first attempt to finish
wins; the others are to be cancelled and are never counted. An attempt whose
worker is lost is dropped and, if no other attempt of its unit is running,
the unit goes back to the front of the queue (a *reissue*).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import numpy as np


def unit_ranges(n_rows: int, n_units: int) -> List[Tuple[int, int]]:
    """Contiguous row ranges [start, stop) of (almost) equal size."""
    bounds = np.linspace(0, n_rows, min(n_units, n_rows) + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


@dataclass
class UnitScheduler:
    n_units: int
    backups: bool = True
    pending: deque = field(default_factory=deque)
    running: Dict[int, Tuple[int, str]] = field(default_factory=dict)  # attempt -> (unit, worker)
    done: Set[int] = field(default_factory=set)
    n_backups: int = 0  # backup attempts started
    n_cancelled: int = 0  # attempts that lost the race
    n_reissued: int = 0  # units put back after their worker was lost

    def __post_init__(self):
        self.pending = deque(range(self.n_units))
        self._ids = itertools.count()

    @property
    def finished(self) -> bool:
        return len(self.done) == self.n_units

    def attempts_of(self, unit: int) -> List[int]:
        return [a for a, (u, _) in self.running.items() if u == unit]

    def busy_workers(self) -> Set[str]:
        return {w for _, w in self.running.values()}

    def assign(self, worker: str) -> Optional[Tuple[int, int, bool]]:
        """(attempt, unit, is_backup) for an idle worker, or None (nothing to do)."""
        if self.pending:
            unit, backup = self.pending.popleft(), False
        elif self.backups:
            # The oldest running unit with a single attempt, not on this worker.
            candidates = [u for a, (u, w) in sorted(self.running.items())
                          if w != worker and u not in self.done and len(self.attempts_of(u)) == 1]
            if not candidates:
                return None
            unit, backup = candidates[0], True
            self.n_backups += 1
        else:
            return None
        attempt = next(self._ids)
        self.running[attempt] = (unit, worker)
        return attempt, unit, backup

    def complete(self, attempt: int) -> Tuple[int, bool, List[int]]:
        """(unit, counted, attempts to cancel): counted is True for the first attempt only."""
        unit, _ = self.running.pop(attempt)
        if unit in self.done:
            return unit, False, []
        self.done.add(unit)
        losers = self.attempts_of(unit)
        for a in losers:
            del self.running[a]
        self.n_cancelled += len(losers)
        return unit, True, losers

    def fail(self, attempt: int) -> None:
        """The attempt's worker was lost (or the attempt errored)."""
        unit, _ = self.running.pop(attempt)
        if unit not in self.done and not self.attempts_of(unit):
            self.pending.appendleft(unit)
            self.n_reissued += 1
