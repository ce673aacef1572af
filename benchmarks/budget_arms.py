"""The full bench's arms at a quarter in RAM, ours alone: DuHL's gap block and blocks in storage order.

    python -m benchmarks.budget_arms                       # every problem, 3 seeds each
    python -m benchmarks.budget_arms --only lasso --only l1 --repeats 5

The problems, seeds and arms of ``make bench``'s "duhl 0.25" and "sequential 0.25" (the latter where
the suite runs it), without the all-resident arm and the peers: the quick way to see a change to the
block's selection. Each arm is warmed up first (excluded), then the median over ``--repeats`` seeds
of the seconds to a certified rel_gap 1e-6, and of the epochs. For before/after comparisons: run it
from each tree in turn.
"""

import argparse
import time

import numpy as np

from benchmarks.peers import problems, run_ours, time_to


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", action="append", default=None, metavar="TEXT",
                        help="run only the problems whose label contains this text (repeatable)")
    parser.add_argument("--max-time", type=float, default=120.0, help="seconds per run")
    args = parser.parse_args(argv)
    print("| problem | arm | median s to 1e-6 | epochs |\n| --- | --- | --- | --- |", flush=True)
    for label, build in problems(quick=False):
        if args.only and not any(text in label for text in args.only):
            continue
        try:
            problem, budget_arms, budgeted = build()
        except FileNotFoundError as missing:
            print(f"| {label} | skipped: {missing} | | |", flush=True)
            continue
        own = problem if budgeted is None else budgeted  # a classifier's side under a budget
        for arm in ["duhl 0.25"] + (["sequential 0.25"] if budget_arms else []):
            _, results = run_ours(own, arm, args.repeats, args.max_time)
            seconds = float(np.median([time_to(r.trace, 1e-6) for r in results]))
            epochs = float(np.median([r.epochs for r in results]))
            print(f"| {label} | {arm} | {seconds:.4f} | {epochs:.1f} |", flush=True)


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"({time.perf_counter() - start:.0f} s in all)")
