"""Anderson extrapolation on and off, side by side with the peers.

    python -m benchmarks.anderson              # the quick bench's problems, 3 repeats
    python -m benchmarks.anderson --full       # the full bench's (make bench: w8a's 49,749 rows, ...)

Per problem of ``make bench QUICK=1`` whose coordinates are the model's coefficients (the
Lasso's; the classifiers solved in the primal: w8a's L2 and L1 logistic regressions and L1
squared hinge, the tall synthetic ones), time to rel_gap 1e-6 of ours with all data resident,
without and with ``anderson`` (DuHL's option: one order per window and an extrapolation every 5
passes), and of every installed peer but dask-ml's ADMM, in one run: a warm-up per solver first
(excluded), then ``--repeats`` runs whose median is reported, ours interleaved (off,
on, off, on, ...) so that the machine's load hits both alike. BLAS pools pinned to
one thread. Prints a markdown table with each time over the best peer's.
"""

import argparse
import math
import statistics

from threadpoolctl import threadpool_limits

from benchmarks.peers import TARGETS, _inf, problems, run_peer, time_to
from solvers.duhl import DuHL
from solvers.duhl import compile_kernels
from tasks.peers import PEERS as ALL_PEERS
from tasks.peers import PeerUnsupported, missing_reason

TARGET = min(TARGETS)
PEERS = tuple(p for p in ALL_PEERS if p != "peer_daskml_admm")  # ~10 s a fit
ARMS = {"ours": False, "ours + anderson": True}


def _ours(problem, anderson, seed, max_time, max_epochs=100000):
    return DuHL(tol=TARGET, max_epochs=max_epochs, max_time=max_time, random_state=seed,
                anderson=anderson).solve(problem)


def _median_time(results):
    times = [_inf(time_to(r.trace, TARGET)) for r in results]
    value = statistics.median(times)
    return math.nan if math.isinf(value) else value


def bench(problem, repeats, max_time, log):
    """{arm: (median time to the target, median epochs or nan)}."""
    out = {}
    for anderson in ARMS.values():
        _ours(problem, anderson, 0, max_time, max_epochs=2)  # warm-up
    runs = {arm: [] for arm in ARMS}
    for seed in range(repeats):
        for arm, anderson in ARMS.items():
            runs[arm].append(_ours(problem, anderson, seed, max_time))
    for arm, results in runs.items():
        out[arm] = (_median_time(results), statistics.median(r.epochs for r in results))
    for name in PEERS:
        if missing_reason(name):
            log(f"  skip {name}: {missing_reason(name)}")
            continue
        try:
            _, results = run_peer(problem, name, repeats, max_time)
        except PeerUnsupported as error:
            log(f"  skip {name}: {error}")
            continue
        out[name] = (_median_time(results), math.nan)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-time", type=float, default=10.0, help="seconds per run")
    parser.add_argument("--full", action="store_true", help="the full bench's problems (not --quick's)")
    parser.add_argument("--only", default=None, help="run only the problems whose label contains this text")
    args = parser.parse_args(argv)
    lines = ["| problem | ours (s) | + anderson (s) | epochs off / on | best peer (s) | ours / peer | "
             "+ anderson / peer |", "|---|---|---|---|---|---|---|"]
    with threadpool_limits(1):
        print(f"Numba warm-up: {compile_kernels(['lasso', 'logistic_l1', 'logistic_l2', 'svm_l1']):.2f} s, "
              "excluded", flush=True)
        for label, build in problems(not args.full):
            if args.only is not None and args.only not in label:
                continue
            try:
                problem = build()[0]
            except FileNotFoundError as error:
                print(f"{label}: skipped ({error})", flush=True)
                continue
            if problem.dual_form:  # samples as coordinates: anderson does not apply
                continue
            res = bench(problem, args.repeats, args.max_time, lambda msg: print(msg, flush=True))
            for arm, (t, epochs) in res.items():
                print(f"{label:28s} {arm:16s} t(1e-6)={t:.4g}s epochs={epochs:.4g}", flush=True)
            peers = {k: v[0] for k, v in res.items() if k not in ARMS and not math.isnan(v[0])}
            best = min(peers, key=peers.get) if peers else None
            best_t = peers[best] if best else math.nan
            (off, e_off), (on, e_on) = res["ours"], res["ours + anderson"]
            lines.append(f"| {label} | {off:.4g} | {on:.4g} | {e_off:.3g} / {e_on:.3g} | "
                         f"{best_t:.4g} ({best}) | {off / best_t:.2f} | {on / best_t:.2f} |")
    print("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
