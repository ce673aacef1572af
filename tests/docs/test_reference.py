"""The hand-written reference stays true: the metric vocabulary names every metric the solvers and
reports produce, the presets tables list conf/experiment/, and the README stays a short, undated
front page. (The generated pages are checked on the built site: test_build.py.)"""

import dataclasses
import math
import re

import pytest

from doc_blocks import DOCS, ROOT


def test_the_metric_vocabulary_names_every_metric():
    from pipelines.report import ArmStats
    from solvers.glm.trace import COLUMNS, SolveResult

    page = (DOCS / "reference" / "metrics.md").read_text()
    documented = set(re.findall(r"`([a-z0-9_<>]+)`", page))
    stats = ArmStats(reached=True, time_to_target_s=1.0, epochs_to_target=1.0, bytes_to_target=1.0, final=1e-7,
                     time_s=1.0, epochs=1.0, bytes_h2d=1.0, bits_to_target=1.0, samples_to_target=1.0)
    names = set(COLUMNS) | set(stats.run_metrics())
    names |= {"prefetch_hits", "bytes_prefetched", "bytes_disk", "disk_s", "os_read_bytes", "peak_rss_delta"}
    names |= {f.name for f in dataclasses.fields(SolveResult) if f.name in ("prefetch_hits", "bytes_prefetched")}
    assert not math.isnan(stats.bits_to_target)
    assert names - documented == set(), f"metric names missing from docs/reference/metrics.md: {names - documented}"


def _table_first_column(text, header):
    """The first column's `names` of the Markdown table whose header row starts with ``header``."""
    lines = text[text.index(header):].splitlines()
    rows = [line for line in lines[2:] if line.startswith("|")]
    rows = rows[:next((i for i, line in enumerate(lines[2:]) if not line.startswith("|")), len(rows))]
    return {re.match(r"\| `([^`]+)`", row).group(1) for row in rows}


@pytest.mark.parametrize("page", ["README.md", "docs/user-guide/experiments.md"])
def test_the_presets_tables_list_conf_experiment(page):
    presets = {p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml")}
    assert _table_first_column((ROOT / page).read_text(), "| preset |") == presets


def test_the_readme_is_a_short_undated_front_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 300
    dated = [line for line in text.splitlines()
             if re.search(r"\b20\d\d-\d\d-\d\d\b|\bUTC\b|\b\d\d:\d\d(:\d\d)?\b", line)]
    assert dated == [], f"the README carries dates or clock times (they belong in the docs): {dated}"
    for section in ("## Two commands", "## What it finds", "## From Python", "## Presets", "## How DuHL works",
                    "## Documentation"):
        assert section in text
