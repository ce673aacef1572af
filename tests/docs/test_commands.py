"""Every command the README and the docs show is one the tests exercise.

- every fenced block names its language, so no command hides in an untagged block;
- every command of a shell block is listed in ``exercised.py`` with the test that runs it, that
  test exists, and no listed command has dropped out of the pages;
- every ``make <target>`` a page names (in a block or inline) is a target of the Makefile, and
  every shown make command resolves (``make -n``) to modules that exist;
- every shown experiment command composes with Hydra and passes the checks the experiment
  makes before any data (the config's schemas and ranges, then the plan of its arms);
- the shown experiment commands no other test runs are run here, end to end, on tiny data.
"""

import ast
import functools
import importlib.util
import itertools
import re
import shlex
import subprocess
import sys

import pytest

from doc_blocks import LANGUAGES, ROOT, blocks, make_mentions, pages, shown_commands
from exercised import EXERCISED, TINY_RUN

SHOWN = shown_commands()
MAKE = [c for c in SHOWN if c.startswith("make ")]
PYTHON_WORDS = re.compile(r"(^|/)python3?$")


def test_every_fence_names_its_language():
    untagged = [b.where for page in pages() for b in blocks(page) if b.lang not in LANGUAGES]
    assert untagged == [], f"fenced blocks without a language among {LANGUAGES}: {untagged}"


def test_every_shown_command_is_listed_with_the_test_that_exercises_it():
    missing = {command: where for command, where in SHOWN.items() if command not in EXERCISED}
    assert not missing, ("commands the pages show that tests/docs/exercised.py does not list (add each, "
                         f"with the test that runs it): {missing}")


def test_every_listed_command_is_still_shown():
    stale = [command for command in EXERCISED if command not in SHOWN]
    assert stale == [], f"tests/docs/exercised.py lists commands no page shows: {stale}"


def _defined(test_id):
    path, _, name = test_id.partition("::")
    file = ROOT / path
    if not file.is_file():
        return False
    tree = ast.parse(file.read_text())
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name
               for node in ast.walk(tree))


def test_the_named_tests_exist():
    missing = sorted({test for test in EXERCISED.values() if not _defined(test)})
    assert missing == [], f"tests/docs/exercised.py names tests that do not exist: {missing}"


def _make_targets():
    return set(re.findall(r"^([a-z][a-z0-9-]*):(?!=)", (ROOT / "Makefile").read_text(), re.M))


def test_every_make_target_the_pages_name_exists():
    targets = _make_targets()
    unknown = {target: where for target, where in make_mentions().items() if target not in targets}
    assert not unknown, f"the pages name make targets the Makefile lacks: {unknown}"


@functools.lru_cache(maxsize=None)
def _dry_run(command):
    """The recipe lines ``make -n`` prints for a shown make command (continuations joined)."""
    done = subprocess.run(["make", "-n", *shlex.split(command)[1:], f"VENV={sys.prefix}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"make -n failed for {command!r}: {done.stderr}"
    return tuple(done.stdout.replace("\\\n", " ").splitlines())


def _modules(line):
    """The modules a recipe line runs with ``python -m``."""
    words = shlex.split(line)
    return [words[i + 1] for i in range(1, len(words) - 1)
            if words[i] == "-m" and PYTHON_WORDS.search(words[i - 1])]


@pytest.mark.parametrize("command", MAKE)
def test_shown_make_commands_resolve(command):
    modules = [m for line in _dry_run(command) for m in _modules(line)]
    assert modules, f"{command!r} runs no python module"
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    assert missing == [], f"{command!r} runs modules that do not exist: {missing}"


def test_make_test_runs_pytest_without_the_excluded_markers():
    """What ``make test`` runs: pytest without the gpu, slow, multihost and ui markers, and the
    docs tests among what it collects (so a submission that breaks the docs fails it)."""
    line = next(line for line in _dry_run("make test") if "pytest" in line)
    words = shlex.split(line)
    expression = words[words.index("pytest") + 2]
    assert words[words.index("pytest") + 1] == "-m"
    assert {f"not {m}" for m in ("gpu", "slow", "multihost", "ui")} <= set(re.split(r"\s+and\s+", expression))
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                "-m", expression, "tests/docs/test_build.py", "tests/docs/test_snippets.py"], cwd=ROOT, capture_output=True, text=True,
                               timeout=120)
    assert "tests/docs/test_build.py::test_make_docs_builds_the_site_strict_and_offline" in collected.stdout, collected.stdout[-2000:]
    assert "tests/docs/test_snippets.py::test_the_snippets_of_a_page_run" in collected.stdout


# --- experiment commands ------------------------------------------------------------------

def _split_sweep(value):
    """A multirun value's choices: its top-level commas (not inside [], {} or quotes)."""
    parts, depth, current = [], 0, ""
    for ch in value:
        depth += ch in "[{(" and 1 or 0
        depth -= ch in "]})" and 1 or 0
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return parts + [current]


def _experiment_jobs(command):
    """The override lists a shown experiment command runs (one per job of a multirun), or None
    when it runs no experiment."""
    lines = _dry_run(command) if command.startswith("make ") else [command]
    line = next((line for line in lines if "pipelines.experiment" in shlex.split(line)), None)
    if line is None:
        return None
    words = shlex.split(line)
    args = words[words.index("pipelines.experiment") + 1:]
    multirun = "-m" in args
    args = [a for a in args if a != "-m" and not a.startswith(("hydra.", "hydra/"))]
    if not multirun:
        return [args]
    choices = [[f"{a.split('=', 1)[0]}={v}" for v in _split_sweep(a.split("=", 1)[1])] if "=" in a else [a]
               for a in args]
    return [list(job) for job in itertools.product(*choices)]


@functools.lru_cache(maxsize=None)
def _experiment_commands():
    """{shown command: its jobs' override lists} for every shown command that runs an experiment."""
    return {c: jobs for c in SHOWN if (jobs := _experiment_jobs(c)) is not None}


@pytest.fixture(scope="module")
def hydra_conf():
    from hydra import initialize_config_dir

    from pipelines.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        yield


def _compose(overrides):
    from hydra import compose

    return compose(config_name="config", overrides=list(overrides))


def test_the_shown_experiment_commands_were_found():
    # a parser that found none would make the next test pass vacuously
    found = _experiment_commands()
    assert len(found) >= 30 and "make sweep" in found and "make out-of-core-big" in found
    assert len(found["make sweep"]) == 6  # 3 budgets x 2 models
    assert found['make experiment ARGS="experiment=cocoa"'] == [["experiment=cocoa"]]


def test_every_shown_experiment_command_composes_and_passes_its_checks(hydra_conf, tmp_path, monkeypatch):
    """Compose, check every group against its schema and ranges, plan the arms: what the
    experiment does before any data is made. Not checked here: the user's data files (their
    errors have their own tests) and whether an optional peer library is installed."""
    import pipelines.glm
    from pipelines.config import check_config
    from pipelines.experiment import plan_experiment

    monkeypatch.setattr(pipelines.glm, "cache_key", lambda *args, **kwargs: "")
    monkeypatch.setattr(pipelines.glm, "missing_reason", lambda name: None)
    monkeypatch.chdir(tmp_path)
    failed = {}
    for command, jobs in sorted(_experiment_commands().items()):
        for job in jobs:
            for override in job:  # the TLS example's certificate files, as a user would have them
                if override.endswith(".pem"):
                    (tmp_path / override.split("=", 1)[1]).touch()
            try:
                cfg = _compose(job)
                check_config(cfg)
                plan_experiment(cfg)
            except Exception as error:  # every failing command in one report
                failed[command] = f"{type(error).__name__}: {error}".splitlines()[0]
    assert failed == {}, f"shown experiment commands whose config fails: {failed}"


TINY = {"n_samples": 150, "n_features": 40, "n_informative": 5}


@pytest.mark.timeout(600)  # the first experiment on an empty Numba cache compiles its kernels
@pytest.mark.parametrize("command", sorted(c for c, test in EXERCISED.items() if test == TINY_RUN))
def test_a_shown_experiment_runs_on_tiny_data(command, hydra_conf, tmp_path, capsys):
    """The command as shown, on tiny data (its data group's sizes made small), without MLflow:
    every arm reaches the target."""
    from pipelines.experiment import run_experiment

    (job,) = _experiment_commands()[command]
    data = _compose(job).data
    sizes = [f"data.{k}={v}" for k, v in TINY.items() if k in data]
    overrides = [*job, *sizes, "experiment.target_rel_gap=1e-4", "experiment.max_time=20", "tracking=none",
                 "progress=false", f"cache_dir={tmp_path / 'cache'}"]
    result = run_experiment(_compose(overrides), tmp_path / "out", "", overrides)
    assert result, f"{command!r} ran no arm"
    reached = {arm: stats.get("reached_target") for arm, stats in result.items()}
    assert all(reached.values()), f"{command!r}: arms that did not reach rel_gap 1e-4: {reached}"
    assert "reached rel_gap 0.0001" in capsys.readouterr().out
