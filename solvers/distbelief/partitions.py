"""Model parallelism (DistBelief's first idea): an MLP's units cut across K partitions.

Every hidden layer's units are cut into K contiguous blocks (sizes differ by at most
one, the larger first). A partition owns the incoming weights and the bias of its units,
the column block ``W_l[:, units]`` and ``b_l[units]``. The output layer (one logistic
unit, or a softmax whose normalizer needs every logit) is cut by its inputs instead:
partition k owns the rows ``W_{L+1}[units of layer L, :]``, and partition 0 the bias, so
that each partition's share of the logits needs only its own activations. A replica's
parameters are cut the same way: partition k's parameters are ``w[param_index(k)]`` (its
*local* vector, layer after layer, each block row-major), and the K local vectors
together are the whole vector.

A step is a fixed sequence of phases, forward through layers 1 .. L+1 and backward
from L+1 to 1. Before a phase a partition waits for the messages ``senders`` names;
:meth:`Part.run` computes from them and returns the messages it sends:

- forward l < L: its activations ``a_l[:, units]`` to every other owner of layer l+1
  (each unit's state crosses to a machine once, as in the paper);
- forward L+1: its share of the logits, ``a_L[:, units] @ W_{L+1}[units, :]`` (plus the
  bias on partition 0), to every other partition: a few values a row, where the last
  hidden layer's activations would be thousands;
- backward L+1: none. Every partition sums the shares in partition order (the same logits
  on each), takes the loss's gradient dz (partition 0 counts the loss) and its own block
  of the gradient with respect to ``a_L``, ``dz @ W_{L+1}[units, :]^T``;
- backward 2 <= l <= L: its share ``dz_l[:, units] @ W_l[:, units]^T`` of the gradient
  with respect to ``a_{l-1}``, each other partition's block; the owner sums the shares.

Every partition reads the minibatch's inputs itself (the input layer is the data).
The transport is the caller's: :func:`partitioned_loss_grad` routes the messages in
this process (the oracle-checked form); ``tasks.distbelief.model_parallel`` runs each
Part on its own Dask worker. ``xp`` is NumPy, or CuPy for device arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Tuple

import numpy as np
from scipy.linalg import blas

from solvers.distbelief.models import MLP, activate, activation_slope
from solvers.glm.checks import Integer, check_params


@dataclass(frozen=True)
class Phase:
    direction: str  # "forward" or "backward"
    layer: int  # 1 .. L+1 (L+1: the output layer)

    def __str__(self) -> str:
        return f"{self.direction[0]}{self.layer}"


class Partitioning:
    """Which units, parameters and messages belong to each of ``n_partitions`` partitions."""

    def __init__(self, model: MLP, n_partitions: int):
        if not isinstance(model, MLP):
            raise ValueError(f"Model parallelism cuts an MLP's layers; got model {getattr(model, 'name', model)!r}.")
        check_params("the model-parallel MLP", rules={"n_partitions": Integer(1, min(model.widths))},
                     n_partitions=n_partitions)
        self.model = model
        self.n_partitions = int(n_partitions)
        self.sizes = model.sizes  # (d, h_1, .., h_L, n_out)
        self.n_layers = len(self.sizes) - 1  # L + 1, the output included
        self._index = [self._param_index(k) for k in range(self.n_partitions)]

    # -- units and parameters ---------------------------------------------------
    def units(self, layer: int, k: int) -> Tuple[int, int]:
        """[lo, hi) of layer ``layer``'s units on partition k (layer 0: the input, every column;
        the output layer: every unit, each partition computing its share of every logit)."""
        n = self.sizes[layer]
        if layer == 0 or layer == self.n_layers:
            return 0, n
        K = self.n_partitions
        size, extra = divmod(n, K)
        lo = k * size + min(k, extra)
        return lo, lo + size + (k < extra)

    def width(self, layer: int, k: int) -> int:
        lo, hi = self.units(layer, k)
        return hi - lo

    def _param_index(self, k: int) -> np.ndarray:
        parts = []
        for layer, (wo, bo) in enumerate(self.model.offsets, start=1):
            n_in, n_out = self.sizes[layer - 1], self.sizes[layer]
            if layer == self.n_layers:  # the rows of the last hidden layer's units, the bias on 0
                lo, hi = self.units(layer - 1, k)
                parts.append((wo + np.arange(lo, hi)[:, None] * n_out + np.arange(n_out)[None, :]).ravel())
                parts.append(bo + np.arange(n_out if k == 0 else 0))
                continue
            lo, hi = self.units(layer, k)
            parts.append((wo + np.arange(n_in)[:, None] * n_out + np.arange(lo, hi)[None, :]).ravel())
            parts.append(bo + np.arange(lo, hi))
        return np.concatenate(parts).astype(np.int64)

    def block_shapes(self, k: int) -> List[Tuple[int, Tuple[int, int], int]]:
        """Partition k's blocks in its local vector, layer after layer: (layer, the weights'
        shape, the bias's length)."""
        shapes = []
        for layer in range(1, self.n_layers + 1):
            if layer == self.n_layers:
                shapes.append((layer, (self.width(layer - 1, k), self.sizes[layer]), self.sizes[layer] if k == 0 else 0))
            else:
                shapes.append((layer, (self.sizes[layer - 1], self.width(layer, k)), self.width(layer, k)))
        return shapes

    def param_index(self, k: int) -> np.ndarray:
        """Partition k's parameters as positions in the model's flat vector, in its local order."""
        return self._index[k]

    def split(self, w) -> List[np.ndarray]:
        """The K local vectors of the flat vector ``w``."""
        return [w[i] for i in self._index]

    def join(self, parts, xp=np):
        """The flat vector of the K local vectors (the inverse of :meth:`split`)."""
        w = xp.empty(self.model.n_params, dtype=parts[0].dtype)
        for i, p in zip(self._index, parts):
            w[xp.asarray(i)] = p
        return w

    # -- the phases of a step and their messages ----------------------------------
    def phases(self) -> List[Phase]:
        forward = [Phase("forward", layer) for layer in range(1, self.n_layers + 1)]
        return forward + [Phase("backward", layer) for layer in range(self.n_layers, 0, -1)]

    def senders(self, phase: Phase, k: int) -> List[int]:
        """Who sends partition k a message that it needs before it runs ``phase``."""
        layer, last = phase.layer, self.n_layers
        others = [j for j in range(self.n_partitions) if j != k]
        if phase.direction == "forward":
            # the output layer's inputs are the partition's own activations
            return others if 2 <= layer < last else []
        if layer == last:
            return others  # their shares of the logits, sent in the forward phase before
        return others if layer < last - 1 else []  # backward L: the output's gradient is local

    def bytes_per_step(self, batch_size: int, itemsize: int = 8) -> int:
        """Bytes of activations and gradients a replica's partitions send each other in one step."""
        K, last = self.n_partitions, self.n_layers
        units = 0
        for layer in range(1, last - 1):  # a hidden layer below a hidden layer
            for k in range(K):
                units += self.width(layer, k) * (K - 1)  # forward: k's block of a_layer to each other
                units += sum(self.width(layer, j) for j in range(K) if j != k)  # backward: k's shares
        units += K * (K - 1) * self.sizes[last]  # each partition's share of the logits to each other
        return units * int(batch_size) * int(itemsize)


class Part:
    """Partition k of one replica: its blocks of the weights, one step's state, its phases.

        part.start(w_k, X, y)          # a step at local parameters w_k on a minibatch
        for phase in partitioning.phases():
            sent = part.run(phase, {j: message from j for j in partitioning.senders(phase, k)})
            part.settle()              # once ``sent`` is on its way: the weights' gradient
        loss_share, grad_k = part.finish()

    ``loss_share``: the minibatch's mean loss (partition 0) plus this partition's part of
    the penalty; the shares of a replica's partitions add up to the model's objective,
    and ``grad_k`` is the objective's gradient with respect to w_k.
    """

    def __init__(self, partitioning: Partitioning, k: int, xp=np):
        self.p, self.k, self.xp = partitioning, int(k), xp
        self.model = partitioning.model
        self.n_params = int(partitioning.param_index(k).size)
        # every step writes every entry (each block's weights and bias): one buffer for all steps
        self.grad = xp.empty(self.n_params)
        self.at: Dict[int, Tuple[int, Tuple[int, int], int]] = {}  # layer -> (offset, W's shape, b's length)
        at = 0
        for layer, shape, n_bias in partitioning.block_shapes(self.k):
            self.at[layer] = (at, shape, n_bias)
            at += shape[0] * shape[1] + n_bias

    def _views(self, v, layer: int):
        """(weights, bias) views of layer ``layer``'s block in a local vector ``v``."""
        at, (rows, cols), n_bias = self.at[layer]
        return v[at: at + rows * cols].reshape(rows, cols), v[at + rows * cols: at + rows * cols + n_bias]

    def start(self, w_k, X, y) -> None:
        self.w = w_k
        self.X, self.y, self.n = X, y, X.shape[0]
        # layer -> (W_l[:, units], b_l[units]); the output's: (W_{L+1}[units of L, :], its bias or none)
        self.blocks = {layer: self._views(w_k, layer) for layer in self.at}
        # layer -> its input a_{layer-1} as blocks (rows of W, block), the owners' in partition order
        self.inputs: Dict[int, List[Tuple[int, int, object]]] = {1: [(0, self.p.sizes[0], X)]}
        self.own: Dict[int, object] = {}  # layer -> this partition's a_layer (the output's: its share of z)
        self.shares: Dict[int, object] = {}  # layer -> this partition's share of d a_layer[:, units]
        self.ahead: Dict[int, object] = {}  # layer -> our own block's term of the next layer's z
        self.data_loss = 0.0
        self.deferred: List[Tuple] = []  # work that settle() does once the phase's messages are out

    def _rows(self, layer: int, j: int) -> Tuple[int, int]:
        """The rows of our block of W_layer that partition j's block of a_{layer-1} meets."""
        if layer == self.p.n_layers:
            return (0, self.p.width(layer - 1, self.k)) if j == self.k else (0, 0)
        return self.p.units(layer - 1, j)

    def run(self, phase: Phase, received: Mapping[int, object]) -> Dict[int, object]:
        """Compute ``phase`` from the messages received; the messages to send, by receiver."""
        self.settle()
        layer, xp, p = phase.layer, self.xp, self.p
        W, b = self.blocks[layer]
        last = layer == p.n_layers
        others = [j for j in range(p.n_partitions) if j != self.k]
        if phase.direction == "forward":
            if last:  # our share of the logits, from our own block of a_L
                self.inputs[layer] = [(0, W.shape[0], self.own[layer - 1])]
                z = self.own[layer - 1] @ W
                self.own[layer] = z + b if b.size else z
                return {j: self.own[layer] for j in others}
            if layer == 1:
                z = self.X @ W
            else:  # our block's term, computed while the others' blocks travelled, then theirs
                self.inputs[layer] = [(*self._rows(layer, j), self.own[layer - 1] if j == self.k else received[j])
                                      for j in range(p.n_partitions)]
                z = self.ahead.pop(layer)
                for j in others:
                    lo, hi = self._rows(layer, j)
                    z += received[j] @ W[lo:hi]
            z += b
            self.own[layer] = a = activate(self.model.activation, z, xp)
            if layer + 1 == p.n_layers:
                return {}
            self.deferred.append(("ahead", layer))
            return {j: a for j in others}
        if last:  # the output's loss, and d loss / d z (summed over the minibatch; scaled in finish)
            z = self.own[layer] if self.k == 0 else received[0]
            for j in range(1, p.n_partitions):  # in partition order: the same logits on every partition
                z = z + (self.own[layer] if j == self.k else received[j])
            loss, dz = self.model.output_loss(z[:, 0] if self.model.output == "logistic" else z, self.y, xp)
            self.data_loss = loss
            # the mean's 1/n here, on a few values a row, rather than on the whole gradient in finish
            dz = (dz[:, None] if self.model.output == "logistic" else dz) * (1.0 / self.n)
            self.shares[layer - 1] = dz @ W.T  # the gradient of our block of a_L: ours alone
            self.deferred.append(("grad", layer, dz))
            return {}
        d_a = None
        for part in [received[j] for j in p.senders(phase, self.k)] + [self.shares.pop(layer)]:
            d_a = part if d_a is None else d_a + part
        dz = d_a * activation_slope(self.model.activation, self.own[layer], xp)
        if layer == 1:
            self.deferred.append(("grad", layer, dz))
            self.settle()
            return {}
        # the others' blocks of d a_{layer-1} first, so that they travel while we compute ours
        out = {}
        for j in others:
            lo, hi = self._rows(layer, j)
            out[j] = dz @ W[lo:hi].T
        self.deferred += [("share", layer, dz), ("grad", layer, dz)]
        return out

    def settle(self) -> None:
        """Compute what the last phase left for after its messages went out, while the peers
        receive them and compute: our block's term of the next layer (forward), our share of the
        gradient of the layer below and the weights' gradient (backward); a no-op otherwise."""
        xp = self.xp
        for work in self.deferred:
            kind, layer = work[0], work[1]
            if kind == "ahead":  # a_layer's own block times its rows of W_{layer+1}
                lo, hi = self._rows(layer + 1, self.k)
                self.ahead[layer + 1] = self.own[layer] @ self.blocks[layer + 1][0][lo:hi]
            elif kind == "share":
                lo, hi = self._rows(layer, self.k)
                self.shares[layer - 1] = work[2] @ self.blocks[layer][0][lo:hi].T
            else:
                dz = work[2]
                gW, gb = self._views(self.grad, layer)
                for lo, hi, block in self.inputs[layer]:
                    if isinstance(block, xp.ndarray):
                        xp.matmul(block.T, dz, out=gW[lo:hi])
                    else:  # scipy.sparse inputs
                        gW[lo:hi] = xp.asarray(block.T @ dz)
                if gb.size:  # (the output's bias is partition 0's)
                    xp.sum(dz, axis=0, out=gb)
        self.deferred = []

    def finish(self) -> Tuple[float, object]:
        """(this partition's share of the minibatch objective, the gradient of w_k). The gradient
        is this Part's buffer: read it (or copy it) before the next :meth:`start`."""
        self.settle()
        alpha, xp = self.model.alpha, self.xp
        # the penalty is on the weights, not the biases: each block's weights in one pass for its
        # square and one for the gradient (no masked copy of the whole vector)
        square = 0.0
        for layer in self.at:
            W = self.blocks[layer][0].ravel()
            gW = self._views(self.grad, layer)[0].ravel()
            square += float(xp.dot(W, W))
            if xp is np:
                blas.get_blas_funcs("axpy", (W, gW))(W, gW, a=alpha)  # in place: gW += alpha W
            else:
                gW += alpha * W
        loss = (self.data_loss / self.n if self.k == 0 else 0.0) + 0.5 * alpha * square
        return loss, self.grad


def partitioned_loss_grad(partitioning: Partitioning, w, X, y, xp=np) -> Tuple[float, np.ndarray, int]:
    """The objective on (X, y) and its gradient computed by K partitions in this process,
    messages routed phase by phase; with the bytes they sent. Equals ``model.loss_grad``."""
    parts = [Part(partitioning, k, xp) for k in range(partitioning.n_partitions)]
    for part, w_k in zip(parts, partitioning.split(w)):
        part.start(w_k, X, y)
    inbox: Dict[Tuple[int, int], object] = {}  # (receiver, sender) -> message of the phase before
    sent = 0
    for phase in partitioning.phases():
        outgoing = {}
        for part in parts:
            received = {j: inbox.pop((part.k, j)) for j in partitioning.senders(phase, part.k)}
            for receiver, message in part.run(phase, received).items():
                outgoing[(receiver, part.k)] = message
                sent += message.nbytes
            part.settle()
        inbox.update(outgoing)
    assert not inbox, f"messages nobody read: {sorted(inbox)}"
    shares = [part.finish() for part in parts]
    return sum(s for s, _ in shares), partitioning.join([g for _, g in shares], xp), sent
