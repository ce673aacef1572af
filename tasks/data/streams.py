"""What the streaming converters share: a compressed or plain source read a buffer at a time, the
target written as it is parsed, and a progress bar in bytes per second.

- :func:`open_source`: a text file, plain or gzip / bz2 / xz (told by its first bytes, not its
  name), and the position in the file as stored (compressed bytes), for progress; the pages
  read are dropped from the page cache as the reading moves on (a 100 GB file leaves nothing
  behind);
- :class:`TargetWriter`: ``y.npy`` appended as rows are parsed (8 bytes a row on disk, a
  fixed buffer in RAM), its header written at the end;
- :func:`byte_progress`: a rich progress bar of bytes done, total and rate, for a conversion
  called from Python (the experiment's own bar gets the same ``(done, total)`` calls).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from solvers.storage.files import HEADER_BYTES, STAGE_BYTES, AppendFile, npy_header

MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz"}
DROP_EVERY = 64 << 20  # bytes of a plain source read between two drops of its pages


def compression(path) -> str:
    """'gzip', 'bz2', 'xz' or 'none', from the file's first bytes."""
    with open(path, "rb") as f:
        head = f.read(6)
    for magic, kind in MAGIC.items():
        if head.startswith(magic):
            return kind
    return "none"


class Source:
    """A text source read with ``readinto``; ``position`` is how far into the file as stored."""

    def __init__(self, path):
        self.path = Path(path)
        self.kind = compression(self.path)
        self.size = self.path.stat().st_size
        self._raw = open(self.path, "rb", buffering=0)
        fd = self._raw.fileno()
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        self._dropped = 0
        if self.kind == "gzip":
            self._stream = gzip.GzipFile(fileobj=self._raw, mode="rb")
        elif self.kind == "bz2":
            self._stream = bz2.BZ2File(self._raw, mode="rb")
        elif self.kind == "xz":
            self._stream = lzma.LZMAFile(self._raw, mode="rb")
        else:
            self._stream = self._raw

    @property
    def position(self) -> int:
        return self._raw.tell()

    def readinto(self, view) -> int:
        """Fill ``view`` as far as the source goes (fewer bytes only at its end)."""
        got = 0
        while got < len(view):
            n = self._stream.readinto(view[got:])
            if not n:
                break
            got += n
        pos = self._raw.tell()
        if pos - self._dropped >= DROP_EVERY:  # the text read stays out of the page cache
            os.posix_fadvise(self._raw.fileno(), 0, pos, os.POSIX_FADV_DONTNEED)
            self._dropped = pos
        return got

    def close(self):
        if self._stream is not self._raw:
            self._stream.close()
        os.posix_fadvise(self._raw.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        self._raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_source(path) -> Source:
    return Source(path)


class TargetWriter:
    """``y.npy`` (float64) appended as rows are parsed: a 4096-byte .npy header rewritten at
    :meth:`close` once the length is known, the data after it written past the page cache."""

    def __init__(self, path, stage_bytes=STAGE_BYTES):
        self.path = Path(path)
        self._file = AppendFile(self.path, stage_bytes)
        self._file.write(np.zeros(HEADER_BYTES, np.uint8))
        self.n = 0

    def write(self, y):
        y = np.asarray(y, dtype=np.float64)
        self._file.write(y)
        self.n += y.shape[0]

    def close(self):
        self._file.close(pad_to=1)
        with open(self.path, "r+b") as f:
            f.write(npy_header((self.n,), np.float64))

    def abort(self):
        self._file.abort()


@contextmanager
def byte_progress(description: str, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    """A rich bar of bytes (done / total, rate, time left) on stderr; yields ``update(done, total)``."""
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True), disable=not enabled,
                  transient=False) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
