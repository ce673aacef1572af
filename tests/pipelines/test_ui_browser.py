"""The MLflow UI as a person sees it, in a headless Chromium (Playwright): a tiny experiment
(in-process) and a tiny sweep (the CLI) in one store, `mlflow ui` on a free loopback port
(the command `make ui` runs), then the printed links, the runs list, the colours, the
verdict and the curves against solver time. Run with `make test-ui` (marker ui; it installs
Debian's chromium and the `ui` extra); screenshots go to bench-results/ui/."""

import contextlib
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from mlflow.tracking import MlflowClient

from conftest import PROJECT_ROOT, TINY, compose_config
from pipelines.ui import COMPARISONS_VIEW, view_link

pytestmark = [pytest.mark.ui, pytest.mark.timeout(600)]  # the first test also makes the store
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the ui extra: make test-ui")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = PROJECT_ROOT / "bench-results" / "ui"
ARMS = ("duhl-gap", "sequential", "random", "resident")
LINK = re.compile(r"(http://127\.0\.0\.1:\d+/#/experiments/\S+)")
NAME_CELL = "[col-id='attributes.`Run Name`']"
# Client-side only: keep MLflow's assistant panel from covering the page.
QUIET = ("localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');"
         "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def links(text):
    """The links an experiment or a sweep printed: {what: url}."""
    return {line.split(": http")[0].strip(): LINK.search(line).group(1)
            for line in text.splitlines() if LINK.search(line)}


@pytest.fixture(scope="module")
def store(tmp_path_factory, empty_store):
    """A store holding one tiny experiment (run in this process) and a two-job sweep (the CLI);
    the links they printed point at PORT, where the UI is then served."""
    root = tmp_path_factory.mktemp("ui-store")
    shutil.copy(empty_store, root / "mlflow.db")
    uri, port = f"sqlite:///{root / 'mlflow.db'}", free_port()
    common = [f"tracking.uri={uri}", f"cache_dir={root / 'cache'}", *TINY]
    from pipelines.experiment import run_experiment

    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        mp.setenv("PORT", str(port))
        run_experiment(compose_config(*common), root / "out")
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "PORT": str(port)}
    sweep = subprocess.run([sys.executable, "-m", "pipelines.experiment", "-m", *common,
                            f"hydra.sweep.dir={root / 'multirun'}", "device.memory_budget=0.25,0.5"],
                           cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("duhl_lasso")
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    by_id = {r.info.run_id: r for r in runs}
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags and "sweep" not in r.data.tags)
    sweep_run = next(r for r in runs if r.data.tags.get("sweep") == "true")
    yield {"root": root, "db": root / "mlflow.db", "port": port, "client": client, "runs": by_id,
           "experiment_id": experiment.experiment_id, "parent": parent, "sweep": sweep_run,
           "arms": {r.data.tags["arm"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id},
           "experiment_links": links(printed.getvalue()), "sweep_links": links(sweep.stdout.split("Sweep:")[-1])}


@pytest.fixture(scope="module")
def server(store):
    """`mlflow ui` as `make ui` starts it, in its own process group (stopped as one)."""
    command = [os.path.join(os.path.dirname(sys.executable), "mlflow"), "ui", "--backend-store-uri",
               f"sqlite:///{store['db']}", "--host", "127.0.0.1", "--port", str(store["port"]), "--workers", "1"]
    log = open(store["root"] / "server.log", "wb")
    process = subprocess.Popen(command, env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{store['port']}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2):
                    break
            except OSError:
                assert process.poll() is None, (store["root"] / "server.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the UI did not start in 120 s"
                time.sleep(0.5)
        yield base
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def browser():
    assert os.path.exists(CHROMIUM), "no chromium: apt-get install chromium (make test-ui does)"
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, server, request):
    context = browser.new_context(viewport={"width": 1600, "height": 1000})  # fresh: nothing remembered
    context.add_init_script(QUIET)
    context.set_default_timeout(30_000)
    page = context.new_page()
    yield page
    page.screenshot(path=str(SHOTS / f"{request.node.name}.png"))
    context.close()


def shot(page, name):
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def name_link(scope, name):
    return scope.locator(f"{NAME_CELL} a").filter(has_text=re.compile(rf"^\s*{re.escape(name)}\s*$"))


def run_link(page, name):
    """The run-name link of a row of the runs table."""
    return name_link(page.locator(".ag-row"), name)


def run_row(page, name):
    return page.locator(".ag-row").filter(has=name_link(page, name))


def swatch_colour(page, name):
    row = run_row(page, name)
    swatch = row.locator("[data-testid='experiment-view-table-run-color']")
    return swatch.locator("input[type=color]").input_value().lower(), swatch.evaluate(
        "e => getComputedStyle(e).backgroundColor")


def rgb(colour):
    return "rgb({}, {}, {})".format(*(int(colour[i:i + 2], 16) for i in (1, 3, 5)))


def chart(page, metric, y_type, x_title, traces):
    """Wait for a Plotly chart of ``metric`` (y axis ``y_type``, x axis titled ``x_title``) with
    ``traces`` drawn lines; return {trace name: (x values, colour)}. Plotly keeps the figure on
    its div (gd.data, gd.layout)."""
    page.wait_for_function("""([m, y, x, n]) => [...document.querySelectorAll('.js-plotly-plot')].some(gd => {
        const t = gd.layout && gd.layout.xaxis && gd.layout.xaxis.title;
        const title = (t && t.text !== undefined) ? t.text : t;
        return gd.layout.yaxis.type === y && title === x
            && (gd.data || []).filter(d => d.metricKey === m && d.x && d.x.length).length >= n; })""",
                           arg=[metric, y_type, x_title, traces])
    page.wait_for_timeout(500)  # tick labels settle
    return page.evaluate("""([m, y, x]) => {
        for (const gd of document.querySelectorAll('.js-plotly-plot')) {
            const t = gd.layout.xaxis.title, title = (t && t.text !== undefined) ? t.text : t;
            if (gd.layout.yaxis.type !== y || title !== x) continue;
            const lines = gd.data.filter(d => d.metricKey === m && d.x && d.x.length && d.hoverinfo !== 'skip');
            if (lines.length) return Object.fromEntries(lines.map(d => [d.name, [Array.from(d.x),
                (d.line && d.line.color) || (d.marker && d.marker.color)]]));
        } }""", [metric, y_type, x_title])


# -------------------------------------------------------------------------------------------
def test_the_printed_link_lands_on_the_verdict_and_the_arms(page, store):
    link = store["experiment_links"]["the comparison"]
    assert link.startswith(f"http://127.0.0.1:{store['port']}/") and "workflowType=machine_learning" in link
    page.goto(link)
    page.get_by_role("heading", name="duhl_lasso").first.wait_for()
    verdict = store["parent"].data.tags["verdict"]
    assert verdict.startswith("duhl-gap reached rel_gap 0.0001 in")
    page.get_by_text(verdict).first.wait_for()  # the description, rendered from its markdown
    page.get_by_text("Show more").first.click()
    table = page.locator("table").filter(has=page.locator("td", has_text=re.compile(r"^sequential$"))).first
    assert [h.strip() for h in table.locator("th").all_inner_texts()][:3] == ["arm", "status", "time (s)"]
    assert [r.strip() for r in table.locator("tbody tr td:first-child").all_inner_texts()] == list(ARMS)
    for arm in ARMS:  # "Child runs" links
        page.get_by_role("link", name=arm, exact=True).first.wait_for()
    shot(page, "01_parent_run")


def test_runs_list_nests_the_arms_in_their_colours(page, server, store):
    page.goto(f"{server}/#/experiments/{store['experiment_id']}/runs?workflowType=machine_learning")
    run_link(page, "duhl_lasso").wait_for()
    sweep_name = store["sweep"].info.run_name
    assert sweep_name == "sweep duhl_lasso: device.memory_budget=0.25,0.5"
    run_link(page, sweep_name).wait_for()
    assert all(run_link(page, arm).count() == 0 for arm in ARMS)  # nested: collapsed at first
    shot(page, "02_runs_collapsed")
    run_row(page, "duhl_lasso").locator(f"{NAME_CELL} button").first.click()
    for arm in ARMS:
        run_link(page, arm).wait_for()
    parent_x = run_link(page, "duhl_lasso").bounding_box()["x"]
    colours = {}
    for arm in ARMS:
        assert run_link(page, arm).bounding_box()["x"] > parent_x + 8, f"{arm} is not indented under its parent"
        value, background = swatch_colour(page, arm)
        assert value == store["arms"][arm].data.tags["mlflow.runColor"] and background == rgb(value), arm
        colours[arm] = value
    assert len(set(colours.values())) == len(ARMS), colours  # one colour per arm
    assert swatch_colour(page, "duhl_lasso")[0] not in colours.values()  # the parent: none of theirs
    shot(page, "03_runs_expanded")


def test_curves_against_solver_time(page, store):
    """The printed chart link: rel_gap, log scale, against relative time = each arm's own
    time_s (the timestamps), one line per arm in its colour; log10_rel_gap beside it."""
    page.goto(store["experiment_links"]["curves against solver time"])
    lines = chart(page, "rel_gap", "log", "Relative Time", len(ARMS))
    shot(page, "04_curves_vs_solver_time")
    assert set(lines) == set(ARMS)
    client = store["client"]
    for arm, run in store["arms"].items():
        x, colour = lines[arm]
        assert colour.lower() == run.data.tags["mlflow.runColor"]
        times = [m.value for m in client.get_metric_history(run.info.run_id, "time_s")]
        assert x[0] == 0 and max(x) == pytest.approx(times[-1] - times[0], abs=2e-3), (arm, x[-3:], times[-3:])
    assert set(chart(page, "log10_rel_gap", "linear", "Relative Time", len(ARMS))) == set(ARMS)
    rounds = chart(page, "rel_gap", "log", "Step", len(ARMS))  # and against rounds
    assert max(rounds["duhl-gap"][0]) == max(
        m.step for m in client.get_metric_history(store["arms"]["duhl-gap"].info.run_id, "rel_gap"))


def test_the_sweep_is_summarised(page, store):
    client, sweep = store["client"], store["sweep"]
    jobs = [r for r in store["runs"].values() if r.data.tags.get("mlflow.parentRunId") == sweep.info.run_id]
    assert sorted(r.info.run_name for r in jobs) == ["memory_budget=0.25", "memory_budget=0.5"]
    assert {a.path for a in client.list_artifacts(sweep.info.run_id)} >= {"sweep_summary.md", "sweep_summary.png"}
    page.goto(store["sweep_links"]["the sweep"])
    page.get_by_role("heading", name=sweep.info.run_name).first.wait_for()
    page.get_by_text("Sweep of 2 jobs over device.memory_budget").first.wait_for()
    for job in jobs:
        page.get_by_role("link", name=job.info.run_name, exact=True).first.wait_for()
    shot(page, "05_sweep_run")
    # every job's arms, named by job, in one chart view
    page.goto(store["sweep_links"]["curves against solver time"])
    lines = chart(page, "rel_gap", "log", "Relative Time", 2 * len(ARMS))
    assert set(lines) == {f"{arm} ({job.info.run_name})" for arm in ARMS for job in jobs}
    shot(page, "06_sweep_curves")


def test_the_comparisons_view_lists_the_verdicts(page, server, store):
    """The view menu's "Comparisons": each comparison's verdict (its description) and speedups."""
    page.goto(view_link(server, store["experiment_id"], COMPARISONS_VIEW, charts=False))
    page.get_by_text("You're viewing a shared view").wait_for()
    verdict = store["parent"].data.tags["verdict"]
    run_row(page, "duhl_lasso").wait_for()
    index = run_row(page, "duhl_lasso").get_attribute("row-index")  # the grid draws a row's cells in two parts
    description = page.locator(f".ag-row[row-index='{index}'] [col-id='attributes.`Description`']")
    assert description.inner_text().strip()[:40] == verdict[:40]  # the cell shows its start
    for column in ("speedup_vs_sequential", "speedup_vs_random", "model.name", "device.memory_budget"):
        page.get_by_text(column, exact=True).first.wait_for()
    run_link(page, store["sweep"].info.run_name).wait_for()  # the sweep's comparisons, nested under it
    shot(page, "08_comparisons_view")


def test_without_the_flag_the_experiment_opens_on_the_genai_overview(page, server, store):
    """Why the printed links carry workflowType=machine_learning (README: what a person sees)."""
    page.goto(f"{server}/#/experiments/{store['experiment_id']}")
    page.wait_for_url("**/overview/**")
    assert "workflowType=genai" in page.url
    shot(page, "07_bare_experiment_url")
    with contextlib.suppress(sync_api.TimeoutError):  # a first-visit popover ("Detect Issues") covers the page
        page.get_by_role("button", name="Got it").click(timeout=5000)
    page.get_by_text("Model training", exact=True).first.click()
    run_link(page, "duhl_lasso").wait_for()


def test_the_experiments_list_has_no_empty_default(page, server):
    page.goto(f"{server}/#/experiments")
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name="duhl_lasso", exact=True))
    row.first.wait_for()
    assert page.get_by_role("row").filter(has=page.get_by_role("link", name="Default", exact=True)).count() == 0
    shot(page, "09_experiments")
