"""The seed papers' headline claims, each a function of the reproduce runs' results.

A claim reads the :class:`pipelines.report.RunResults` of the runs it names (per-arm
:class:`~pipelines.report.ArmStats`, traces, what the solvers noted) and returns
what was measured, in words, and whether the claim holds. Ratios are
:func:`pipelines.report.advantage` (a ``>`` marks a lower bound: the baseline never
reached the target). "Sooner" in time means at least ``SOONER`` times sooner;
rounds and bits are counts and need only be fewer. The run names are those of
``conf/experiment/reproduce.yaml``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from pipelines.report import ArmStats, advantage

Results = Mapping[str, Any]
SOONER = 1.1  # "sooner" in time means at least this ratio: timings on a shared machine vary by tens of percent


def _t(s: ArmStats) -> str:
    return f"{s.time_to_target_s:.2f}s" if s.reached else f"not reached in {s.time_s:.1f}s"


def _r(s: ArmStats) -> str:
    return f"{s.rounds_to_target:.0f}" if s.reached else f">{s.rounds:.0f}"


def _x(adv) -> str:
    return "-" if adv is None else str(adv)


def _above(adv, value: float = 1.0) -> bool:
    return adv is not None and adv.value > value


def _compressor(settings: Mapping[str, Any]) -> str:
    c = settings.get("compressor")
    if not isinstance(c, Mapping):
        return str(c)
    if c.get("name") == "dither":
        return f"random dithering (s = {c.get('s')}, l-{c.get('p')}, buckets of {c.get('bucket_size')})"
    return ", ".join(f"{k}={v}" for k, v in c.items())


# ------------------------------------------------------------------------------------ DuHL
def duhl_speedup(r: Results) -> Tuple[str, bool]:
    s = r["duhl"].stats
    seq, rnd = advantage(s["duhl-gap"], s["sequential"]), advantage(s["duhl-gap"], s["random"])
    return (f"gap {_t(s['duhl-gap'])}, sequential {_t(s['sequential'])} ({_x(seq)}), random {_t(s['random'])} "
            f"({_x(rnd)}), all data on the device {_t(s['resident'])}; rel_gap {r['duhl'].more['target']:g}",
            _above(seq, 10.0) and _above(rnd, SOONER))


def duhl_budgets(r: Results) -> Tuple[str, bool]:
    ups = [(b, advantage(r[n].stats["duhl-gap"], r[n].stats["sequential"]))
           for b, n in ((0.1, "duhl_budget10"), (0.25, "duhl"), (0.5, "duhl_budget50"))]
    text = "gap vs sequential: " + ", ".join(f"budget {b:g}: {_x(a)}" for b, a in ups)
    values = [a.value if a is not None else math.nan for _, a in ups]
    return text, all(math.isfinite(v) for v in values) and values[0] > values[1] > values[2]


# ----------------------------------------------------------------------------------- DIANA
def _per_decade(trace, column: str, start: float, target: float) -> List[int]:
    """Rounds spent in each decade of ``column`` from ``start`` down to ``target``."""
    values, rounds = trace[column].to_numpy(), trace["round"].to_numpy()
    levels = start * 10.0 ** -np.arange(1, int(np.floor(np.log10(start / target))) + 1)
    hits = [rounds[np.argmax(values <= level)] for level in levels if (values <= level).any()]
    return [int(b - a) for a, b in zip([0] + hits[:-1], hits)]


def diana_exact(r: Results) -> Tuple[str, bool]:
    res = r["diana"]
    d, ns = res.stats["diana_dither"], res.stats["no_shift_dither"]
    trace, plain = res.more["traces"]["diana_dither"], res.more["traces"]["no_shift_dither"]
    target = res.more["target"]
    start = float(trace["suboptimality"].iloc[0])
    decades = _per_decade(trace, "suboptimality", start, max(target, 1e-300))
    tail = plain["suboptimality"].iloc[len(plain) // 2:]
    floor = float(tail.min())
    linear = len(decades) >= 3 and max(decades[1:]) <= 3 * max(1, min(decades[1:]))
    text = (f"{_compressor(res.more['settings']['diana_dither'])}, theory's step: DIANA reached F - F* <= {target:g} "
            f"in {_r(d)} rounds ({', '.join(map(str, decades))} rounds per decade); without shifts: "
            f"{'reached' if ns.reached else 'not reached'}, best {floor:.1e} over its last {len(tail)} of "
            f"{len(plain)} rounds ({ns.time_s:.0f}s)")
    return text, d.reached and linear and not ns.reached and floor > target


def diana_bits(r: Results) -> Tuple[str, bool]:
    res = r["diana"]
    s = res.stats
    main = advantage(s["diana_dither"], s["gd"], "bits")
    others = [f"{name}: {_x(advantage(st, s['gd'], 'bits'))}" for name, st in s.items()
              if name.startswith(("diana_", "ef21")) and name != "diana_dither"]
    text = (f"{_x(main)} fewer bits than GD with {_compressor(res.more['settings']['diana_dither'])} "
            f"({s['diana_dither'].bits_to_target / 1e6:.2f} vs {s['gd'].bits_to_target / 1e6:.2f} Mbit), theory's "
            f"step for every arm; " + "; ".join(others))
    return text, _above(main)


# ---------------------------------------------------------------------------------- CoCoA+
def cocoa_adding(r: Results) -> Tuple[str, bool]:
    s = r["cocoa_svm"].stats
    ks = sorted({int(n[1:].split("_")[0]) for n in s if n.endswith("_adding")})
    ups = [(k, s[f"k{k}_adding"], s[f"k{k}_averaging"]) for k in ks]
    text = "hinge SVM, samples partitioned: " + "; ".join(
        f"K = {k}: {_r(a)} vs {_r(b)} rounds ({_x(advantage(a, b, 'rounds'))})" for k, a, b in ups)
    if "cocoa" in r and {"k4_safe", "k4_averaging"} <= set(r["cocoa"].stats):
        lasso = r["cocoa"].stats
        text += (f". Lasso, features partitioned, K = 4: {_r(lasso['k4_safe'])} vs {_r(lasso['k4_averaging'])} "
                 "rounds (the same steps where no constraint binds)")
    return text, bool(ups) and all(_above(advantage(a, b, "rounds")) for _, a, b in ups)


def _sigma(r: Results, arm: str) -> str:
    value = r["cocoa"].extras.get(arm, {}).get("sigma")
    return f"sigma' {value:.2f}" if value else "sigma' ?"


def cocoa_rounds(r: Results) -> Tuple[str, bool]:
    s = r["cocoa"].stats
    k1 = s["k1"]
    parts, ok = [f"K = 1: {_r(k1)}"], k1.reached
    for k in (2, 4):
        data, safe = s[f"k{k}"], s[f"k{k}_safe"]
        parts.append(f"K = {k}: {_r(data)} ({_sigma(r, f'k{k}')}) vs {_r(safe)} (sigma' = {k})")
        ok = ok and data.reached and data.rounds_to_target <= 1.5 * k1.rounds_to_target
        ok = ok and _above(advantage(data, safe, "rounds"))
    return f"rounds to rel_gap {r['cocoa'].more['target']:g}: " + "; ".join(parts), ok


def cocoa_time(r: Results) -> Tuple[str, bool]:
    res = r["cocoa"]
    s = res.stats
    ups = [(k, advantage(s[f"k{k}"], s["k1"])) for k in (2, 4)]
    setup = ", ".join(f"K = {k}: {res.extras[f'k{k}'].get('sigma_s', 0):.2f}s" for k in (2, 4))
    h = "; ".join(n for n in res.extras["k1"].get("notes", []) if "local_epochs" in n)
    text = (f"K = 1: {_t(s['k1'])}; " + "; ".join(f"K = {k}: {_t(s[f'k{k}'])} ({_x(a)})" for k, a in ups)
            + f"; sigma' computed once per K before the clock ({setup})" + (f"; {h}" if h else ""))
    return text, any(_above(a, SOONER) for _, a in ups)


def cocoa_compressed(r: Results) -> Tuple[str, bool]:
    res = r["cocoa"]
    s = res.stats
    c, plain = s["k4_compressed"], s["k4"]
    adv = advantage(c, plain, "bits")
    text = (f"K = 4, {_compressor(res.more['settings']['k4_compressed'])} with DIANA's shifts: {_x(adv)} fewer bits "
            f"({c.bits_to_target / 1e6:.1f} vs {plain.bits_to_target / 1e6:.1f} Mbit) to a certified rel_gap "
            f"{res.more['target']:g}, {_r(c)} vs {_r(plain)} rounds")
    return text, c.reached and _above(adv)


# ------------------------------------------------------------------------------ DistBelief
def _lr(r: Results, arm: str) -> str:
    lr = r["distbelief"].extras.get(arm, {}).get("lr")
    return f", lr {lr:g}" if lr is not None else ""


def db_adagrad(r: Results) -> Tuple[str, bool]:
    s = r["distbelief"].stats
    a = s["downpour_adagrad"]
    fixed, one = advantage(a, s["downpour_fixed"]), advantage(a, s["sgd_1"])
    text = (f"Adagrad, 2 replicas{_lr(r, 'downpour_adagrad')}: {_t(a)}; fixed rate, 2 replicas"
            f"{_lr(r, 'downpour_fixed')}: {_t(s['downpour_fixed'])} ({_x(fixed)}); SGD, 1 replica{_lr(r, 'sgd_1')}: "
            f"{_t(s['sgd_1'])} ({_x(one)}); training loss {r['distbelief'].more['target']:g}, rates tuned on one grid")
    return text, _above(fixed, SOONER) and _above(one, SOONER)


def db_replicas(r: Results) -> Tuple[str, bool]:
    s = r["distbelief"].stats
    arms = [(1, s["adagrad_1"]), (2, s["downpour_adagrad"]), (4, s["adagrad_4"])]
    ups = [advantage(b, a) for (_, a), (_, b) in zip(arms, arms[1:])]
    text = (", ".join(f"{k} replica{'s' if k > 1 else ''}: {_t(a)}" for k, a in arms)
            + f" (each step {', '.join(map(_x, ups))}; 2 workers on 2 cores)")
    return text, all(_above(u, SOONER) for u in ups)


def db_sandblaster(r: Results) -> Tuple[str, bool]:
    s = r["distbelief"].stats["sandblaster_lbfgs"]
    return f"{_t(s)} (final training loss {s.final:.3f})", s.reached


def db_killed(r: Results) -> Tuple[str, bool]:
    res = r["distbelief"]
    s, ex = res.stats["adagrad_killed"], res.extras.get("adagrad_killed", {})
    killed = ex.get("killed", [])
    text = (f"{len(killed)} worker process killed {res.more['settings']['adagrad_killed'].get('kill_worker_after_s')}s "
            f"after the replicas started; {len(ex.get('failures', []))} failure(s) recorded; reached the target: "
            f"{_t(s)} (without the kill: {_t(res.stats['downpour_adagrad'])})")
    return text, bool(killed) and s.reached


def _step(r: Results, arm: str) -> Mapping[str, Any]:
    """A model-parallel arm's counters (median step time after warm-up, parameters, bytes per step)."""
    return r["distbelief_model_parallel"].extras[arm]["counters"]


def _partitioned(r: Results, size: str) -> Tuple[str, float, Mapping[str, Any]]:
    """What K = 1, 2 (and 4, when it ran) measured for the model ``size`` (large, small); K = 2's ratio."""
    one, two = _step(r, f"{size}_k1"), _step(r, f"{size}_k2")
    ratio = two["step_s"] / one["step_s"]
    text = (f"{one['n_params']:,} parameters: a step {one['step_s'] * 1e3:.1f} ms with K = 1, "
            f"{two['step_s'] * 1e3:.1f} ms with K = 2 ({ratio:.2f}x)")
    extras = r["distbelief_model_parallel"].extras
    if f"{size}_k4" in extras:
        four = _step(r, f"{size}_k4")
        text += f", {four['step_s'] * 1e3:.1f} ms with K = 4 ({four['step_s'] / one['step_s']:.2f}x)"
    text += (f"; {two['bytes_per_step'] / 1e6:.3f} MB sent per step with K = 2 (the widths give "
             f"{two['bytes_per_step_predicted'] / 1e6:.3f}); medians of {two['steps_measured']} steps after warm-up, "
             "2 workers of one BLAS thread")
    return text, ratio, one


def db_partitions_large(r: Results) -> Tuple[str, bool]:
    text, ratio, one = _partitioned(r, "large")
    return text, one["n_params"] >= 4_000_000 and ratio <= 0.7


def db_partitions_small(r: Results) -> Tuple[str, bool]:
    text, ratio, one = _partitioned(r, "small")
    return text, one["n_params"] <= 50_000 and ratio >= 1.0


# seed, claim, the run its line links to, the runs it reads, the measurement
CLAIMS: List[Tuple[str, str, str, Tuple[str, ...], Callable[[Results], Tuple[str, bool]]]] = [
    ("DuHL", "Gap selection reaches the target at least 10x sooner than sequential streaming at a 25% budget, "
             "and sooner than random blocks", "duhl", ("duhl",), duhl_speedup),
    ("DuHL", "With the budget swept (0.1, 0.25, 0.5), the advantage over sequential shrinks as the budget grows",
     "duhl", ("duhl_budget10", "duhl", "duhl_budget50"), duhl_budgets),
    ("DIANA", "Converges linearly to the exact optimum with compressed messages; the same compressor without "
              "shifts stalls at a neighbourhood", "diana", ("diana",), diana_exact),
    ("DIANA", "Fewer bits than uncompressed GD to the same suboptimality", "diana", ("diana",), diana_bits),
    ("CoCoA+", "Adding (gamma = 1, sigma' = K) needs fewer rounds than averaging (gamma = 1/K) for the same K",
     "cocoa_svm", ("cocoa_svm",), cocoa_adding),
    ("CoCoA+", "With sigma' from the data, K > 1 needs close to K = 1's rounds (at most 1.5x) and fewer than "
               "with sigma' = K", "cocoa", ("cocoa",), cocoa_rounds),
    ("CoCoA+", "K > 1 parts reach the target sooner in time than K = 1", "cocoa", ("cocoa",), cocoa_time),
    ("CoCoA+ (ours)", "Compressed updates with shifts reach the same certified gap with fewer bits", "cocoa",
     ("cocoa",), cocoa_compressed),
    ("DistBelief", "Downpour with Adagrad reaches the target sooner than Downpour with a fixed rate and than one "
                   "replica", "distbelief", ("distbelief",), db_adagrad),
    ("DistBelief", "More replicas reach the target sooner (1, 2, 4)", "distbelief", ("distbelief",), db_replicas),
    ("DistBelief", "Sandblaster L-BFGS reaches the target", "distbelief", ("distbelief",), db_sandblaster),
    ("DistBelief", "A replica killed mid-run does not stop training", "distbelief", ("distbelief",), db_killed),
    ("DistBelief", "Model parallelism: cutting a large model (>= 4M parameters) across K = 2 workers speeds up its "
                   "step (at most 0.7x the time of K = 1)", "distbelief_model_parallel",
     ("distbelief_model_parallel",), db_partitions_large),
    ("DistBelief", "... and not a small model's (<= 50,000 parameters): K = 2 is no faster than K = 1",
     "distbelief_model_parallel", ("distbelief_model_parallel",), db_partitions_small),
]


def evaluate(results: Results, errors: Optional[Mapping[str, str]] = None,
             claims: Optional[List] = None) -> List[Dict[str, str]]:
    """One row per claim: seed, claim, measured, holds ("holds", "does not hold", "not measured"), run."""
    errors = dict(errors or {})
    rows = []
    for seed, claim, run, needs, measure in claims or CLAIMS:
        missing = [n for n in needs if n not in results]
        if missing:
            why = "; ".join(f"{n}: {errors.get(n, 'not run')}" for n in missing)
            rows.append(dict(seed=seed, claim=claim, measured=f"not measured ({why})", holds="not measured", run=run))
            continue
        try:
            measured, holds = measure(results)
        except KeyError as error:  # an arm the claim reads is not in the run (overridden away)
            measured, holds = f"not measured (no arm or value {error})", None
        rows.append(dict(seed=seed, claim=claim, measured=measured, run=run,
                         holds="not measured" if holds is None else ("holds" if holds else "does not hold")))
    return rows
