"""DuHL at memory_budget 0.25 on the CPU: the Python round loop against the compiled one.

    python -m pipelines.bench.swap_loop            # the peers benchmark's quick problems
    python -m pipelines.bench.swap_loop --repeats 5
    python -m pipelines.bench.swap_loop --parts --arms "all resident,routed"
    python -m pipelines.bench.swap_loop --full --parts --arms "all resident,routed"   # make bench's problems

Side by side in one run, per problem of ``pipelines.bench.peers --quick`` (``--full``: of make bench): time to
rel_gap 1e-6 (the first certified row at or below it) with all data resident, and
at memory_budget 0.25 with the Python loop (refresh "auto"; and refresh "all": the same
iterates as the compiled loop's "all") and the compiled loop (solvers.duhl.compiled_swaps)
with refresh "all", whether or not DuHL would route there by itself; the routed arm is what
DuHL() picks (on the CPU in RAM: the compiled loop; "routed 1", "routed 2", 3, 4, 8:
the same with that local_epochs; "all resident data passes": without the covariance
updates, solvers.duhl.covariance). Medians of --repeats
seeds, the arms interleaved, after a warm-up (Numba compilation) per arm, reported
apart; with each time to 1e-6 (wall clock, from the trace) the CPU time of the whole
solve (the process's: less sensitive to a loaded machine, includes the trace's
post-processing).

``--parts`` adds where the routed arm's rounds spend their time when it runs the compiled
loop: wall time by part (solvers.duhl.compiled_swaps.PARTS: the kernels, and outside them
the selection, the block's lists, the round's set-up and other bookkeeping), per round, medians over the seeds, in
separate runs after the timed ones; the clock is the CPU's time-stamp counter (~10 ns a
reading), whose cost per lap is measured apart and taken out. Where DuHL routes to the
Python loop, its rounds are split by the thread's CPU time instead: the main thread's time
in the kernels (the epochs and their shuffles, the gap passes, the swaps' copies: the calls
of solvers.kernels.cpu from the device, the resident set and the problem; as the compiled
loop's clock has them, a row's certificate, Problem.certify, and the gap memory's proofs),
and its other CPU time (outside the kernels: selection, bookkeeping, NumPy's work on lists
and masks), inside the round loop, not the solve's set-up; waiting for the host thread's
refresh (a kernel too, run beside the epochs) is neither.
"""

import argparse
import contextlib
import os
import statistics
import threading
import time
import types

from threadpoolctl import threadpool_limits

import numpy as np
from numba import njit

import solvers.duhl.compiled_parts as compiled_parts
import solvers.duhl.compiled_swaps as compiled_swaps
import solvers.duhl.devices as devices
import solvers.duhl.gap_memory as gap_memory
import solvers.duhl.inmemory as inmemory
import solvers.duhl.resident as resident
import solvers.glm.problems as glm_problems
import solvers.duhl.solver as duhl_solver
import solvers.duhl.swaps as swaps
from pipelines.bench.peers import problems, time_to
from solvers.duhl import gram
from solvers.duhl.compiled_parts import _clock
from solvers.duhl.compiled_swaps import _lap
from solvers.duhl.solver import DuHL

TARGET = 1e-6
ARMS = {  # name: (memory_budget (None, or --budget), refresh, which loop: None lets DuHL route, local_epochs)
    "all resident": (None, "auto", None, "auto"),
    "python auto": (0.25, "auto", False, "auto"),
    "python all": (0.25, "all", False, "auto"),
    "compiled": (0.25, "all", True, "auto"),
    "routed": (0.25, "auto", None, "auto"),  # DuHL's defaults (local_epochs "auto": swaps.AUTO_EPOCHS)
    "routed 1": (0.25, "auto", None, 1),
    "routed 2": (0.25, "auto", None, 2),
    "routed 3": (0.25, "auto", None, 3),
    "routed 4": (0.25, "auto", None, 4),
    "routed 8": (0.25, "auto", None, 8),
    "routed data epochs": (0.25, "auto", None, "auto"),  # the block's epochs read it (gram.GRAM_EPOCHS off)
    "all resident data passes": (None, "auto", None, "auto"),  # no covariance updates (inmemory.COVARIANCE off)
}


def run(problem, arm, seed, max_epochs=100000, max_time=30.0, share=0.25):
    budget, refresh, compiled, local_epochs = ARMS[arm]
    budget = budget and share
    routes, gram_epochs, covariance = duhl_solver.routes, gram.GRAM_EPOCHS, inmemory.COVARIANCE
    if compiled is not None:
        duhl_solver.routes = lambda *args: compiled
    gram.GRAM_EPOCHS = 0 if arm == "routed data epochs" else gram_epochs
    inmemory.COVARIANCE = covariance and arm != "all resident data passes"
    try:
        return DuHL(memory_budget=budget, refresh=refresh, local_epochs=local_epochs, tol=TARGET,
                    max_epochs=max_epochs, max_time=max_time, random_state=seed).solve(problem)
    finally:
        duhl_solver.routes, gram.GRAM_EPOCHS, inmemory.COVARIANCE = routes, gram_epochs, covariance


@njit
def _lap_cost(laps):
    """Cycles a lap of the compiled loop's clock costs (a reading of the counter and an add)."""
    clock = np.zeros(len(compiled_swaps.PARTS))
    t0 = t = _clock(1)
    for _ in range(laps):
        t = _lap(clock, 0, t, 1)
    return (t - t0) / laps


# clock readings a round takes per part (compiled_swaps.run_swap_slice): "other" the reading that starts the
# round, the rest a lap each but "block lists", two (the stale gaps' list at the round's start, the block's
# after the selection; the first round has one: ~10 ns, one lap, over a whole solve)
LAPS = np.array([1, 1, 1, 1, 1, 1, 2, 1])


def round_parts(problem, repeats, share):
    """The routed arm's compiled rounds: wall seconds per round by part (medians over seeds), the
    clock's own cost taken out (each lap's, measured apart); "other" is the compiled calls' time
    the other parts do not cover (the loop's bookkeeping, its deadline). None when DuHL routes to
    the Python loop. With the lap's cost in ns."""
    hz = compiled_parts.cycles_per_second()
    _lap_cost(10)
    lap = min(_lap_cost(100000) for _ in range(5))
    per = []
    for seed in range(repeats):
        compiled_swaps.CLOCK = np.zeros(len(compiled_swaps.PARTS))
        try:
            res = run(problem, "routed", seed, share=share)
        finally:
            clock, compiled_swaps.CLOCK = compiled_swaps.CLOCK, None
        if clock[-1] == 0:
            return None, lap / hz
        rounds = max(1, res.n_rounds)
        parts = clock[:-1] / rounds - LAPS * lap
        total = clock[-1] / rounds - LAPS.sum() * lap
        parts[5] = total - (parts.sum() - parts[5])
        per.append(np.append(parts, total) / hz)
    return np.median(per, axis=0), lap / hz


# the kernels the Python loop calls through these modules' ``cpu`` (solvers.kernels.cpu)
KERNELS = ("scd_epoch_dense", "scd_epoch_sparse", "gaps_dense", "gaps_sparse", "copy_csr_rows", "shuffle")
COPIES = ("upload_rows", "upload_into", "gather")  # the CPU device's copies (NumPy's)
# the gap memory's proofs, compiled passes over the samples and the coordinates (the compiled loop's clock
# has them in its part "block gaps"), where the Python loop calls them
PROOFS = {"_step": swaps, "_prove_stale": gap_memory}


@contextlib.contextmanager
def kernel_clock(spent):
    """The main thread's CPU seconds in the kernels added to ``spent[0]``: the modules that call
    them see a timed copy of solvers.kernels.cpu (the real module, and the compiled code that
    takes its functions from it, stay as they are), the CPU device's copies, Problem.certify and
    the proofs (PROOFS) timed in place; a call inside a timed one is not counted again."""
    main, depth = threading.main_thread(), [0]

    def timed(fn):
        def call(*args, **kwargs):
            if threading.current_thread() is not main or depth[0]:
                return fn(*args, **kwargs)
            t = time.thread_time()
            depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                spent[0] += time.thread_time() - t
        return call

    cpu = devices.cpu
    proxy = types.SimpleNamespace(**{name: getattr(cpu, name) for name in dir(cpu) if not name.startswith("__")})
    for name in KERNELS:
        setattr(proxy, name, timed(getattr(cpu, name)))
    methods = {(devices.CPUDevice, name): getattr(devices.CPUDevice, name) for name in COPIES}
    methods[glm_problems.Problem, "certify"] = glm_problems.Problem.certify
    for name in PROOFS:
        methods[PROOFS[name], name] = getattr(PROOFS[name], name)
    devices.cpu = glm_problems.cpu = resident.cpu = proxy
    for (owner, name), fn in methods.items():
        setattr(owner, name, timed(fn))
    try:
        yield
    finally:
        devices.cpu = glm_problems.cpu = resident.cpu = cpu
        for (owner, name), fn in methods.items():
            setattr(owner, name, fn)


def python_parts(problem, repeats, share):
    """The Python loop's rounds (where the routed arm runs them): (the main thread's CPU seconds in the
    kernels, its other CPU seconds, wall seconds) per round, medians over seeds (see the module's
    docstring). Timed inside the round loop (solvers.duhl.swaps.solve_with_swaps: its first gap pass
    and row too, as the compiled loop's clock has them), not the solve's set-up."""
    loop, per = duhl_solver.solve_with_swaps, []

    def timed_loop(*args, **kwargs):
        spent[0], c0, t0 = 0.0, time.thread_time(), time.perf_counter()
        try:
            return loop(*args, **kwargs)
        finally:  # (the kernels' time inside the loop: the solve certifies after it)
            spent[1:] = [spent[0], time.thread_time() - c0, time.perf_counter() - t0]

    for seed in range(repeats):
        spent = [0.0, 0.0, 0.0, 0.0]
        duhl_solver.solve_with_swaps = timed_loop
        try:
            with kernel_clock(spent):
                res = run(problem, "python auto", seed, share=share)  # what "routed" runs there
        finally:
            duhl_solver.solve_with_swaps = loop
        _, kernels, cpu, wall = spent
        rounds = max(1, res.n_rounds)
        per.append((kernels / rounds, (cpu - kernels) / rounds, wall / rounds))
    return np.median(per, axis=0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=None, help="problems whose label contains this")
    parser.add_argument("--budget", type=float, default=0.25, help="memory_budget of the arms with part resident")
    parser.add_argument("--parts", action="store_true", help="the routed arm's wall time per round, by part")
    parser.add_argument("--full", action="store_true", help="the full bench's problems (make bench), not --quick's")
    parser.add_argument("--arms", default=",".join(list(ARMS)[:5]),  # the local_epochs arms on request
                        help="comma-separated arms to run (the first is the ratios' base), e.g. 'all resident,routed'")
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"unknown arm(s) {unknown}; choose from {list(ARMS)}")
    parts = []
    print(f"load average {os.getloadavg()}, repeats {args.repeats}, memory_budget {args.budget}")
    print("| problem | arm | t_1e6 ms | x all resident | CPU ms, whole solve | x all resident | rounds | epochs "
          "| warm-up s |")
    print("|---|---|---|---|---|---|---|---|---|")
    with threadpool_limits(1):
        for label, build in problems(quick=not args.full):
            if args.only and args.only not in label:
                continue
            try:
                problem, _ = build()
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
            if args.parts:
                compiled = round_parts(problem, args.repeats, args.budget)
                python = python_parts(problem, args.repeats, args.budget) if compiled[0] is None else None
                parts.append((label, compiled, python))
    if parts:
        names = compiled_swaps.PARTS[:-1]
        print("\nThe routed arm's compiled rounds: wall ns per round by part (medians; the clock's own cost, "
              f"{parts[0][1][1] * 1e9:.1f} ns a lap, taken out; other: the rest of the compiled calls), the share "
              "outside the kernels (selection, other, block lists, round set-up)")
        print("| problem | " + " | ".join(names) + " | round | outside the kernels |")
        print("|---" * (len(names) + 3) + "|")
        for label, (per_round, _), _ in parts:
            if per_round is None:
                print(f"| {label} | the Python loop ran (below) |")
                continue
            cells = " | ".join(f"{x * 1e9:.0f}" for x in per_round)
            outside = (per_round[0] + per_round[5:-1].sum()) / per_round[-1]
            print(f"| {label} | {cells} | {outside:.1%} |")
        python = [(label, p) for label, _, p in parts if p is not None]
        if python:
            print("\nThe routed arm's Python rounds: the main thread's CPU us per round in the kernels and "
                  "outside them, the round's wall us (medians), the share outside the kernels")
            print("| problem | kernels | outside | round | outside the kernels |")
            print("|---|---|---|---|---|")
            for label, (kernels, outside, wall) in python:
                print(f"| {label} | {kernels * 1e6:.0f} | {outside * 1e6:.0f} | {wall * 1e6:.0f} | "
                      f"{outside / wall:.1%} |")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
