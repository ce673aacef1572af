"""Every command the README and the docs show is one the tests exercise.

- every fenced block names its language, so no command hides in an untagged block;
- every command of a shell block is listed in ``exercised.py`` with the test that runs it, that
  test exists, and no listed command has dropped out of the pages;
- every ``make <target>`` a page names (in a block or inline) is a target of the Makefile, and
  every shown make command resolves (``make -n``) to modules that exist;
- every shown experiment command composes with Hydra and passes the checks the experiment
  makes before any data (the config's schemas and ranges, then the plan of its arms);
(The shown experiment commands no other test runs are run on tiny data: test_shown_runs.py.)
"""

import ast
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from doc_blocks import (LANGUAGES, ROOT, blocks, compose, dry_run, experiment_commands, make_mentions, pages,
                        shown_commands)
from exercised import EXERCISED

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


def _modules(line):
    """The modules a recipe line runs with ``python -m``."""
    words = shlex.split(line)
    return [words[i + 1] for i in range(1, len(words) - 1)
            if words[i] == "-m" and PYTHON_WORDS.search(words[i - 1])]


def _venv_programs(line):
    """The virtual environment's programs a recipe line runs (``.venv/bin/mkdocs``: a tool a Python
    package installs)."""
    return [Path(word).name for word in shlex.split(line) if re.search(r"(^|/)\.venv/bin/[\w.-]+$", word)
            and not PYTHON_WORDS.search(word)]


@pytest.mark.parametrize("command", MAKE)
def test_shown_make_commands_resolve(command, monkeypatch):
    """Every shown make command runs something that exists: a Python module, or a program the
    project's packages install in the virtual environment."""
    monkeypatch.syspath_prepend(str(ROOT))  # recipes run from the project root (a top-level benchmarks/, too)
    lines = dry_run(command)
    modules = [m for line in lines for m in _modules(line)]
    programs = [p for line in lines for p in _venv_programs(line)]
    assert modules or programs, f"{command!r} runs no python module and no program of the virtual environment"
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    missing += [p for p in programs if not (Path(sys.executable).parent / p).exists()]
    assert missing == [], f"{command!r} runs modules or programs that do not exist: {missing}"


def test_make_test_runs_pytest_without_the_excluded_markers():
    """What ``make test`` runs: pytest without the gpu, slow, multihost and ui markers, and the
    docs tests among what it collects (so a submission that breaks the docs fails it)."""
    line = next(line for line in dry_run("make test") if "pytest" in line)
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

@pytest.fixture(scope="module")
def hydra_conf():
    from hydra import initialize_config_dir

    from pipelines.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        yield


def test_the_shown_experiment_commands_were_found():
    # a parser that found none would make the next test pass vacuously
    found = experiment_commands()
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
    for command, jobs in sorted(experiment_commands().items()):
        for job in jobs:
            for override in job:  # the TLS example's certificate files, as a user would have them
                if override.endswith(".pem"):
                    (tmp_path / override.split("=", 1)[1]).touch()
            try:
                cfg = compose(job)
                check_config(cfg)
                plan_experiment(cfg)
            except Exception as error:  # every failing command in one report
                failed[command] = f"{type(error).__name__}: {error}".splitlines()[0]
    assert failed == {}, f"shown experiment commands whose config fails: {failed}"
