"""Progress bars (rich) for making data and running arms; silent off a terminal."""

from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

_STEPS = 1000  # bar resolution


def wanted(progress_flag: bool) -> bool:
    """Bars only when asked for and stderr is a terminal (not in CI logs or pipes)."""
    return bool(progress_flag) and sys.stderr.isatty()


def _bar(enabled: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                    TimeElapsedColumn(), console=Console(stderr=True), disable=not enabled,
                    refresh_per_second=4, transient=False)


@contextmanager
def data_progress(enabled: bool, description: str, in_bytes: bool = False) -> Iterator[Callable[[int, int], None]]:
    """Yields ``update(done, total)`` for tasks.data's makers; ``in_bytes``: a converter that counts
    the bytes of its file (the bar shows them and their rate, tasks.data.streams.byte_progress)."""
    if in_bytes:
        from tasks.data.streams import byte_progress

        with byte_progress(description, enabled) as update:
            yield update
        return
    with _bar(enabled) as bar:
        task = bar.add_task(description, total=None, info="")

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, info=f"{done}/{total}")

        yield update


@contextmanager
def arm_progress(enabled: bool, arm: str, target_rel_gap: float,
                 key: str = "rel_gap") -> Iterator[Callable[[dict], None]]:
    """Yields a solver callback; the bar fills as log(rel_gap) (or ``key``) approaches log(target)."""
    with _bar(enabled) as bar:
        task = bar.add_task(f"arm {arm}", total=_STEPS, info="")
        goal = max(-math.log10(target_rel_gap), 1e-12) if target_rel_gap > 0 else math.inf

        def update(row: dict) -> None:
            rel_gap = row[key]
            done = -math.log10(rel_gap) / goal if rel_gap > 0 else float(rel_gap == 0)  # NaN: 0
            bar.update(task, completed=int(_STEPS * min(max(done, 0.0), 1.0)),
                       info=f"{key} {rel_gap:.2e}  epoch {row['epoch']:.1f}")

        yield update
