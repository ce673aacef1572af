"""Compressors for distributed gradient methods, with variance bound and exact bit cost.

A compressor maps a vector x in R^d to Q(x). The *unbiased* ones satisfy

    E Q(x) = x,     E ||Q(x) - x||^2 <= omega ||x||^2          (the omega class)

and ``omega(d)`` returns that bound for a d-vector. Top-k is biased (a
contraction: ||Q(x) - x||^2 <= (1 - k/d) ||x||^2); use it with error feedback.

``compress(x, rng)`` returns ``(q, bits)``: the decoded vector the receiver
reconstructs and the exact length in bits of the message that encodes it,
under the fixed-length encoding each class documents (floats are 32 bits,
an index into d coordinates is ceil(log2 d) bits). Nothing here is
communicated; the bits are what a wire format would carry.

===============================  =================================  ==========================
compressor                       omega                               bits per message
===============================  =================================  ==========================
Identity                         0                                   32 d
RandK(k) (scaled d/k)            d/k - 1                             k (32 + ceil log2 d)
RandomDithering(s, p, bucket)    min(b/(4 s^2), sqrt(b)/s)           32 per bucket + d ceil log2(s+1)
                                                                     + 1 sign bit per non-zero
Natural                          1/8                                 9 d (sign + 8-bit exponent)
TopK(k) (biased)                 contraction k/d                     k (32 + ceil log2 d)
Compose(RandK(k), inner)         (d/k)(1 + omega_inner(k)) - 1       k ceil log2 d + inner's bits on k values
===============================  =================================  ==========================

References: Alistarh et al. 2017 (QSGD, random dithering), Mishchenko et al.
2019 (DIANA, l_p dithering with buckets), Horváth et al. 2019 (natural
compression), Stich et al. 2018 (top-k with error feedback).
"""

from __future__ import annotations

import math

import numpy as np

from solvers.glm.checks import Options, check, check_params

FLOAT_BITS = 32


def index_bits(d: int) -> int:
    return max(1, math.ceil(math.log2(d))) if d > 1 else 1


class Compressor:
    unbiased = True
    name = "compressor"

    def omega(self, d: int) -> float:
        raise NotImplementedError

    def compress(self, x: np.ndarray, rng: np.random.Generator):
        raise NotImplementedError

    def __repr__(self):
        return self.name


class Identity(Compressor):
    name = "identity"

    def omega(self, d):
        return 0.0

    def compress(self, x, rng):
        return np.array(x, dtype=np.float64), FLOAT_BITS * x.shape[0]


class RandK(Compressor):
    """k coordinates drawn uniformly without replacement, scaled by d/k."""

    def __init__(self, k):
        check_params("RandK", k=k)
        self.k = int(k)
        self.name = f"rand_{self.k}"

    def _k(self, d):
        return min(self.k, d)

    def omega(self, d):
        return d / self._k(d) - 1.0

    def support(self, d, rng):
        return rng.choice(d, self._k(d), replace=False)

    def compress(self, x, rng):
        d = x.shape[0]
        k = self._k(d)
        idx = self.support(d, rng)
        q = np.zeros(d)
        q[idx] = x[idx] * (d / k)
        return q, k * (FLOAT_BITS + index_bits(d))


class TopK(Compressor):
    """The k largest magnitudes, unscaled (biased; a contraction with delta = k/d)."""

    unbiased = False

    def __init__(self, k):
        check_params("TopK", k=k)
        self.k = int(k)
        self.name = f"top_{self.k}"

    def omega(self, d):
        return math.inf  # not in the unbiased class

    def delta(self, d):
        return min(self.k, d) / d

    def support(self, d, rng, x=None):
        k = min(self.k, d)
        return np.argpartition(np.abs(x), d - k)[d - k:]

    def compress(self, x, rng):
        d = x.shape[0]
        k = min(self.k, d)
        idx = self.support(d, rng, x)
        q = np.zeros(d)
        q[idx] = x[idx]
        return q, k * (FLOAT_BITS + index_bits(d))


class RandomDithering(Compressor):
    """s levels of |x_i| / ||x||_p per bucket of ``bucket_size`` coordinates (QSGD for p=2).

    q_i = ||x_B||_p sign(x_i) l_i / s with l_i = floor(s |x_i| / ||x_B||_p + u), u ~ U[0, 1).
    Per coordinate, Var = (norm/s)^2 t(1 - t) with t the fractional part, bounded
    by both norm^2 / (4 s^2) and (norm / s) |x_i|; since ||x||_inf <= ||x||_2 and
    ||x||_1 <= sqrt(b) ||x||_2 the sum is below min(b/(4 s^2), sqrt(b)/s) ||x||^2
    for p = 2 and p = inf alike.
    """

    def __init__(self, s=1, p=2, bucket_size=None):
        check_params("RandomDithering", s=s, bucket_size=bucket_size)
        check("RandomDithering", "p", p, Options((2, math.inf, "inf")))
        self.s = int(s)
        self.p = math.inf if p in (math.inf, "inf") else 2
        self.bucket_size = None if bucket_size is None else int(bucket_size)
        self.name = f"dither_s{self.s}_p{'inf' if self.p == math.inf else 2}" + (
            f"_b{self.bucket_size}" if self.bucket_size else "")

    def _b(self, d):
        return d if self.bucket_size is None else min(self.bucket_size, d)

    def omega(self, d):
        b = self._b(d)
        return min(b / (4.0 * self.s ** 2), math.sqrt(b) / self.s)

    def compress(self, x, rng):
        d = x.shape[0]
        b = self._b(d)
        n_buckets = -(-d // b)
        pad = n_buckets * b - d
        xb = np.concatenate([x, np.zeros(pad)]).reshape(n_buckets, b) if pad else x.reshape(n_buckets, b)
        ax = np.abs(xb)
        norms = ax.max(axis=1) if self.p == math.inf else np.sqrt((xb * xb).sum(axis=1))
        safe = np.where(norms > 0, norms, 1.0)
        levels = np.floor(self.s * ax / safe[:, None] + rng.random(xb.shape))
        q = (np.sign(xb) * levels * (norms / self.s)[:, None]).reshape(-1)[:d]
        nonzero = int(np.count_nonzero(levels.reshape(-1)[:d]))
        bits = FLOAT_BITS * n_buckets + d * index_bits(self.s + 1) + nonzero
        return q, bits


class Natural(Compressor):
    """Natural compression: |x_i| rounded at random to a neighbouring power of two
    (unbiased), sent as sign + 8-bit exponent. omega = 1/8 (Horváth et al. 2019)."""

    name = "natural"

    def omega(self, d):
        return 0.125

    def compress(self, x, rng):
        ax = np.abs(x)
        q = np.zeros_like(ax, dtype=np.float64)
        nz = ax > 0
        low = np.exp2(np.floor(np.log2(ax[nz])))
        up = rng.random(low.shape) < (ax[nz] - low) / low  # P(2 low) = (|x| - low) / low
        q[nz] = np.where(up, 2.0 * low, low) * np.sign(x[nz])
        return q, 9 * x.shape[0]


class Compose(Compressor):
    """A sparsifier's support (RandK or TopK), then ``inner`` on the k kept values."""

    def __init__(self, sparsifier, inner):
        if not isinstance(sparsifier, (RandK, TopK)):
            raise ValueError(f"Compose needs RandK or TopK first. Got {sparsifier!r} instead.")
        self.sparsifier, self.inner = sparsifier, inner
        self.unbiased = sparsifier.unbiased and inner.unbiased
        self.name = f"{sparsifier.name}+{inner.name}"

    def omega(self, d):
        if not self.unbiased:
            return math.inf
        k = self.sparsifier._k(d)
        return (d / k) * (1.0 + self.inner.omega(k)) - 1.0

    def compress(self, x, rng):
        d = x.shape[0]
        if isinstance(self.sparsifier, TopK):
            idx = self.sparsifier.support(d, rng, x)
            scale = 1.0
        else:
            idx = self.sparsifier.support(d, rng)
            scale = d / idx.shape[0]
        values, inner_bits = self.inner.compress(np.ascontiguousarray(x[idx]), rng)
        q = np.zeros(d)
        q[idx] = values * scale
        return q, idx.shape[0] * index_bits(d) + inner_bits


def make_compressor(spec) -> Compressor:
    """A compressor from a name or a mapping: "identity", "natural", {"name": "rand_k", "k": 10},
    {"name": "dither", "s": 2, "p": "inf", "bucket_size": 64}, {"name": "top_k", "k": 5},
    {"name": "compose", "sparsifier": {...}, "inner": {...}}."""
    if isinstance(spec, Compressor):
        return spec
    if isinstance(spec, str):
        spec = {"name": spec}
    spec = dict(spec)
    name = spec.pop("name", None)
    makers = {"identity": Identity, "natural": Natural, "rand_k": RandK, "top_k": TopK,
              "dither": RandomDithering}
    if name == "compose":
        return Compose(make_compressor(spec["sparsifier"]), make_compressor(spec["inner"]))
    if name not in makers:
        raise ValueError(f"The 'compressor' parameter must name one of {sorted(makers) + ['compose']}. "
                         f"Got {name!r} instead.")
    try:
        return makers[name](**spec)
    except TypeError as error:
        raise ValueError(f"Compressor '{name}': {error}") from None
