"""One on-disk cache key for every compiled function of the solvers.

Numba keys a cached function on its own source file only, not on the functions it inlines
or calls from other files (numba#1833), and its cache index pickles the argument types (a
model's theta class): an edit elsewhere could otherwise load stale machine code, or fail to
unpickle the index. :func:`compiled` names each function's cache files after a hash of every
source file under ``solvers/`` (the model math, the kernels, the certificates, the loops), so
every version of that code has files of its own. Nothing is ever deleted.
"""

import hashlib
from pathlib import Path

from numba import njit


def source_digest() -> str:
    """A hash of the code compiled functions may inline: every ``.py`` file under solvers/."""
    digest = hashlib.blake2b(digest_size=7)
    root = Path(__file__).resolve().parents[1]  # solvers/
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


CODE = source_digest()


def compiled(fn=None, *, inline="never", **options):
    """``njit(nogil=True, cache=True, error_model="numpy", fastmath=False, **options)`` under the
    cache key above. ``inline="always"``: compiled into its callers (a call that passes many arrays
    costs tens of ns); nogil so that a host thread can run beside the kernels.

    fastmath is always set: a function that leaves it unset inherits its caller's when a caller
    compiles it, and Numba keeps (in the process and on disk) one compilation per signature, so a
    kernel shared by a fastmath caller and a strict one would otherwise round as whichever
    compiled it first, and the iterates would depend on the cache's history."""
    if fn is None:
        return lambda f: compiled(f, inline=inline, **options)
    fn.__qualname__ = f"{fn.__name__}__{CODE}"
    settings = dict(nogil=True, cache=True, error_model="numpy", fastmath=False)
    settings.update(options)
    return njit(inline=inline, **settings)(fn)
