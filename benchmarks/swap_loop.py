"""DuHL with part of the data resident on the CPU: its round loops and settings, side by side.

    python -m benchmarks.swap_loop            # the peers benchmark's quick problems
    python -m benchmarks.swap_loop --repeats 5 --arms "all resident,routed,python auto"
    python -m benchmarks.swap_loop --full     # make bench's problems

Per problem of ``benchmarks.peers --quick`` (``--full``: of make bench): time to rel_gap 1e-6 (the
first certified row at or below it) with all data resident, and at memory_budget 0.25 (``--budget``)
with the Python loop (``loop="python"``, refresh "auto" and "all") and the compiled one
(``loop="compiled"``, refresh "all": the Python loop's iterates), what DuHL() picks ("routed"; with
local_epochs 1, 2, 3, 4, 8), and without the covariance updates (``gram=False``). Every arm is a
DuHL constructor: nothing in the solver is rebound. Medians of ``--repeats`` seeds, the arms
interleaved, after a warm-up per arm (Numba compilation), reported apart; with each time to 1e-6
(wall clock, from the trace) the CPU time of the whole solve. Where a round spends its time is
a sampling profiler's question (``py-spy record --native -- python -m benchmarks.swap_loop ...``).
"""

import argparse
import os
import statistics
import time

from threadpoolctl import threadpool_limits

from benchmarks.peers import problems, time_to
from solvers.duhl import DuHL

TARGET = 1e-6
ARMS = {  # name: DuHL's settings (memory_budget None: all resident; True: --budget)
    "all resident": dict(memory_budget=None),
    "python auto": dict(memory_budget=True, loop="python"),
    "python all": dict(memory_budget=True, loop="python", refresh="all"),
    "compiled": dict(memory_budget=True, loop="compiled", refresh="all"),
    "routed": dict(memory_budget=True),
    "routed 1": dict(memory_budget=True, local_epochs=1),
    "routed 2": dict(memory_budget=True, local_epochs=2),
    "routed 3": dict(memory_budget=True, local_epochs=3),
    "routed 4": dict(memory_budget=True, local_epochs=4),
    "routed 8": dict(memory_budget=True, local_epochs=8),
    "routed no gram": dict(memory_budget=True, gram=False),
    "all resident no gram": dict(memory_budget=None, gram=False),
}


def run(problem, arm, seed, max_epochs=100000, max_time=30.0, share=0.25):
    settings = dict(ARMS[arm])
    settings["memory_budget"] = share if settings["memory_budget"] else None
    return DuHL(tol=TARGET, max_epochs=max_epochs, max_time=max_time, random_state=seed, **settings).solve(problem)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=None, help="problems whose label contains this")
    parser.add_argument("--budget", type=float, default=0.25, help="memory_budget of the arms with part resident")
    parser.add_argument("--full", action="store_true", help="the full bench's problems (make bench), not --quick's")
    parser.add_argument("--arms", default=",".join(list(ARMS)[:5]),  # the local_epochs arms on request
                        help="comma-separated arms to run (the first is the ratios' base), e.g. 'all resident,routed'")
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"unknown arm(s) {unknown}; choose from {list(ARMS)}")
    print(f"load average {os.getloadavg()}, repeats {args.repeats}, memory_budget {args.budget}")
    print("| problem | arm | t_1e6 ms | x all resident | CPU ms, whole solve | x all resident | rounds | epochs "
          "| warm-up s |")
    print("|---|---|---|---|---|---|---|---|---|")
    with threadpool_limits(1):
        for label, build in problems(quick=not args.full):
            if args.only and args.only not in label:
                continue
            try:
                problem = build()[0]
            except FileNotFoundError as err:
                print(f"| {label} | skipped: {err} |")
                continue
            warm = {}
            try:
                for arm in arms:
                    t0 = time.perf_counter()
                    run(problem, arm, 0, max_epochs=2, share=args.budget)
                    warm[arm] = time.perf_counter() - t0
            except ValueError as err:  # e.g. a budget below one coordinate's data
                print(f"| {label} | skipped: {err} |")
                continue
            runs = {arm: [] for arm in arms}
            for seed in range(args.repeats):  # arms interleaved: a change of load hits them all
                for arm in arms:
                    c0 = time.process_time()
                    res = run(problem, arm, seed, share=args.budget)
                    runs[arm].append((res, time.process_time() - c0))
            base = None
            for arm, done in runs.items():
                t = statistics.median(time_to(r.trace[r.trace.certified == 1], TARGET) for r, _ in done)
                cpu = statistics.median(c for _, c in done)
                base = (t, cpu) if base is None else base
                rounds = statistics.median(r.n_rounds for r, _ in done)
                epochs = statistics.median(r.epochs for r, _ in done)
                print(f"| {label} | {arm} | {t * 1e3:.2f} | {t / base[0]:.2f} | {cpu * 1e3:.1f} | {cpu / base[1]:.2f} "
                      f"| {rounds:.0f} | {epochs:.1f} | {warm[arm]:.2f} |", flush=True)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
