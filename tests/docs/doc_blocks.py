"""What the README and the documentation pages show: their fenced blocks, the shell commands in
them, and the make targets they name. Shared by the docs tests."""

from __future__ import annotations

import re
import shlex
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
