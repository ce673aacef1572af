"""Model parallelism (DistBelief's first idea): an MLP's units cut across K partitions.

Every hidden layer's units are cut into K contiguous blocks (sizes differ by at most
one, the larger first); the output layer (one logistic unit, or a softmax whose
normalizer needs every logit) stays whole on partition 0. A partition owns the
incoming weights and the bias of its units, the column block ``W_l[:, units]`` and
``b_l[units]``, so a replica's parameters are cut the same way: partition k's
parameters are ``w[param_index(k)]`` (its *local* vector, layer after layer, each
block row-major), and the K local vectors together are the whole vector.

A step is a fixed sequence of phases, forward through layers 1 .. L+1 and backward
from L+1 to 1. Before a phase a partition waits for the messages ``senders`` names;
:meth:`Part.run` computes from them and returns the messages it sends:

- forward l <= L: its activations ``a_l[:, units]`` to every other owner of layer l+1
  (each unit's state crosses to a machine once, as in the paper);
- backward L+1 (partition 0): the loss, and the output's gradient with respect to
  ``a_L``, each other partition's block of it;
- backward l >= 2: its share ``dz_l[:, units] @ W_l[:, units]^T`` of the gradient with
  respect to ``a_{l-1}``, each other partition's block; the owner sums the shares.

Every partition reads the minibatch's inputs itself (the input layer is the data).
The transport is the caller's: :func:`partitioned_loss_grad` routes the messages in
this process (the oracle-checked form); ``tasks.distbelief.model_parallel`` runs each
Part on its own Dask worker. ``xp`` is NumPy, or CuPy for device arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Tuple

import numpy as np

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
        """[lo, hi) of layer ``layer``'s units on partition k (layer 0: the input, every column)."""
        n = self.sizes[layer]
        if layer == 0:
            return 0, n
        if layer == self.n_layers:
            return (0, n) if k == 0 else (0, 0)
        K = self.n_partitions
        size, extra = divmod(n, K)
        lo = k * size + min(k, extra)
        return lo, lo + size + (k < extra)

    def owners(self, layer: int) -> List[int]:
        """The partitions with units in ``layer``."""
        return [k for k in range(self.n_partitions) if self.width(layer, k)]

    def width(self, layer: int, k: int) -> int:
        lo, hi = self.units(layer, k)
        return hi - lo

    def _param_index(self, k: int) -> np.ndarray:
        parts = []
        for layer, (wo, bo) in enumerate(self.model.offsets, start=1):
            lo, hi = self.units(layer, k)
            if hi == lo:
                continue
            n_in, n_out = self.sizes[layer - 1], self.sizes[layer]
            parts.append((wo + np.arange(n_in)[:, None] * n_out + np.arange(lo, hi)[None, :]).ravel())
            parts.append(bo + np.arange(lo, hi))
        return np.concatenate(parts).astype(np.int64)

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
        if not self.width(phase.layer, k):
            return []
        if phase.direction == "forward":
            return [j for j in self.owners(phase.layer - 1) if j != k] if phase.layer >= 2 else []
        if phase.layer == self.n_layers:
            return []
        return [j for j in self.owners(phase.layer + 1) if j != k]

    def bytes_per_step(self, batch_size: int, itemsize: int = 8) -> int:
        """Bytes of activations and gradients a replica's partitions send each other in one step."""
        units = 0
        for layer in range(1, self.n_layers):  # a_layer forward, and the share of d a_layer backward
            for k in self.owners(layer):
                receivers = [j for j in self.owners(layer + 1) if j != k]
                units += self.width(layer, k) * len(receivers)  # forward: k's block to each
            for k in self.owners(layer + 1):
                units += sum(self.width(layer, j) for j in self.owners(layer) if j != k)  # backward: shares
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
        self.mask = xp.asarray(self.model.reg_mask()[partitioning.param_index(k)])
        self.n_params = int(partitioning.param_index(k).size)
        # every step writes every entry (each block's weights and bias): one buffer for all steps
        self.grad = xp.empty(self.n_params)

    def start(self, w_k, X, y) -> None:
        xp = self.xp
        self.w = w_k
        self.X, self.y, self.n = X, y, X.shape[0]
        self.blocks: Dict[int, Tuple[object, object]] = {}  # layer -> (W_l[:, units], b_l[units])
        at = 0
        for layer in range(1, self.p.n_layers + 1):
            width = self.p.width(layer, self.k)
            if not width:
                continue
            n_in = self.p.sizes[layer - 1]
            W = w_k[at: at + n_in * width].reshape(n_in, width)
            self.blocks[layer] = (W, w_k[at + n_in * width: at + n_in * width + width])
            at += n_in * width + width
        self.inputs: Dict[int, object] = {1: X}  # layer -> its whole input a_{layer-1}
        self.own: Dict[int, object] = {}  # layer -> this partition's a_layer (or z at the output)
        self.shares: Dict[int, object] = {}  # layer -> this partition's share of d a_layer[:, units]
        self.data_loss = 0.0
        self.deferred = None  # (layer, dz) whose weight gradient settle() computes

    def _grad_block(self, layer: int):
        """(weights, bias) views of this partition's block of the gradient for ``layer``."""
        at = 0
        for lay in range(1, layer):
            width = self.p.width(lay, self.k)
            at += (self.p.sizes[lay - 1] + 1) * width
        width, n_in = self.p.width(layer, self.k), self.p.sizes[layer - 1]
        return (self.grad[at: at + n_in * width].reshape(n_in, width),
                self.grad[at + n_in * width: at + (n_in + 1) * width])

    def _whole(self, layer: int, received: Mapping[int, object]):
        """a_layer across every partition: this partition's block and those received."""
        blocks = [self.own[layer] if j == self.k else received[j] for j in self.p.owners(layer)]
        return blocks[0] if len(blocks) == 1 else self.xp.concatenate(blocks, axis=1)

    def run(self, phase: Phase, received: Mapping[int, object]) -> Dict[int, object]:
        """Compute ``phase`` from the messages received; the messages to send, by receiver."""
        layer, xp, p = phase.layer, self.xp, self.p
        if layer not in self.blocks:
            return {}
        W, b = self.blocks[layer]
        last = layer == p.n_layers
        if phase.direction == "forward":
            if layer >= 2:
                self.inputs[layer] = self._whole(layer - 1, received)
            z = self.inputs[layer] @ W + b
            self.own[layer] = z if last else activate(self.model.activation, z, xp)
            if last:
                return {}
            return {j: self.own[layer] for j in p.owners(layer + 1) if j != self.k}
        if last:  # the output's loss, and d loss / d z (summed over the minibatch; scaled in finish)
            z = self.own[layer]
            loss, dz = self.model.output_loss(z[:, 0] if self.model.output == "logistic" else z, self.y, xp)
            self.data_loss = loss
            dz = dz[:, None] if self.model.output == "logistic" else dz
        else:
            parts = [received[j] for j in p.owners(layer + 1) if j != self.k]
            if layer in self.shares:
                parts.append(self.shares[layer])
            d_a = parts[0]
            for extra in parts[1:]:
                d_a = d_a + extra
            dz = d_a * activation_slope(self.model.activation, self.own[layer], xp)
        self.deferred = (layer, dz)  # the weights' gradient: after the messages are sent (settle)
        if layer == 1:
            self.settle()
            return {}
        d_in = dz @ W.T  # this partition's share of d a_{layer-1}, every unit of that layer
        out = {}
        for j in p.owners(layer - 1):
            lo, hi = p.units(layer - 1, j)
            if j == self.k:
                self.shares[layer - 1] = d_in[:, lo:hi]
            else:
                out[j] = xp.ascontiguousarray(d_in[:, lo:hi])
        return out

    def settle(self) -> None:
        """Compute what the last backward phase left for after its messages went out: the
        gradient of its weights, while the peers receive and compute (a no-op otherwise)."""
        if self.deferred is None:
            return
        (layer, dz), xp = self.deferred, self.xp
        self.deferred = None
        gW, gb = self._grad_block(layer)
        if isinstance(self.inputs[layer], xp.ndarray):
            xp.matmul(self.inputs[layer].T, dz, out=gW)
        else:  # scipy.sparse inputs
            gW[...] = xp.asarray(self.inputs[layer].T @ dz)
        xp.sum(dz, axis=0, out=gb)

    def finish(self) -> Tuple[float, object]:
        """(this partition's share of the minibatch objective, the gradient of w_k). The gradient
        is this Part's buffer: read it (or copy it) before the next :meth:`start`."""
        self.settle()
        alpha = self.model.alpha
        penalized = self.mask * self.w  # (the mask is 0 or 1: mask w^2 = (mask w)^2)
        penalty = 0.5 * alpha * float(self.xp.dot(penalized, penalized))
        loss = (self.data_loss / self.n if self.k == 0 else 0.0) + penalty
        self.grad /= self.n
        penalized *= alpha
        self.grad += penalized
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
