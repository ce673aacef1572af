"""The documentation site builds as ``make docs`` builds it: strict (a warning, a broken link or
anchor, a page missing from the navigation fails it) and offline (no web fonts). Its generated
pages cover the code: the configuration page every option and key Hydra composes, with types and
ranges; the make targets page every target ``make help`` lists."""

import dataclasses
import html
import re
import subprocess
import sys

import pytest
import yaml

from doc_blocks import ROOT, shell_env

GROUPS = ("model", "data", "solver", "device", "cluster", "tracking")
_ROW = re.compile(r"<tr>\s*<td><code>([^<]+)</code></td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>", re.S)


def _recipe(site):
    """The command ``make docs`` runs, with the site written to ``site``."""
    done = subprocess.run(["make", "-n", "docs", f"VENV={sys.prefix}", f"ARGS=--site-dir {site}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=shell_env())
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "mkdocs" in line]
    return line


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the built site's folder, the build's log, its exit code): built once for this module."""
    site = tmp_path_factory.mktemp("docs") / "site"
    line = _recipe(site)
    assert "mkdocs build --strict" in line
    done = subprocess.run(["bash", "-c", line], cwd=ROOT, capture_output=True, text=True, timeout=170)
    return site, done.stdout + done.stderr, done.returncode


def _text(fragment):
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def _sections(page):
    """{h3 id: {key: (value, type, allowed)}} of the configuration page's tables."""
    out = {}
    for part in re.split(r'<h3 id="', page)[1:]:
        ident = part[:part.index('"')]
        out[ident] = {key: tuple(_text(cell) for cell in cells) for key, *cells in _ROW.findall(part)}
    return out


@pytest.mark.timeout(200)
def test_make_docs_builds_the_site_strict_and_offline(built):
    site, log, code = built
    assert code == 0, log[-4000:]
    assert "WARNING" not in log, log[-4000:]
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert {"index.html", "reference/configuration.html", "reference/make-targets.html",
            "reference/api/duhl.html", "benchmarks/current.html"} <= pages
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text, page
    api = (site / "reference" / "api" / "duhl.html").read_text()  # rendered from the docstrings
    assert all(name in api for name in ("DuHL", "Lasso", "LinearSVC", "memory_budget", "compile_kernels"))
    assert "ours / best peer" in (site / "benchmarks" / "current.html").read_text()  # make bench's table


def test_the_theme_fetches_nothing():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    assert config["theme"]["font"] == "false" and config["strict"] == "true"
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]]
    assert "privacy" not in plugins and "social" not in plugins


def test_the_configuration_page_names_every_option_and_every_key(built):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from pipelines.config import register_configs

    site, log, code = built
    assert code == 0, log[-2000:]
    sections = _sections((site / "reference" / "configuration.html").read_text())
    register_configs()
    missing = []
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        options = {group: loader.get_group_options(group) for group in GROUPS}
        for i in range(max(map(len, options.values()))):  # the i-th option of every group in one composition
            picks = {group: names[i] for group, names in options.items() if i < len(names)}
            cfg = compose("config", overrides=[f"{group}={option}" for group, option in picks.items()])
            for group, option in picks.items():
                if f"{group}-{option}" not in sections:
                    missing.append(f"{group}={option}")
                    continue
                rows = dict(sections[f"{group}-{option}"])
                parent = re.search(rf'Extends <a href="#{group}-(\w+)"', (site / "reference" / "configuration.html")
                                   .read_text().split(f'<h3 id="{group}-{option}"')[1].split("<h3")[0])
                if parent:  # an option extending another lists what it changes; the rest is its parent's
                    rows = {**sections[f"{group}-{parent.group(1)}"], **rows}
                missing += [f"{group}={option}: {key}" for key in cfg[group] if key not in rows]
        missing += [f"experiment={o}" for o in loader.get_group_options("experiment") if f"experiment-{o}" not in sections]
    assert missing == [], f"the configuration page lacks: {missing}"


def test_the_configuration_page_gives_values_types_and_ranges(built):
    from pipelines.config import Config, DistBeliefSpec, ExperimentSpec, ReproduceSpec
    from solvers.glm.checks import field_rule

    site, log, code = built
    assert code == 0, log[-2000:]
    page = (site / "reference" / "configuration.html").read_text()
    sections = _sections(page)
    assert sections["device-cpu"]["memory_budget"] == ("0.25", "any", "None, a float in (0, 1] or a size like '2GB'")
    assert sections["device-cuda_sim"]["memory_budget"][0] == "0.5"
    assert sections["model-lasso"]["alpha"] == ("0.3", "float", "a float > 0")
    assert sections["solver-duhl_random"]["selection"][0] == "random"
    text = _text(page)
    for cls in (Config, ExperimentSpec, DistBeliefSpec, ReproduceSpec):
        for f in dataclasses.fields(cls):
            if cls is Config and f.name not in ("seed", "progress", "cache_dir"):
                continue  # the groups have their own sections
            assert f"<code>{f.name}</code>" in page, f"{cls.__name__}.{f.name}"
            rule = field_rule(f)
            assert rule is None or rule.text in text, f"{cls.__name__}.{f.name}: {rule.text}"


def test_the_make_targets_page_lists_what_make_help_lists(built):
    site, log, code = built
    assert code == 0, log[-2000:]
    done = subprocess.run(["make", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    listed = re.findall(r"^  make (\S+)", done.stdout, re.M)
    page = (site / "reference" / "make-targets.html").read_text()
    found = re.findall(r"<td><code>make ([^<]+)</code></td>", page)
    assert listed and found == listed and "docs" in listed
