"""Models of the DistBelief family on a flat parameter vector.

Every model is ``objective(w) = mean_i loss(w; x_i, y_i) + alpha/2 ||mask * w||^2``
(the mask leaves intercepts and biases unregularized). ``loss_grad`` gives the
objective and its gradient on a minibatch; ``sum_loss_grad`` gives the *data*
part summed over rows (what a Sandblaster work unit sends), and ``penalty``
the regularization, so that the full objective is
``sum_loss / n + penalty`` whichever way the rows were cut.

Labels are +-1 for classifiers (an MLP with a softmax output: class indices),
real for least squares. X may be a dense
array or a scipy.sparse CSR matrix. ``xp`` is the array module (numpy, or
cupy for device arrays); only dense X is supported with cupy.

| name           | loss(w; x, y)                            | parameters                     |
| -------------- | ---------------------------------------- | ------------------------------ |
| logistic       | log(1 + exp(-y (x.w + b)))               | w (d), b                       |
| svm            | max(0, 1 - y (x.w + b)) (subgrad.)       | w (d), b                       |
| least_squares  | (x.w + b - y)^2 / 2                      | w (d), b                       |
| mlp            | log(1 + exp(-y f(x))), or softmax cross- | W_l, b_l for every layer l     |
|                | entropy; f: tanh or ReLU hidden layers   | (see MLP)                      |
"""

from __future__ import annotations

import numbers
from typing import List, Tuple

import numpy as np

from solvers.glm import losses
from solvers.glm.checks import Integer, Options, Real, check_params

MODELS = ("logistic", "svm", "least_squares", "mlp")
MLP_KEYS = ("hidden", "activation", "output", "n_classes")  # the MLP's own model settings
CLASSIFIERS = ("logistic", "svm", "mlp")


def _matvec(X, w):
    return X @ w


def _rmatvec(X, r):
    return X.T @ r


class Model:
    """A loss on a flat parameter vector of length ``n_params``."""

    name = ""

    def __init__(self, n_features: int, alpha: float = 1e-4):
        check_params(f"model '{self.name}'", rules={"alpha": Real(0, None, "left")}, alpha=alpha)
        self.n_features = int(n_features)
        self.alpha = float(alpha)

    # -- to override ------------------------------------------------------
    n_params: int = 0

    def reg_mask(self) -> np.ndarray:
        mask = np.ones(self.n_params)
        mask[-1] = 0.0  # the intercept
        return mask

    def init(self, seed: int = 0) -> np.ndarray:
        return np.zeros(self.n_params)

    def decision(self, w, X, xp=np):
        return _matvec(X, w[:-1]) + w[-1]

    def sum_loss_grad(self, w, X, y, xp=np):
        raise NotImplementedError

    # -- shared -----------------------------------------------------------
    def penalty(self, w, xp=np):
        m = xp.asarray(self.reg_mask())
        return 0.5 * self.alpha * float(xp.sum(m * w * w))

    def loss_grad(self, w, X, y, xp=np):
        """Objective and gradient on the rows (X, y): mean data loss + penalty."""
        n = X.shape[0]
        loss, grad = self.sum_loss_grad(w, X, y, xp)
        m = xp.asarray(self.reg_mask())
        return loss / n + self.penalty(w, xp), grad / n + self.alpha * m * w

    def loss(self, w, X, y, xp=np):
        return self.loss_grad(w, X, y, xp)[0]

    def predict(self, w, X, xp=np):
        return xp.where(self.decision(w, X, xp) >= 0, 1.0, -1.0)

    def accuracy(self, w, X, y, xp=np):
        return float(xp.mean(self.predict(w, X, xp) == y))


class Logistic(Model):
    name = "logistic"

    @property
    def n_params(self):
        return self.n_features + 1

    def sum_loss_grad(self, w, X, y, xp=np):
        loss, dm = losses.logistic(y * self.decision(w, X, xp), xp)
        r = y * dm  # d loss / d decision
        return loss, xp.concatenate([_rmatvec(X, r), xp.sum(r, keepdims=True)])


class HingeSVM(Model):
    name = "svm"

    @property
    def n_params(self):
        return self.n_features + 1

    def sum_loss_grad(self, w, X, y, xp=np):
        loss, dm = losses.hinge(y * self.decision(w, X, xp), xp)
        r = y * dm
        return loss, xp.concatenate([_rmatvec(X, r), xp.sum(r, keepdims=True)])


class LeastSquares(Model):
    name = "least_squares"

    @property
    def n_params(self):
        return self.n_features + 1

    def sum_loss_grad(self, w, X, y, xp=np):
        r = self.decision(w, X, xp) - y
        return 0.5 * float(xp.sum(r * r)), xp.concatenate([_rmatvec(X, r), xp.sum(r, keepdims=True)])

    def predict(self, w, X, xp=np):
        return self.decision(w, X, xp)


def _hidden_widths(hidden) -> Tuple[int, ...]:
    """``hidden`` (an int, or a list of ints) as a tuple of layer widths, checked."""
    check_params("model 'mlp'", hidden=hidden)
    return (int(hidden),) if isinstance(hidden, numbers.Integral) else tuple(int(h) for h in hidden)


ACTIVATIONS = ("tanh", "relu")
OUTPUTS = ("logistic", "softmax")


def activate(name: str, z, xp=np):
    return xp.tanh(z) if name == "tanh" else xp.maximum(z, 0.0)


def activation_slope(name: str, a, xp=np):
    """d a / d z from the activation a itself (tanh: 1 - a^2; ReLU: 1 where a > 0)."""
    return 1.0 - a * a if name == "tanh" else (a > 0).astype(a.dtype)


class MLP(Model):
    """Fully connected layers of tanh or ReLU units and a logistic (one unit, labels +-1)
    or softmax (``n_classes`` units, labels 0..n_classes-1; +-1 for two) output.

    Parameters, layer after layer (l = 1 .. L+1, the last one the output):
    ``W_l`` (n_in x n_out, row-major: a unit's incoming weights are a column) then ``b_l``.
    With ``hidden=H`` (one layer) and a logistic output this is [W (d x H), c, v, b]:
    ``f(x) = v . tanh(W^T x + c) + b``. Weights are penalized, biases are not.
    """

    name = "mlp"

    def __init__(self, n_features: int, hidden=32, alpha: float = 1e-4, activation: str = "tanh",
                 output: str = "logistic", n_classes: int = 2):
        super().__init__(n_features, alpha)
        self.widths = _hidden_widths(hidden)
        check_params("model 'mlp'", rules={"activation": Options(ACTIVATIONS), "output": Options(OUTPUTS),
                                           "n_classes": Integer(2)},
                     activation=activation, output=output, n_classes=n_classes)
        if output == "logistic" and n_classes != 2:
            raise ValueError(f"The 'n_classes' parameter of model 'mlp' must be 2 with output='logistic' "
                             f"(use output='softmax'). Got {n_classes!r} instead.")
        self.hidden = self.widths[0] if len(self.widths) == 1 else list(self.widths)
        self.activation, self.output, self.n_classes = activation, output, int(n_classes)
        n_out = 1 if output == "logistic" else self.n_classes
        self.sizes = (self.n_features, *self.widths, n_out)  # units per layer, the input first
        # (start of W_l, start of b_l) for l = 1 .. L+1
        self.offsets: List[Tuple[int, int]] = []
        at = 0
        for n_in, n_out in zip(self.sizes[:-1], self.sizes[1:]):
            self.offsets.append((at, at + n_in * n_out))
            at += n_in * n_out + n_out
        self._n_params = at

    @property
    def n_params(self):
        return self._n_params

    def layers(self, w) -> List[Tuple[object, object]]:
        """[(W_l, b_l), ...] as views of the flat vector w."""
        out = []
        for (n_in, n_out), (wo, bo) in zip(zip(self.sizes[:-1], self.sizes[1:]), self.offsets):
            out.append((w[wo:bo].reshape(n_in, n_out), w[bo:bo + n_out]))
        return out

    def reg_mask(self):
        mask = np.zeros(self.n_params)
        for (wo, bo) in self.offsets:
            mask[wo:bo] = 1.0
        return mask

    def init(self, seed: int = 0):
        """Weights N(0, 1/n_in) (tanh) or N(0, 2/n_in) (ReLU), biases 0."""
        rng = np.random.default_rng(seed)
        gain = 1.0 if self.activation == "tanh" else 2.0
        w = np.zeros(self.n_params)
        for n_in, (wo, bo) in zip(self.sizes[:-1], self.offsets):
            w[wo:bo] = rng.standard_normal(bo - wo) / np.sqrt(n_in / gain)
        return w

    def _forward(self, w, X, xp):
        """The hidden activations [a_1 .. a_L] and the output's pre-activation."""
        acts, a = [], X
        layers = self.layers(w)
        for W, b in layers[:-1]:
            a = activate(self.activation, a @ W + b, xp)
            acts.append(a)
        W, b = layers[-1]
        z = a @ W + b
        return acts, (z[:, 0] if self.output == "logistic" else z)

    def decision(self, w, X, xp=np):
        return self._forward(w, X, xp)[1]

    def classes(self, y, xp=np):
        """Softmax labels as class indices (+-1 labels of two classes: +1 is class 1)."""
        if self.n_classes == 2:
            return (y > 0).astype(np.int64)
        return y.astype(np.int64)

    def output_loss(self, z, y, xp=np):
        """(summed loss, d loss / d z) of the output's pre-activation z."""
        if self.output == "logistic":
            loss, dm = losses.logistic(y * z, xp)
            return loss, y * dm
        return softmax_cross_entropy(z, self.classes(y, xp), xp)

    def sum_loss_grad(self, w, X, y, xp=np):
        layers = self.layers(w)
        acts, z = self._forward(w, X, xp)
        loss, dz = self.output_loss(z, y, xp)
        dz = dz[:, None] if self.output == "logistic" else dz
        grads = []
        for i in range(len(layers) - 1, -1, -1):  # layer i + 1, its input a_i (a_0 = X)
            a_in = acts[i - 1] if i > 0 else X
            W, _ = layers[i]
            grads.append((xp.asarray(a_in.T @ dz).ravel(), dz.sum(axis=0)))
            if i > 0:
                dz = (dz @ W.T) * activation_slope(self.activation, acts[i - 1], xp)
        return loss, xp.concatenate([part for pair in reversed(grads) for part in pair])

    def predict(self, w, X, xp=np):
        if self.output == "logistic":
            return super().predict(w, X, xp)
        return xp.argmax(self.decision(w, X, xp), axis=1)

    def accuracy(self, w, X, y, xp=np):
        if self.output == "logistic":
            return super().accuracy(w, X, y, xp)
        return float(xp.mean(self.predict(w, X, xp) == self.classes(y, xp)))


def softmax_cross_entropy(z, classes, xp=np):
    """(sum_i -log softmax(z_i)[c_i], d loss / d z = softmax(z) - onehot(c)), stable for large z."""
    shifted = z - z.max(axis=1, keepdims=True)
    log_norm = xp.log(xp.exp(shifted).sum(axis=1))
    rows = xp.arange(z.shape[0])
    loss = float(xp.sum(log_norm - shifted[rows, classes]))
    grad = xp.exp(shifted - log_norm[:, None])
    grad[rows, classes] -= 1.0
    return loss, grad


def make_model(name: str, n_features: int, **kwargs) -> Model:
    """The model ``name`` (one of MODELS) with its keyword arguments (alpha, hidden)."""
    classes = {"logistic": Logistic, "svm": HingeSVM, "least_squares": LeastSquares, "mlp": MLP}
    if name not in classes:
        raise ValueError(f"The 'model' parameter of DistBelief must be one of {MODELS}. Got {name!r} instead.")
    if name != "mlp":
        for key in MLP_KEYS:
            kwargs.pop(key, None)
    try:
        return classes[name](n_features, **kwargs)
    except TypeError as error:
        raise ValueError(f"Model '{name}': {error}") from None
