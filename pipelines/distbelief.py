"""The DistBelief comparison (Dean et al. 2012, Fig. 4-5): single-replica SGD,
Downpour with a fixed rate, Downpour with Adagrad, Sandblaster L-BFGS on the
same data and model: time and samples to a target training loss and to a
target test accuracy, one table.

    python -m pipelines.distbelief --data w8a --model logistic --target-loss 0.14
    python -m pipelines.distbelief --data sphere --model mlp --target-accuracy 0.9

The Hydra experiment is ``python -m pipelines.experiment experiment=distbelief``
(pipelines.distbelief_experiment); this runner is a quick standalone look.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

import pandas as pd
from rich.console import Console
from rich.table import Table

from tasks.distbelief_common import data_spec
from tasks.downpour import run_downpour
from tasks.sandblaster import run_sandblaster

PROJECT_ROOT = Path(__file__).resolve().parents[1]

ARMS: Dict[str, Dict[str, Any]] = {
    "sgd_1": {"algo": "downpour", "n_replicas": 1, "rule": "fixed"},
    "downpour_fixed": {"algo": "downpour", "rule": "fixed"},
    "downpour_adagrad": {"algo": "downpour", "rule": "adagrad"},
    "sandblaster_lbfgs": {"algo": "sandblaster"},
}


def first_hit(trace: pd.DataFrame, column: str, target: Optional[float], above: bool) -> tuple:
    if target is None or column not in trace:
        return math.nan, math.nan
    hits = trace[trace[column] >= target] if above else trace[trace[column] <= target]
    if not len(hits):
        return math.nan, math.nan
    return float(hits["time_s"].iloc[0]), float(hits["samples"].iloc[0])


def run_arm(client, spec, model_cfg: Mapping[str, Any], arm: Mapping[str, Any], **common):
    arm = dict(arm)
    algo = arm.pop("algo")
    if algo == "downpour":
        return run_downpour(client, spec, model_cfg, **arm, **{k: v for k, v in common.items()
                                                                if k in ("max_time", "target_loss", "target_accuracy",
                                                                         "lr", "batch_size", "seed", "eval_every_s",
                                                                         "warmup_steps", "n_eval")})
    return run_sandblaster(client, spec, model_cfg, **arm, **{k: v for k, v in common.items()
                                                              if k in ("max_time", "target_loss", "target_accuracy",
                                                                       "seed", "n_eval")})


def arm_row(name: str, result, target_loss, target_accuracy) -> Dict[str, Any]:
    tl, sl = first_hit(result.trace, "train_loss", target_loss, above=False)
    ta, sa = first_hit(result.trace, "test_accuracy", target_accuracy, above=True)
    return {"arm": name, "status": result.status, "time_to_target_s": tl, "samples_to_target": sl,
            "time_to_accuracy_s": ta, "samples_to_accuracy": sa, "final_train_loss": result.train_loss,
            "final_test_accuracy": result.test_accuracy, "time_s": result.time_s,
            "failures": len(result.failures)}


def table(rows, target_loss, target_accuracy) -> Table:
    t = Table(title=f"DistBelief: to train loss <= {target_loss} / test accuracy >= {target_accuracy} "
                    "('-': not reached)")
    for c in ("arm", "status", "time to loss (s)", "samples to loss", "time to acc. (s)", "samples to acc.",
              "final loss", "final acc.", "run (s)", "failures"):
        t.add_column(c, justify="left" if c in ("arm", "status") else "right")
    f = lambda v, fmt: "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)  # noqa: E731
    for r in rows:
        t.add_row(r["arm"], r["status"], f(r["time_to_target_s"], ".2f"), f(r["samples_to_target"], ".0f"),
                  f(r["time_to_accuracy_s"], ".2f"), f(r["samples_to_accuracy"], ".0f"),
                  f(r["final_train_loss"], ".4f"), f(r["final_test_accuracy"], ".4f"), f(r["time_s"], ".1f"),
                  str(r["failures"]))
    return t


def main(argv=None) -> list:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", choices=["w8a", "sphere"], default="w8a")
    p.add_argument("--model", choices=["logistic", "svm", "mlp"], default="logistic")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--target-loss", type=float, default=None)
    p.add_argument("--target-accuracy", type=float, default=None)
    p.add_argument("--max-time", type=float, default=30.0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--run-to-end", action="store_true", help="do not stop arms at the targets")
    a = p.parse_args(argv)
    from dask.distributed import Client, LocalCluster

    from tasks.data import LibsvmData, load_dataset
    from tasks.distbelief_data import sphere_dataset

    cache = PROJECT_ROOT / ".cache" / "data"
    ds = (load_dataset(LibsvmData(path=str(PROJECT_ROOT.parent / "shared/datasets/w8a"), n_features=300), cache,
                       PROJECT_ROOT) if a.data == "w8a" else sphere_dataset(cache))
    spec = data_spec(ds)
    model_cfg = {"name": a.model, "C": 1.0, **({"hidden": a.hidden, "alpha": 1e-4} if a.model == "mlp" else {})}
    console = Console(width=160)
    console.print(f"data {a.data}: {spec.n_rows} x {spec.n_features} (train {spec.n_train}), model {model_cfg}")
    rows = []
    with LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      memory_limit=0) as cluster, Client(cluster) as client:
        client.wait_for_workers(a.workers, timeout=120)
        for name in a.arms.split(","):
            result = run_arm(client, spec, model_cfg, ARMS[name], max_time=a.max_time, lr=a.lr,
                             batch_size=a.batch_size, eval_every_s=0.5,
                             target_loss=None if a.run_to_end else a.target_loss,
                             target_accuracy=None if a.run_to_end else a.target_accuracy)
            rows.append(arm_row(name, result, a.target_loss, a.target_accuracy))
            console.print(f"{name}: {result.status} in {result.time_s:.1f}s, counters {result.counters}")
    console.print(table(rows, a.target_loss, a.target_accuracy))
    return rows


if __name__ == "__main__":
    main()
