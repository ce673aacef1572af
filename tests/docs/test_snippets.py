"""Every Python snippet of the README and the docs runs: the ``python`` blocks of one page run in
order as one script, in a fresh process (the project importable, as after ``make install``) and an
empty folder, as a reader pasting them would run them."""

import os
import subprocess
import sys

import pytest

from doc_blocks import ROOT, blocks, pages

PAGES = [p for p in pages() if any(b.lang == "python" for b in blocks(p))]


def test_the_pages_with_snippets_were_found():
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/user-guide/python.md", "docs/user-guide/your-data.md"} <= names


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_snippets_of_a_page_run(page, tmp_path):
    script = []
    for block in blocks(page):
        if block.lang == "python":
            script += [f"# {block.where}", block.code, ""]
    (tmp_path / "snippets.py").write_text("\n".join(script))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "snippets.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=590)
    assert done.returncode == 0, f"{page.relative_to(ROOT)}: its snippets failed:\n{done.stderr[-4000:]}"
