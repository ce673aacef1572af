"""What the README and the documentation pages show: their fenced blocks, the shell commands in
them, and the make targets they name. Shared by the docs tests."""

from __future__ import annotations

import functools
import itertools
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SHELL = ("bash", "sh", "shell", "console")
LANGUAGES = SHELL + ("python", "text", "yaml", "toml", "json")
_FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w+-]*)")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # where its fence opens, 1-based
    lang: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages() -> List[Path]:
    """README.md and every Markdown page of the site (the hooks' folder holds no page)."""
    return [ROOT / "README.md"] + sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)


def blocks(path: Path) -> Iterator[Block]:
    """The fenced blocks of a page, indented ones (inside a list item) included."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, lang = match.groups()
        body, j = [], i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        yield Block(path, i + 1, lang, "\n".join(body))
        i = j + 1


def commands(code: str) -> List[str]:
    """The commands of a shell block: continuation lines joined, comments dropped, each command
    with its words as the shell splits them and joined by single spaces (quotes kept as written)."""
    out, pending = [], ""
    for line in code.splitlines():
        line = pending + line
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            words = list(lexer)
        except ValueError as error:  # an unclosed quote
            raise ValueError(f"cannot split {line!r}: {error}") from None
        if words:
            out.append(_without_comment(line))
    return out


def _without_comment(line: str) -> str:
    """The line up to a `#` that starts a comment (outside quotes), spaces normalised."""
    quote, cut = None, len(line)
    for k, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            cut = k
            break
    return " ".join(line[:cut].split())


def shown_commands():
    """{command: [where it is shown]} over every shell block of every page."""
    found = {}
    for page in pages():
        for block in blocks(page):
            if block.lang in SHELL:
                for command in commands(block.code):
                    found.setdefault(command, []).append(block.where)
    return found


_INLINE = re.compile(r"`(make [^`]+)`")


def make_mentions():
    """{target: [where]} of every `make <target>` a page names, in its blocks or inline."""
    found = {}
    for page in pages():
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for span in _INLINE.findall(line) + ([line.strip()] if line.strip().startswith("make ") else []):
                words = span.split()
                if len(words) > 1 and re.fullmatch(r"[a-z][a-z0-9-]*", words[1]):
                    found.setdefault(words[1], []).append(f"{page.relative_to(ROOT)}:{number}")
    return found


def shell_env():
    """This environment as a user's shell has it: without the variables of a ``make`` that runs these
    tests (``make test ARGS=...`` would otherwise pass its ARGS to every ``make -n`` here): its own,
    and those set on its command line, which make exports and lists in MAKEFLAGS after ``--``."""
    flags = os.environ.get("MAKEFLAGS", "")
    assigned = {word.split("=", 1)[0] for word in flags.split(" -- ", 1)[1].split() if "=" in word} \
        if " -- " in flags else set()
    drop = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"} | assigned
    return {k: v for k, v in os.environ.items() if k not in drop}


@functools.lru_cache(maxsize=None)
def dry_run(command):
    """The recipe lines ``make -n`` prints for a shown make command (continuations joined)."""
    done = subprocess.run(["make", "-n", *shlex.split(command)[1:], f"VENV={sys.prefix}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=shell_env())
    if done.returncode != 0:
        raise AssertionError(f"make -n failed for {command!r}: {done.stderr}")
    return tuple(done.stdout.replace("\\\n", " ").splitlines())


def _split_sweep(value):
    """A multirun value's choices: its top-level commas (not inside [], {} or parentheses)."""
    parts, depth, current = [], 0, ""
    for ch in value:
        depth += ch in "[{("
        depth -= ch in "]})"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return parts + [current]


def experiment_jobs(command):
    """The override lists a shown command runs through ``python -m pipelines.experiment`` (one per
    job of a multirun; Hydra's own ``hydra.*`` overrides left out), or None when it runs none."""
    lines = dry_run(command) if command.startswith("make ") else [command]
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
def experiment_commands():
    """{shown command: its jobs' override lists} for every shown command that runs an experiment."""
    return {c: jobs for c in shown_commands() if (jobs := experiment_jobs(c)) is not None}


def compose(overrides):
    """The config as ``python -m pipelines.experiment`` composes it (inside initialize_config_dir)."""
    from hydra import compose as hydra_compose

    return hydra_compose(config_name="config", overrides=list(overrides))
