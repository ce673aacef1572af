"""What a person sees of the runs in the MLflow UI (``make ui``, MLflow 3.17): the links
printed after a run, one colour per arm role, and saved views of the curves.

- Links: MLflow 3 opens an experiment on its GenAI overview unless the URL says
  ``workflowType=machine_learning``; no server setting changes that, so every link
  printed here carries it.
- Colours: the ``mlflow.runColor`` tag (lowercase ``#rrggbb``) colours a run in the runs
  table and its charts; the report's matplotlib plots use the same colours.
- Saved views: an experiment tag ``mlflow.sharedViewState.<id>`` holds a runs-page view
  (its filter, columns and charts). It is the only way to set a chart's log scale or its
  x-axis from the server; it opens with ``viewStateShareKey=<id>`` in the URL and is
  listed in the runs page's view menu. The UI ignores expansion in a view, so a view
  sorts by run name, which lists nested runs flat and lets every arm be charted.
"""

from __future__ import annotations

import base64
import json
import os
import time
import zlib
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence
from urllib.parse import quote

from pipelines.tracking import PROJECT_ROOT, relative

ML = "workflowType=machine_learning"
# Main arm first, then the baselines in order, then every other arm (tab10 without its grey).
PALETTE = ("#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
           "#17becf")
PARENT_COLOUR = "#7f7f7f"  # experiment runs: grey, not an arm's colour
SWEEP_COLOUR = "#3f3f3f"


def arm_colours(arms: Iterable[str], main_arm: str, baselines: Sequence[str]) -> Dict[str, str]:
    """{arm: colour} by role: the main arm red, its baselines blue then orange, the rest after."""
    arms = list(arms)
    ordered = [a for a in dict.fromkeys([main_arm, *baselines]) if a in arms]
    ordered += [a for a in arms if a not in ordered]
    return {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(ordered)}


# ------------------------------------------------------------------- links ---
def ui_base(tracking_uri: str) -> str:
    """Where the UI of this store is served: the tracking server itself, or `make ui`
    (http://127.0.0.1:$PORT, 5000 unless the Makefile's PORT says otherwise)."""
    if tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/")
    return f"http://127.0.0.1:{os.environ.get('PORT') or 5000}"


def run_link(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """A run's page: its description (the verdict), metrics, params and child runs."""
    return f"{ui_base(tracking_uri)}/#/experiments/{experiment_id}/runs/{run_id}?{ML}"


def view_link(tracking_uri: str, experiment_id: str, view_id: str, charts: bool = True) -> str:
    """The runs page with a saved view; ``charts``: its chart view."""
    return (f"{ui_base(tracking_uri)}/#/experiments/{experiment_id}/runs?{ML}&viewStateShareKey={quote(view_id)}"
            + ("&compareRunsMode=CHART" if charts else ""))


def serve_command(tracking_uri: str) -> str:
    """The command that serves this store's UI (`make ui`, with MLFLOW_DB for another sqlite file)."""
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri[len("sqlite:///"):]).resolve()
        return "make ui" if db == PROJECT_ROOT / "mlflow.db" else f"make ui MLFLOW_DB={relative(db)}"
    return "the tracking server" if tracking_uri.startswith("http") else f"mlflow ui --backend-store-uri {tracking_uri}"


def print_links(console: Any, tracker: Any, run_id: str, view_id: Optional[str], what: str) -> None:
    """After an experiment or a sweep: where to look at it."""
    if not tracker.enabled or not run_id:
        return
    console.print(f"MLflow UI ({serve_command(tracker.uri)}):")
    console.print(f"  {what}: {run_link(tracker.uri, tracker.experiment_id, run_id)}", soft_wrap=True)
    if view_id:
        console.print(f"  curves against solver time: {view_link(tracker.uri, tracker.experiment_id, view_id)}",
                      soft_wrap=True)


# ------------------------------------------------------------- saved views ---
def _column(kind: str, key: str) -> str:
    return f"{kind}.`{key}`"  # the runs table's column key, as selectedColumns names it


def line_chart(metric: str, section: str, *, log_y: bool, x_axis: str = "time-relative",
               title: Optional[str] = None) -> Dict[str, Any]:
    """A line chart of the runs page (``x_axis``: time-relative, step or time)."""
    return {
        "uuid": f"{section}-{metric}-{x_axis}-{'log' if log_y else 'lin'}", "type": "LINE",
        "runsCountToCompare": 100, "metricSectionId": section, "deleted": False, "isGenerated": False,
        "displayName": title or metric, "metricKey": metric, "selectedMetricKeys": [metric],
        "lineSmoothness": 0, "xAxisScaleType": "linear", "scaleType": "log" if log_y else "linear",
        "range": {}, "xAxisKey": x_axis, "selectedXAxisMetricKey": "", "yAxisKey": "metric",
        "yAxisExpressions": [], "ignoreOutliers": False, "useGlobalXaxisKey": False,
        "useGlobalLineSmoothing": False,
    }


def curve_charts(metrics: Sequence[str], section: str) -> List[Dict[str, Any]]:
    """For each progress metric: log-scaled against solver time, its log10 against solver
    time (the log axis reads ticks below 1e-6 as 0), and log-scaled against rounds."""
    charts = []
    for metric in metrics:
        if metric in ("rel_gap", "suboptimality"):
            charts += [line_chart(metric, section, log_y=True, title=f"{metric} (log) vs solver time [s]"),
                       line_chart(f"log10_{metric}", section, log_y=False,
                                  title=f"log10_{metric} vs solver time [s]"),
                       line_chart(metric, section, log_y=True, x_axis="step", title=f"{metric} (log) vs round")]
        else:
            charts.append(line_chart(metric, section, log_y=False, title=f"{metric} vs solver time [s]"))
    return charts


def view_state(search_filter: str, charts: List[Dict[str, Any]], metric_columns: Sequence[str],
               param_columns: Sequence[str], section: str, flat: bool = True) -> Dict[str, Any]:
    """A runs-page view: the runs ``search_filter`` selects, flat (sorted by name; else newest
    first, nested), every one charted (SHOW_ALL; the default charts only the first ten rows)."""
    order = _column("tags", "mlflow.runName") if flat else "attributes.start_time"
    return {
        "searchFilter": search_filter, "orderByKey": order, "orderByAsc": flat,
        "startTime": "ALL", "lifecycleFilter": "Active", "modelVersionFilter": "All Runs", "datasetsFilter": [],
        "selectedColumns": ([] if flat else [_column("attributes", "Description")])
        + [_column("metrics", m) for m in metric_columns] + [_column("params", p) for p in param_columns],
        "columnOrder": [], "columnWidths": {}, "runsHiddenMode": "SHOW_ALL", "compareRunCharts": charts,
        "compareRunSections": [{"uuid": section, "name": "Curves against solver time", "display": True,
                                "isReordered": True, "deleted": False, "isGenerated": False}],
        "viewMaximized": False, "runListHidden": False, "isAccordionReordered": True, "groupBy": None,
        "groupsExpanded": {}, "useGroupedValuesInCharts": True, "hideEmptyCharts": True,
        "globalLineChartConfig": {"xAxisKey": "time-relative", "lineSmoothness": 0, "selectedXAxisMetricKey": ""},
    }


def view_name(run_name: str) -> str:
    """A view's name in the runs page's view menu: the run's, and when (runs share names)."""
    return f"{run_name} {time.strftime('%Y-%m-%d %H:%M')}: curves vs solver time"


def save_view(tracker: Any, view_id: str, name: str, state: Mapping[str, Any]) -> None:
    """Store a view as the experiment tag the runs page reads (its state deflated: a tag
    holds at most 5000 characters)."""
    if not tracker.enabled:
        return
    packed = "deflate;" + base64.b64encode(zlib.compress(json.dumps(state).encode(), 9)).decode()
    now = int(time.time() * 1000)
    value = json.dumps({"name": name, "createdAt": now, "updatedAt": now, "state": packed})
    with tracker.timed():
        tracker.client.set_experiment_tag(tracker.experiment_id, f"mlflow.sharedViewState.{view_id}", value)


def save_arms_view(tracker: Any, parent_id: str, name: str, metrics: Sequence[str], metric_columns: Sequence[str],
                   param_columns: Sequence[str] = (), by: str = "mlflow.parentRunId") -> str:
    """A view of the arm runs whose tag ``by`` is ``parent_id`` (an experiment's arms, or with
    ``by='sweep_run_id'`` every arm of a sweep); returns its id."""
    view_id = f"{'sweep' if by == 'sweep_run_id' else 'arms'}-{parent_id}"
    section = f"s{parent_id[:10]}"
    state = view_state(f"tags.`{by}` = '{parent_id}'", curve_charts(metrics, section), metric_columns,
                       param_columns, section)
    save_view(tracker, view_id, name, state)
    return view_id


def note(verdict: str, table_markdown: str, experiment_id: Optional[str], view_id: Optional[str],
         base: str = "") -> str:
    """A parent run's description (``mlflow.note.content``, markdown on the run page; the runs
    table's Description column shows its first line, the verdict)."""
    lines = [verdict, "", table_markdown, "",
             "Times are solver time (warm-up and tracking excluded); MLflow's Duration column counts them too."]
    if view_id and experiment_id is not None:
        link = f"{base}#/experiments/{experiment_id}/runs?{ML}&viewStateShareKey={quote(view_id)}&compareRunsMode=CHART"
        lines.append(f"[Curves against solver time]({link}): these arms, log scale.")
    return "\n".join(lines)


COMPARISONS_VIEW = "comparisons"


def save_comparisons_view(tracker: Any, speedups: Sequence[str]) -> None:
    """The experiment's comparisons, newest first: the verdict (Description) and the speedups
    of the latest comparison's main arm, with the data, model and budget (the view menu's
    "Comparisons: verdicts and speedups")."""
    state = view_state("tags.`verdict` LIKE '%'", [], speedups,
                       ["data.name", "model.name", "device.memory_budget"], "comparisons", flat=False)
    save_view(tracker, COMPARISONS_VIEW, "Comparisons: verdicts and speedups", state)
