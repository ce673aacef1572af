"""The end of an experiment: per-arm numbers, speedups, a table, plots, a verdict.

Everything here is computed from the arms' traces (flat rows in the metric
vocabulary), never from a solver's internals, so every family's arms compare
the same way: "the first row at the target" and speedups are computed here
only. The target applies to ``rel_gap``, to ``suboptimality`` in traces without
a gap (DIANA), or to ``train_loss`` (DistBelief, which also follows
``test_accuracy``); ``bits_sent`` (distributed arms) gives bits to the target
and a plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import pandas as pd
from rich.table import Table


@dataclass
class ArmStats:
    """One arm's result against a target on one trace column (``metric``)."""

    reached: bool
    time_to_target_s: float  # NaN when the target was not reached
    epochs_to_target: float
    bytes_to_target: float
    final: float  # the metric's last value
    time_s: float  # the whole run
    epochs: float
    bytes_h2d: float
    status: str = ""
    metric: str = "rel_gap"
    bits_to_target: float = math.nan
    bits_sent: float = math.nan  # the whole run (NaN: the solver sends nothing)
    samples_to_target: float = math.nan
    samples: float = math.nan
    rounds_to_target: float = math.nan  # (communication rounds: compared, not logged)
    rounds: float = math.nan

    def run_metrics(self) -> Dict[str, float]:
        """The per-run metrics of the vocabulary (to-target ones only when reached)."""
        metrics = {f"final_{self.metric}": self.final, "reached_target": float(self.reached)}
        if self.reached:
            metrics.update({k: v for k, v in (("time_to_target_s", self.time_to_target_s),
                                              ("epochs_to_target", self.epochs_to_target),
                                              ("bytes_to_target", self.bytes_to_target),
                                              ("bits_to_target", self.bits_to_target),
                                              ("samples_to_target", self.samples_to_target))
                            if not math.isnan(v)})
        return metrics


LABELS = {"rel_gap": "relative duality gap", "suboptimality": "suboptimality F - F*",
          "train_loss": "training loss", "test_accuracy": "test accuracy"}
# Columns whose target is a floor (reached from below); every other one is reached from above.
RISING = ("test_accuracy",)


def progress_metric(trace: pd.DataFrame) -> str:
    """rel_gap when the trace has a gap, else suboptimality (DIANA), else train_loss (DistBelief)."""
    for column in ("rel_gap", "suboptimality", "train_loss"):
        if column in trace.columns:
            return column
    raise ValueError(f"a trace with none of rel_gap, suboptimality, train_loss: {list(trace.columns)}")


def first_hit(trace: pd.DataFrame, column: str, target: float) -> Optional[pd.Series]:
    """The first row at or below the target (at or above it for a rising column), or None.
    In a trace with a ``certified`` column (compressed CoCoA+: some gaps are estimates),
    only certified rows count."""
    if column not in trace.columns:
        return None
    if "certified" in trace.columns:
        trace = trace[trace["certified"] > 0]
    values = trace[column]
    hits = trace[values >= target] if column in RISING else trace[values <= target]
    return hits.iloc[0] if len(hits) else None


def arm_stats(trace: pd.DataFrame, target: float, status: str = "", metric: Optional[str] = None) -> ArmStats:
    """The arm's numbers at the first row that reaches ``target`` on ``metric``
    (default: the trace's progress metric), and over the whole run."""
    metric = metric or progress_metric(trace)
    last = trace.iloc[-1]
    first = first_hit(trace, metric, target)

    def at(row, column):
        return float(row[column]) if row is not None and column in trace.columns else math.nan

    return ArmStats(
        reached=first is not None,
        time_to_target_s=at(first, "time_s"), epochs_to_target=at(first, "epoch"),
        bytes_to_target=at(first, "bytes_h2d"), final=float(last[metric]),
        time_s=float(last["time_s"]), epochs=at(last, "epoch"), bytes_h2d=at(last, "bytes_h2d"),
        status=status, metric=metric, bits_to_target=at(first, "bits_sent"), bits_sent=at(last, "bits_sent"),
        samples_to_target=at(first, "samples"), samples=at(last, "samples"),
        rounds_to_target=at(first, "round"), rounds=at(last, "round"))


class RunResults(dict):
    """What an experiment returns: per-arm numbers (the dict, as before), and for callers
    that compare experiments (pipelines.reproduce) the parent run's id, each arm's
    :class:`ArmStats` (``stats``; DistBelief also ``accuracy``) and what each solver
    noted (``extras``: sigma', H, ...)."""

    def __init__(self, arms: Mapping[str, dict], run_id: str = "", stats: Optional[Mapping[str, "ArmStats"]] = None,
                 extras: Optional[Mapping[str, dict]] = None, **more: Mapping):
        super().__init__(arms)
        self.run_id = run_id
        self.stats = dict(stats or {})
        self.extras = dict(extras or {})
        self.more = dict(more)


@dataclass
class Speedup:
    value: float  # baseline's time to target / this arm's time to target
    lower_bound: bool  # the baseline never reached the target: its whole run time was used

    def __str__(self) -> str:
        return f"{'>' if self.lower_bound else ''}{self.value:.1f}x"


def speedup(arm: ArmStats, baseline: ArmStats) -> Optional[Speedup]:
    """None when the arm itself did not reach the target (nothing to compare)."""
    return advantage(arm, baseline, "time")


def advantage(arm: ArmStats, baseline: ArmStats, on: str = "time") -> Optional[Speedup]:
    """How many times less ``on`` (time, epochs, rounds, bits or samples to the target) the arm
    needed than the baseline; a lower bound (the baseline's whole run) when the baseline
    did not reach the target; None when the arm did not."""
    to_target, whole = {"time": ("time_to_target_s", "time_s"), "epochs": ("epochs_to_target", "epochs"),
                        "rounds": ("rounds_to_target", "rounds"), "bits": ("bits_to_target", "bits_sent"),
                        "samples": ("samples_to_target", "samples")}[on]
    mine = getattr(arm, to_target)
    if not arm.reached or not mine > 0:
        return None
    if baseline.reached:
        return Speedup(getattr(baseline, to_target) / mine, False)
    return Speedup(getattr(baseline, whole) / mine, True)


def speedup_metrics(stats: Mapping[str, ArmStats], main_arm: str) -> Dict[str, float]:
    """speedup_vs_<arm> of the main arm against every other arm (for the parent run)."""
    metrics = {}
    for name, other in stats.items():
        s = speedup(stats[main_arm], other) if main_arm in stats and name != main_arm else None
        if s is not None:
            metrics[f"speedup_vs_{name}"] = s.value
    return metrics


def speedup_texts(stats: Mapping[str, ArmStats], main_arm: str) -> Dict[str, str]:
    """speedup_metrics as the table writes them ('>4.4x': a lower bound), for the sweep's summary."""
    texts = {}
    for name, other in stats.items():
        s = speedup(stats[main_arm], other) if main_arm in stats and name != main_arm else None
        if s is not None:
            texts[f"speedup_vs_{name}"] = str(s)
    return texts


def table(stats: Mapping[str, ArmStats], baselines: List[str], target: float) -> Table:
    metric = next((s.metric for s in stats.values()), "rel_gap")
    with_bytes = any(not math.isnan(s.bytes_h2d) for s in stats.values())
    with_bits = any(not math.isnan(s.bits_sent) for s in stats.values())
    t = Table(title=f"To {metric} {'>=' if metric in RISING else '<='} {target:g} "
                    "('>': not reached, the whole run shown)")
    for column in ("arm", "status", "time (s)", "epochs", *(["GB host->device"] if with_bytes else []),
                   *(["Mbit sent"] if with_bits else []), f"final {metric}",
                   *(f"speedup vs {b}" for b in baselines)):
        t.add_column(column, justify="left" if column in ("arm", "status") else "right")
    for name, s in stats.items():
        # Bytes (bits) to the target when it was reached, else all the run moved (sent).
        moved = s.bytes_to_target if s.reached else s.bytes_h2d
        sent = s.bits_to_target if s.reached else s.bits_sent
        cells = [name, s.status,
                 f"{s.time_to_target_s:.2f}" if s.reached else f"> {s.time_s:.2f}",
                 f"{s.epochs_to_target:.1f}" if s.reached else f"> {s.epochs:.1f}",
                 *([f"{moved / 1e9:.3f}"] if with_bytes else []),
                 *([("" if s.reached else "> ") + f"{sent / 1e6:.3f}"] if with_bits else []),
                 f"{s.final:.2e}"]
        for b in baselines:
            sp = speedup(s, stats[b]) if b in stats and b != name else None
            cells.append(str(sp) if sp else "-")
        t.add_row(*cells)
    return t


def disk_table(traces: Mapping[str, Any], extras: Mapping[str, Mapping[str, Any]], data_bytes: int) -> Table:
    """What each arm asked of the disk and of RAM: GB read by its trace (``bytes_disk``) and by the
    operating system (/proc/self/io), passes over the data, rounds, its last certified rel_gap and
    its peak RSS above its start."""
    t = Table(title=f"Disk and RAM ({data_bytes / 1e9:.2f} GB of data; OS: /proc/self/io read_bytes, "
                    "peak RSS above the arm's start; of the workers for an arm that runs on them: their reads' sum, "
                    "the largest worker's peak)")
    for column in ("arm", "time (s)", "GB read (trace)", "GB read (OS)", "passes", "read GB/s", "rounds",
                   "last certified rel_gap", "peak RSS +GB", "worker peak RSS +GB"):
        t.add_column(column, justify="left" if column == "arm" else "right")
    for name, trace in traces.items():
        extra = extras.get(name, {})
        disk = float(trace["bytes_disk"].iloc[-1]) if "bytes_disk" in trace else math.nan
        disk_s = float(trace["disk_s"].iloc[-1]) if "disk_s" in trace else math.nan
        certified = trace[trace["certified"] > 0] if "certified" in trace else trace
        last = float(certified["rel_gap"].iloc[-1]) if len(certified) and "rel_gap" in certified else math.nan

        def gb(v):
            return "-" if v is None or math.isnan(v) else f"{v / 1e9:.2f}"
        os_read = extra.get("workers_os_read_bytes", extra.get("os_read_bytes"))
        t.add_row(name, f"{float(trace['time_s'].iloc[-1]):.2f}", gb(disk), gb(os_read),
                  "-" if math.isnan(disk) else f"{disk / data_bytes:.1f}",
                  "-" if math.isnan(disk) or not disk_s else f"{disk / disk_s / 1e9:.2f}",
                  f"{int(trace['round'].iloc[-1]) + 1}", f"{last:.1e}", gb(extra.get("peak_rss_delta")),
                  gb(extra.get("workers_peak_rss_delta")))
    return t


def markdown(t: Table, caption: bool = True) -> str:
    """A rich table (cells already rounded) as a markdown table, for the run description
    (``mlflow.note.content``) and the comparison artifact."""
    def row(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    columns = list(t.columns)
    lines = [f"{t.title}", ""] if caption and t.title else []
    lines += [row(c.header for c in columns),
              row("---" if c.justify == "left" else "---:" for c in columns)]
    lines += [row(cells) for cells in zip(*(list(c.cells) for c in columns))]
    return "\n".join(lines)


def significant(value: float, digits: int = 3) -> float:
    """A ratio for display (the runs table shows every digit it is given)."""
    return float(f"{value:.{digits}g}")


def verdict(stats: Mapping[str, ArmStats], main_arm: str, baselines: List[str],
            target: float) -> str:
    main = stats.get(main_arm)
    if main is None:
        return f"No arm named '{main_arm}' ran."
    if not main.reached:
        return (f"{main_arm} did not reach {main.metric} {target:g} "
                f"(final {main.final:.2e} after {main.time_s:.1f}s, {main.status}).")
    parts = []
    for b in baselines:
        sp = speedup(main, stats[b]) if b in stats else None
        if sp is not None:
            parts.append(f"{sp} vs {b}")
    compared = "; speedup " + ", ".join(parts) if parts else ""
    return f"{main_arm} reached {main.metric} {target:g} in {main.time_to_target_s:.2f}s{compared}."


def save_plots(traces: Mapping[str, pd.DataFrame], target: float, out_dir: Path,
               title: str = "", colours: Optional[Mapping[str, str]] = None) -> List[Path]:
    """rel_gap (or suboptimality) against time, against bytes moved host->device, read
    from disk and against bits sent (each when some trace has it), one line per arm, in
    the arm's colour (``colours``: the runs' mlflow.runColor) when given. Certified rows solid,
    estimates between certificates (stale gaps: a trace's ``certified`` = 0 rows) thin and dashed."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    paths = []
    metric = progress_metric(next(iter(traces.values()))) if traces else "rel_gap"
    ylabel = LABELS.get(metric, metric)
    for x, label, scale, name in (("time_s", "time (s)", 1.0, "time"),
                                  ("bytes_h2d", "GB moved host -> device", 1e-9, "bytes"),
                                  ("bytes_disk", "GB read from disk", 1e-9, "disk"),
                                  ("bits_sent", "Mbit sent (all workers)", 1e-6, "bits")):
        if x != "time_s" and not any(x in trace.columns for trace in traces.values()):
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for arm, trace in traces.items():
            if x not in trace.columns:
                continue
            estimates = trace[:0]
            if "certified" in trace.columns:
                estimates = trace[(trace["certified"] == 0) & (trace[metric] > 0)]
                trace = trace[trace["certified"] > 0]
            line, = ax.plot(trace[x] * scale, trace[metric], label=arm, color=(colours or {}).get(arm), marker=".")
            if len(estimates):  # estimates between certificates: thin, dashed, the arm's colour
                ax.plot(estimates[x] * scale, estimates[metric], color=line.get_color(), linestyle="--",
                        linewidth=0.8, alpha=0.6, label=f"{arm} (estimate)")
        ax.axhline(target, color="grey", linestyle=":", label="target")
        ax.set(yscale="log", xlabel=label, ylabel=ylabel, title=title)
        ax.legend()
        fig.tight_layout()
        paths.append(Path(out_dir) / f"{metric}_vs_{name}.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths
