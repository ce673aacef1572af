"""The step-time report of model-parallel arms (``algo: model_parallel``; the paper's Fig. 3).

Each such arm is set beside its *one-partition arm*: the arm with ``n_partitions: 1`` and
the same model, replicas and minibatch size. Its speedup is that arm's median step time
over its own (warm-up rounds left out of both); a table, per-run metrics and a verdict
are made from the arms' counters (``tasks.distbelief.model_parallel``), never timed here.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Mapping, Optional

from rich.table import Table

CURVES = ("step_s", "samples_per_s")  # per-round curves in the arms' view, besides the loss
# counter -> per-run metric (medians over the steps after warm-up; not the curves' own names, which
# MLflow would show as the curve's last point)
RUN_METRICS = {"step_s": "step_s_median", "samples_per_s": "samples_per_s_median",
               "bytes_per_step": "bytes_per_step", "warmup_step_s": "warmup_step_s"}
COLUMNS = ("step_s_median", "samples_per_s_median", "bytes_per_step")  # per-run numbers in the arms' view


def run_metrics(counters: Mapping[str, Any]) -> Dict[str, float]:
    """The per-run metrics of a model-parallel arm."""
    return {name: float(counters[k]) for k, name in RUN_METRICS.items()
            if k in counters and not math.isnan(float(counters[k]))}


def _shape(settings: Mapping[str, Any]) -> str:
    """What a one-partition arm must share with an arm: model, replicas, minibatch."""
    return json.dumps({"model": settings.get("model"), "n_replicas": settings.get("n_replicas", 1),
                       "batch_size": settings.get("batch_size")}, sort_keys=True, default=str)


def baseline_of(name: str, arms: Mapping[str, Mapping[str, Any]]) -> Optional[str]:
    """The arm with one partition and the same model, replicas and minibatch as ``name`` (None: none)."""
    mine = _shape(arms[name])
    for other, settings in arms.items():
        if settings.get("algo") == "model_parallel" and settings.get("n_partitions", 2) == 1 \
                and _shape(settings) == mine:
            return other
    return None


def step_rows(arms: Mapping[str, Mapping[str, Any]], extras: Mapping[str, Mapping[str, Any]]) -> List[dict]:
    """One row per model-parallel arm that ran: its counters and its speedup over its one-partition arm."""
    rows = []
    for name, settings in arms.items():
        counters = extras.get(name, {}).get("counters")
        if settings.get("algo") != "model_parallel" or not counters:
            continue
        base = baseline_of(name, arms)
        base_step = extras.get(base, {}).get("counters", {}).get("step_s") if base else None
        step = counters["step_s"]
        speedup = base_step / step if base_step and step and base != name else None
        rows.append({"arm": name, "run_id": extras[name].get("run_id", ""), "n_params": counters["n_params"],
                     "n_partitions": counters["n_partitions"], "n_replicas": counters["n_replicas"],
                     "step_s": step, "warmup_step_s": counters.get("warmup_step_s", math.nan),
                     "steps_measured": counters.get("steps_measured", 0),
                     "samples_per_s": counters["samples_per_s"], "bytes_per_step": counters["bytes_per_step"],
                     "bytes_predicted": counters["bytes_per_step_predicted"],
                     "blas_threads": counters.get("blas_threads"), "baseline": base, "speedup": speedup,
                     "failures": counters.get("failures", 0)})
    return rows


def table(rows: List[dict]) -> Table:
    t = Table(title="Model parallelism: one step of a replica (median over the steps after warm-up; "
                    "a step takes as long as its slowest partition)")
    for c in ("arm", "parameters", "K", "R", "step (s)", "steps", "warm-up step (s)", "vs K = 1",
              "samples/s", "MB sent/step", "predicted"):
        t.add_column(c, justify="left" if c == "arm" else "right")
    for r in rows:
        ratio = f"{1 / r['speedup']:.2f}x" if r["speedup"] else "-"
        t.add_row(r["arm"], f"{r['n_params']:,}", str(r["n_partitions"]), str(r["n_replicas"]),
                  f"{r['step_s']:.4f}", str(r["steps_measured"]), f"{r['warmup_step_s']:.4f}", ratio,
                  f"{r['samples_per_s']:.0f}", f"{r['bytes_per_step'] / 1e6:.3f}", f"{r['bytes_predicted'] / 1e6:.3f}")
    return t


def verdict(rows: List[dict]) -> str:
    """One line: each model's step with K > 1 partitions as a share of its step with one."""
    parts = []
    for r in rows:
        if r["speedup"]:
            parts.append(f"{r['arm']} ({r['n_params']:,} parameters, K = {r['n_partitions']}): "
                         f"{1 / r['speedup']:.2f}x the step time of {r['baseline']}")
    return "; ".join(parts) + "." if parts else "No model-parallel arm had a one-partition arm to compare with."
