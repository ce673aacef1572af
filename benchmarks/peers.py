"""Benchmark against the peers: time to rel_gap 1e-4 and 1e-6, side by side.

    make bench            # = python -m benchmarks.peers          (at most ~20 min on 2 cores)
    make bench QUICK=1    # = python -m benchmarks.peers --quick  (at most ~3 min)

Per problem (w8a: Lasso on the labels, hinge SVM, L2 logistic, L1 logistic, L1 squared hinge;
scikit-learn's diabetes (and breast cancer); synthetic dense and sparse Lasso; a dense SVM; tall
synthetic L1 and L2 logistic regressions, dense and sparse), the classifiers on the side
dual="auto" picks (solvers.glm.models.sides: the primal for an L1 penalty or n_samples >=
n_features; an L2 logistic regression's 0.25 arms on the dual, as under a memory budget),
each solver's time to rel_gap 1e-4 and 1e-6: ours in memory (DuHL with
memory_budget=None), DuHL at memory_budget 0.25, sequential streaming at 0.25
(the larger-than-budget setting), and every installed peer that solves the
model (tasks/peers.py). Every point is re-evaluated by our objective code; a
peer's time is the wall time of the fit that reached the target.

Honest measurement: a warm-up per solver and problem (imports, Numba
compilation, the first fit) runs first and is reported on its own; times are
medians of ``--repeats`` runs; BLAS/OpenMP pools are pinned to one thread
(threadpoolctl, printed) and dask-glm runs on the synchronous scheduler; the
measured read bandwidth is printed with our epoch times (the floor: data bytes
read per epoch / bandwidth). Writes bench-results/<date_time>/ (bench.md,
rows.csv, one rel_gap-vs-time plot per problem) and logs to the MLflow
experiment "bench".
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from benchmarks.common import W8A, lasso_problem, read_bandwidth, svm_problem
from pipelines.tracking import relative, shown_uri
from solvers.duhl import DuHL
from solvers.duhl import compile_kernels
from solvers.glm.models.sides import feature_coupling, resolve
from solvers.glm.problems import make_problem
from tasks.peers import PEERS, PeerUnsupported, make_peer, missing_reason

ROOT = Path(__file__).resolve().parents[1]
TARGETS = (1e-4, 1e-6)
OURS = ("ours (mem)", "duhl 0.25", "sequential 0.25")


# ----------------------------------------------------------- problems ---
def _alpha(X, y, ratio):
    return ratio * float(np.abs(X.T @ (y - y.mean())).max()) / X.shape[0]


def classifier(family, X, y, part_resident=False, **params):
    """A classifier's problem on the side dual="auto" picks (solvers.glm.models.sides), all data
    resident or (``part_resident``) under a memory budget that holds part of it."""
    entry, kwargs, _ = resolve(family, params, *X.shape, coupling=feature_coupling(X) if part_resident else None)
    return make_problem(entry, X, y, **kwargs)


def sides(family, X, y, budget_arms, **params):
    """A builder's answer for a classifier: (the all-resident side's problem, budget_arms, the
    problem the 0.25 arms solve: the side dual="auto" takes under a budget; None: the same)."""
    resident = classifier(family, X, y, **params)
    budgeted = classifier(family, X, y, part_resident=True, **params)
    return resident, budget_arms, None if budgeted.name == resident.name else budgeted


def noisy_linear_labels(rng, Z):
    """+-1 labels from a linear score of Z's columns (dense or sparse), a tenth of them
    informative, with noise half the score's spread: many samples inside the margin."""
    n, d = Z.shape
    coef = np.zeros(d)
    coef[rng.choice(d, max(1, d // 10), replace=False)] = rng.standard_normal(max(1, d // 10))
    score = Z @ coef
    return np.where(score + 0.5 * np.std(score) * rng.standard_normal(n) > 0, 1.0, -1.0)


def _w8a(rows):
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(W8A), n_features=300)
    return X[:rows], y[:rows]


def problems(quick):
    """[(label, builder)]; a builder returns (Problem, budget_arms: bool, the Problem the 0.25 arms
    solve: a classifier's side under a budget, None: the same), or raises FileNotFoundError."""
    out = []
    w8a_rows = 20000 if quick else None

    def w8a(model):
        def build():
            if not W8A.exists():
                raise FileNotFoundError(f"{W8A} not found")
            X, y = _w8a(w8a_rows)
            if model == "lasso":
                return make_problem("lasso", X, y, alpha=_alpha(X, y, 0.1), fit_intercept=False), False, None
            if model == "svm":
                return make_problem(model, X, y, C=1.0, fit_intercept=False), False, None
            family, penalty, loss = {"logistic": ("logistic", "l2", None), "logistic l1": ("logistic", "l1", None),
                                     "squared hinge l1": ("svm", "l1", "squared_hinge")}[model]
            extra = {} if loss is None else {"loss": loss}
            return sides(family, X, y, False, C=1.0, fit_intercept=False, penalty=penalty, **extra)
        return build

    n_w8a = "20000" if quick else "49749"
    out += [(f"w8a[{n_w8a}] lasso", w8a("lasso")), (f"w8a[{n_w8a}] svm", w8a("svm")),
            (f"w8a[{n_w8a}] logistic", w8a("logistic")), (f"w8a[{n_w8a}] logistic l1", w8a("logistic l1")),
            (f"w8a[{n_w8a}] squared hinge l1", w8a("squared hinge l1"))]

    def diabetes():
        from sklearn.datasets import load_diabetes

        X, y = load_diabetes(return_X_y=True)
        return make_problem("lasso", X, y, alpha=_alpha(X, y, 0.01), fit_intercept=False), False, None
    out.append(("diabetes lasso", diabetes))
    if not quick:
        def cancer():
            from sklearn.datasets import load_breast_cancer
            from sklearn.preprocessing import StandardScaler

            X, y = load_breast_cancer(return_X_y=True)
            return sides("logistic", StandardScaler().fit_transform(X), y, False, C=1.0, fit_intercept=False)
        out.append(("breast_cancer logistic", cancer))

    def dense(n, d, k, budget):
        def build():
            X, y, alpha = lasso_problem(n, d, k, 0.05)
            return make_problem("lasso", X, y, alpha=alpha, fit_intercept=False), budget, None
        return build

    def sparse(n, d, density, budget):
        def build():
            rng = np.random.default_rng(1)
            X = sp.random(n, d, density=density, format="csc", random_state=rng)
            coef = np.zeros(d)
            coef[rng.choice(d, 50, replace=False)] = rng.standard_normal(50)
            y = X @ coef + 0.1 * rng.standard_normal(n)
            return make_problem("lasso", X, y, alpha=_alpha(X, y, 0.05), fit_intercept=False), budget, None
        return build

    def dense_svm(n, d):
        def build():
            X, y, C = svm_problem(n, d, 0.01)
            return make_problem("svm", X, y, C=C, fit_intercept=False), True, None
        return build

    def tall_logistic(n, d, density, penalty, C, budget):
        """A tall logistic regression (n_samples >> n_features: the primal side), informative
        features a tenth of them, labels from a noisy linear score."""
        def build():
            rng = np.random.default_rng(2)
            if density < 1.0:
                X = sp.random(n, d, density=density, format="csc", random_state=rng,
                              data_rvs=lambda k: rng.standard_normal(k))
            else:
                X = np.asfortranarray(rng.standard_normal((n, d)))
            return sides("logistic", X, noisy_linear_labels(rng, X), budget, C=C, fit_intercept=False,
                         penalty=penalty)
        return build

    if quick:
        out += [("dense lasso 2000x1000", dense(2000, 1000, 20, True)),
                ("sparse lasso 5000x5000 1%", sparse(5000, 5000, 0.01, False)),
                ("dense logistic l1 5000x500", tall_logistic(5000, 500, 1.0, "l1", 0.05, True))]
    else:
        out += [("dense lasso 2000x1000", dense(2000, 1000, 20, False)),
                ("dense lasso 5000x20000", dense(5000, 20000, 100, True)),
                ("sparse lasso 20000x20000 0.5%", sparse(20000, 20000, 0.005, False)),
                ("sparse lasso 100000x50000 0.1%", sparse(100000, 50000, 0.001, True)),
                ("dense svm 20000x300", dense_svm(20000, 300)),
                ("dense logistic 20000x500", tall_logistic(20000, 500, 1.0, "l2", 1.0, False)),
                ("dense logistic l1 20000x1000", tall_logistic(20000, 1000, 1.0, "l1", 0.05, True)),
                ("sparse logistic l1 100000x20000 0.1%", tall_logistic(100000, 20000, 0.001, "l1", 1.0, True))]
    return out


# ------------------------------------------------------------- solving ---
def certified(trace):
    """The rows whose gap is certified: a DuHL trace's estimates (``certified`` 0: stale gaps in the
    sum, refresh "auto") are no time to a target; a peer's trace (no such column) is all certified."""
    return trace[trace["certified"] > 0] if "certified" in trace.columns else trace


def time_to(trace, target):
    """The time of the first certified row at or below ``target`` (NaN: none)."""
    trace = certified(trace)
    hits = trace[trace["rel_gap"] <= target]
    return float(hits["time_s"].iloc[0]) if len(hits) else math.nan


def _inf(x):
    return math.inf if math.isnan(x) else x


def run_ours(problem, arm, repeats, max_time):
    budget, selection = {"ours (mem)": (None, "gap"), "duhl 0.25": (0.25, "gap"),
                         "sequential 0.25": (0.25, "sequential")}[arm]

    def solve(seed, max_epochs=100000):
        return DuHL(memory_budget=budget, selection=selection, tol=min(TARGETS), max_epochs=max_epochs,
                    max_time=max_time, random_state=seed).solve(problem)

    t0 = time.perf_counter()
    solve(0, max_epochs=2)                   # warm-up: compile / load kernels for this data
    warm = time.perf_counter() - t0
    results = [solve(seed) for seed in range(repeats)]
    return warm, results


def run_peer(problem, name, repeats, max_time):
    """A peer's schedule, its fits stopped at max_time in all (each point the median of repeats),
    after a warm-up (imports, compilation, the first fit) in the child process that runs them."""
    peer = make_peer(name, tol=min(TARGETS), max_time=max_time, repeats=repeats)
    result = peer.solve(problem, warm_up=True)
    return peer.warmup_s, [result]


def bench_problem(label, problem, budget_arms, args, bandwidth, log, budgeted=None):
    """``budgeted``: the problem the 0.25 arms solve (a classifier's other side), None: ``problem``."""
    rows, curves = [], {}
    peers = [p for p in PEERS if not (args.quick and p == "peer_daskml_admm")]  # ~10 s a fit
    arms = ["ours (mem)", "duhl 0.25"] + (["sequential 0.25"] if budget_arms else []) + peers
    for arm in arms:
        start = time.perf_counter()
        if arm in OURS:
            own = problem if arm == "ours (mem)" or budgeted is None else budgeted
            warm, results = run_ours(own, arm, args.repeats, args.max_time)
        else:
            reason = missing_reason(arm)
            if reason:
                log(f"  skip {arm}: {reason}")
                continue
            try:
                warm, results = run_peer(problem, arm, args.repeats, args.max_time)
            except PeerUnsupported as error:
                log(f"  skip {arm}: {error}")
                continue
        # a run that never reached the target counts as the slowest, not as a hole
        times = {t: statistics.median([_inf(time_to(r.trace, t)) for r in results]) for t in TARGETS}
        times = {t: (math.nan if math.isinf(v) else v) for t, v in times.items()}
        mid = sorted(results, key=lambda r: r.time_s)[len(results) // 2]
        curves[arm] = mid.trace
        row = dict(problem=label, solver=arm, t_1e4_s=times[1e-4], t_1e6_s=times[1e-6],
                   final_rel_gap=float(min(r.rel_gap for r in results)), status=mid.status,
                   warmup_s=warm, wall_s=time.perf_counter() - start)
        if arm == "ours (mem)":
            epoch_s = mid.time_s / max(mid.epochs, 1e-12)
            floor_s = float(problem.coord_bytes.sum()) / (bandwidth * 1e9)
            row.update(epoch_ms=1e3 * epoch_s, floor_ms=1e3 * floor_s, x_floor=epoch_s / floor_s)
        rows.append(row)
        log(f"  {arm:18s} t(1e-4)={row['t_1e4_s']:.4g}s t(1e-6)={row['t_1e6_s']:.4g}s "
            f"final={row['final_rel_gap']:.2e} warm-up={warm:.2f}s")
    return rows, curves


def summarize(rows):
    """Per problem: ours vs the best peer at each target, DuHL vs in-memory and streaming."""
    frame = pd.DataFrame(rows)
    out = []
    for label, group in frame.groupby("problem", sort=False):
        by = group.set_index("solver")
        peers = group[~group["solver"].isin(OURS)]
        s = dict(problem=label)
        for t, col in ((1e-4, "t_1e4_s"), (1e-6, "t_1e6_s")):
            tag = "1e4" if t == 1e-4 else "1e6"
            done = peers.dropna(subset=[col])
            best = done.loc[done[col].idxmin()] if len(done) else None
            ours = by.loc["ours (mem)", col]
            s[f"best_peer_{tag}"] = best["solver"] if best is not None else "none"
            s[f"best_peer_{tag}_s"] = best[col] if best is not None else math.nan
            s[f"ours_{tag}_s"] = ours
            s[f"ratio_{tag}"] = ours / best[col] if best is not None else math.nan
        s["duhl25_vs_mem"] = by.loc["duhl 0.25", "t_1e6_s"] / by.loc["ours (mem)", "t_1e6_s"]
        if "sequential 0.25" in by.index:
            seq = by.loc["sequential 0.25"]
            seq_t = seq["t_1e6_s"] if not math.isnan(seq["t_1e6_s"]) else seq["wall_s"]
            s["seq_vs_duhl25"] = seq_t / by.loc["duhl 0.25", "t_1e6_s"]
        for k in ("epoch_ms", "floor_ms", "x_floor"):
            s[k] = by.loc["ours (mem)"].get(k, math.nan)
        out.append(s)
    return out


def markdown(rows, title):
    keys = list(dict.fromkeys(k for r in rows for k in r))
    lines = [f"### {title}", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        cells = []
        for k in keys:
            v = r.get(k, "")
            cells.append(("-" if math.isnan(v) else f"{v:.4g}") if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


RESULTS_PAGE = ROOT / "docs" / "benchmarks" / "results.md"
SUITES = {"quick": ("The quick suite", "make bench QUICK=1"), "full": ("The full suite", "make bench")}


def _ms(seconds):
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds * 1e3:.3g} ms"


def results_section(summary, header, total_s, when, argv):
    """The docs' section of one suite (docs/benchmarks/results.md): its date, command and table."""
    title, command = SUITES[header["mode"]]
    extra = " ".join(argv)
    shown = f'{command} ARGS="{extra}"' if extra else command
    lines = [f"### {title}", "",
             f"`{shown}`, measured **{when} UTC** on {header['cores']} cores (medians of {header['repeats']}; "
             f"Numba's warm-up, {header['numba_warmup_s']:.0f} s, excluded; {total_s:.0f} s in all). "
             "Time to rel_gap 1e-6:", "",
             "| problem | ours, all resident | best peer | ours / best peer | DuHL at budget 0.25 / all resident |",
             "| --- | --- | --- | --- | --- |"]
    for s in summary:
        ratio = s["ratio_1e6"]
        duhl = s["duhl25_vs_mem"]
        lines.append(f"| {s['problem']} | {_ms(s['ours_1e6_s'])} | {s['best_peer_1e6']} {_ms(s['best_peer_1e6_s'])} "
                     f"| {'-' if math.isnan(ratio) else f'{ratio:.2f}'} | "
                     f"{'-' if math.isnan(duhl) else f'{duhl:.2f}x'} |")
    return "\n".join(lines)


def write_results_page(section, mode, page=RESULTS_PAGE):
    """Replace this suite's section of the docs' results page (the other suite's stays), written
    whole to a temporary file, then renamed."""
    title = f"### {SUITES[mode][0]}"
    text = page.read_text() if page.exists() else ""
    head, sections = text, {}
    if "### " in text:
        head = text[: text.index("### ")]
        for part in text[text.index("### "):].split("\n### "):
            part = part if part.startswith("### ") else "### " + part
            sections[part.splitlines()[0]] = part.rstrip() + "\n"
    sections[title] = section.rstrip() + "\n"
    ordered = [sections[t] for t in (f"### {SUITES['quick'][0]}", f"### {SUITES['full'][0]}") if t in sections]
    ordered += [v for t, v in sections.items() if t not in (f"### {SUITES['quick'][0]}", f"### {SUITES['full'][0]}")]
    tmp = page.with_suffix(".tmp")
    tmp.write_text(head + "\n".join(ordered))
    tmp.replace(page)


def plot(label, curves, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for arm, trace in curves.items():
        t = certified(trace)
        t = t[t["rel_gap"] > 0]
        ax.plot(t["time_s"].clip(lower=1e-5), t["rel_gap"], marker="." if arm not in OURS else None,
                label=arm, lw=2 if arm in OURS else 1)
    for target in TARGETS:
        ax.axhline(target, color="grey", lw=0.5, ls="--")
    ax.set(xscale="log", yscale="log", xlabel="wall time (s)", ylabel="rel_gap (our gap / P(0))",
           title=label)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def track(rows, summary, out_dir, quick, header):
    """Log to the MLflow experiment "bench": a parent run, one nested run per problem x solver."""
    from pipelines.tracking import Tracker

    tracker = Tracker(None, "bench")
    with tracker.run("bench quick" if quick else "bench", tags={"quick": str(quick)}) as parent:
        tracker.log_params(parent, {k: str(v) for k, v in header.items()})
        for r in rows:
            with tracker.run(f"{r['problem']} / {r['solver']}", parent,
                             {"problem": r["problem"], "solver": r["solver"]}) as run_id:
                tracker.log_params(run_id, {"problem": r["problem"], "solver": r["solver"],
                                            "target_rel_gap": 1e-6, "status": r["status"]})
                metrics = {"time_to_target_s": r["t_1e6_s"], "time_to_1e-4_s": r["t_1e4_s"],
                           "final_rel_gap": r["final_rel_gap"], "warmup_s": r["warmup_s"]}
                tracker.log_metrics(run_id, {k: v for k, v in metrics.items() if not math.isnan(v)})
        for s in summary:
            key = "".join(c if c.isalnum() else "_" for c in s["problem"])
            if not math.isnan(s.get("ratio_1e6", math.nan)):
                tracker.log_metrics(parent, {f"ratio_vs_best_peer_{key}": s["ratio_1e6"]})
        tracker.log_artifact(parent, out_dir)
    return tracker.uri


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, at most ~3 minutes")
    parser.add_argument("--repeats", type=int, default=None, help="runs per solver (3; quick: 1)")
    parser.add_argument("--max-time", type=float, default=None, help="seconds per solver run")
    parser.add_argument("--no-tracking", action="store_true")
    parser.add_argument("--only", action="append", default=None, metavar="TEXT",
                        help="run the problems whose label contains TEXT only (repeatable; the docs' page is "
                             "then left as it is)")
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    parser.add_argument("--no-docs", dest="write_docs", action="store_false",
                        help="leave docs/benchmarks/results.md as it is (else this suite's table is rewritten)")
    args = parser.parse_args(argv)
    if args.max_time is None:
        args.max_time = 2.0 if args.quick else 30.0
    if args.repeats is None:  # the quick suite keeps to its 3 minutes with one run each
        args.repeats = 1 if args.quick else 3
    from threadpoolctl import threadpool_info, threadpool_limits

    t_start = time.perf_counter()
    out_dir = Path(args.out) / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = []

    def log(msg):
        print(msg, flush=True)
        lines.append(msg)

    with threadpool_limits(1):
        # every problem here is float64: its kernels only
        compile_s = compile_kernels(["lasso", "svm", "logistic", "logistic_l1", "logistic_l2", "svm_l1"], (np.float64,),
                                    jobs=os.cpu_count() or 1)
        pools = [(p["internal_api"], p["num_threads"]) for p in threadpool_info()]
        bandwidth = read_bandwidth()
        header = dict(mode="quick" if args.quick else "full", repeats=args.repeats, max_time_s=args.max_time,
                      cores=os.cpu_count(), thread_pools=pools, bandwidth_gb_s=round(bandwidth, 2),
                      numba_warmup_s=round(compile_s, 2))
        log(f"Numba warm-up (kernels compiled or loaded): {compile_s:.2f} s, excluded below")
        log(f"thread pools pinned: {pools}; cores={os.cpu_count()}; dask-glm: synchronous scheduler")
        log(f"measured read bandwidth: {bandwidth:.1f} GB/s (one thread)")
        for name in PEERS:
            reason = missing_reason(name)
            log(f"peer {name}: {'ok' if reason is None else 'SKIPPED: ' + reason}")
        rows, curves_by = [], {}
        for label, build in problems(args.quick):
            if args.only and not any(text in label for text in args.only):
                continue
            try:
                problem, budget_arms, budgeted = build()
            except FileNotFoundError as error:
                log(f"\n{label}: skipped ({error})")
                continue
            log(f"\n{label}: {problem.n_samples} x {problem.n_features} {problem.name}, "
                f"{'sparse' if problem.sparse else 'dense'}, {problem.coord_bytes.sum() / 1e6:.1f} MB")
            if budgeted is not None:
                log(f"  the 0.25 arms solve {budgeted.name} (dual='auto' under a memory budget)")
            new, curves = bench_problem(label, problem, budget_arms, args, bandwidth, log, budgeted)
            rows += new
            curves_by[label] = curves
            plot(label, curves, out_dir / ("".join(c if c.isalnum() else "_" for c in label) + ".png"))
    summary = summarize(rows)
    table = markdown([{k: v for k, v in r.items() if k not in ("epoch_ms", "floor_ms", "x_floor")}
                      for r in rows], "Time to rel_gap (median of repeats; warm-up excluded)")
    summ = markdown(summary, "Ours vs the best peer (ratio < 1: ours faster), DuHL, epoch vs bandwidth floor")
    print("\n" + table + "\n\n" + summ)
    total = time.perf_counter() - t_start
    text = "\n".join([f"# Benchmark ({header['mode']})", "", "```", *lines, "```", "", table, "", summ, "",
                      f"total benchmark time: {total:.0f} s"])
    (out_dir / "bench.md").write_text(text + "\n")
    if args.write_docs and not args.only:  # a partial run leaves the suite's page as it is
        section = results_section(summary, header, total, datetime.utcnow().strftime("%Y-%m-%d %H:%M"),
                                  [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--quick"])
        write_results_page(section, header["mode"])
        print(f"docs: {relative(RESULTS_PAGE)} ({SUITES[header['mode']][0].lower()})")
    pd.DataFrame(rows).to_csv(out_dir / "rows.csv", index=False)
    pd.DataFrame(summary).to_csv(out_dir / "summary.csv", index=False)
    if not args.no_tracking:
        uri = track(rows, summary, out_dir, args.quick, header)
        print(f"MLflow: experiment 'bench' in {shown_uri(uri)}")
    print(f"results: {relative(out_dir)}/bench.md (+ plots, rows.csv); total {total:.0f} s")
    return rows, summary


if __name__ == "__main__":
    main()
