"""Models of the DistBelief family on a flat parameter vector.

Every model is ``objective(w) = mean_i loss(w; x_i, y_i) + alpha/2 ||mask * w||^2``
(the mask leaves intercepts and biases unregularized). ``loss_grad`` gives the
objective and its gradient on a minibatch; ``sum_loss_grad`` gives the *data*
part summed over rows (what a Sandblaster work unit sends), and ``penalty``
the regularization, so that the full objective is
``sum_loss / n + penalty`` whichever way the rows were cut.

Labels are +-1 for classifiers, real for least squares. X may be a dense
array or a scipy.sparse CSR matrix. ``xp`` is the array module (numpy, or
cupy for device arrays); only dense X is supported with cupy.

| name           | loss(w; x, y)                       | parameters                   |
| -------------- | ----------------------------------- | ---------------------------- |
| logistic       | log(1 + exp(-y (x.w + b)))          | w (d), b                     |
| svm            | max(0, 1 - y (x.w + b)) (subgrad.)  | w (d), b                     |
| least_squares  | (x.w + b - y)^2 / 2                 | w (d), b                     |
| mlp            | log(1 + exp(-y f(x))), f = v.tanh(W x + c) + b | W (d*H), c (H), v (H), b |
"""

from __future__ import annotations

import numpy as np

from solvers.glm import losses
from solvers.glm.checks import Real, check_params

MODELS = ("logistic", "svm", "least_squares", "mlp")
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


class MLP(Model):
    """One hidden layer of tanh units, a logistic output: f(x) = v . tanh(W^T x + c) + b."""

    name = "mlp"

    def __init__(self, n_features: int, hidden: int = 32, alpha: float = 1e-4):
        super().__init__(n_features, alpha)
        check_params("model 'mlp'", hidden=hidden)
        self.hidden = hidden

    @property
    def n_params(self):
        d, h = self.n_features, self.hidden
        return d * h + h + h + 1

    def _unpack(self, w):
        d, h = self.n_features, self.hidden
        W = w[: d * h].reshape(d, h)
        c = w[d * h: d * h + h]
        v = w[d * h + h: d * h + 2 * h]
        return W, c, v, w[-1]

    def reg_mask(self):
        d, h = self.n_features, self.hidden
        mask = np.zeros(self.n_params)
        mask[: d * h] = 1.0
        mask[d * h + h: d * h + 2 * h] = 1.0
        return mask

    def init(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        d, h = self.n_features, self.hidden
        w = np.zeros(self.n_params)
        w[: d * h] = rng.standard_normal(d * h) / np.sqrt(d)
        w[d * h + h: d * h + 2 * h] = rng.standard_normal(h) / np.sqrt(h)
        return w

    def _forward(self, w, X, xp):
        W, c, v, b = self._unpack(w)
        H = xp.tanh(X @ W + c)
        return H, H @ v + b

    def decision(self, w, X, xp=np):
        return self._forward(w, X, xp)[1]

    def sum_loss_grad(self, w, X, y, xp=np):
        W, c, v, b = self._unpack(w)
        H, f = self._forward(w, X, xp)
        loss, dm = losses.logistic(y * f, xp)
        r = y * dm  # d loss / d f
        dH = (r[:, None] * v[None, :]) * (1.0 - H * H)  # d loss / d pre-activation
        gW = X.T @ dH
        gW = xp.asarray(gW)
        grad = xp.concatenate([gW.ravel(), dH.sum(axis=0), H.T @ r, xp.sum(r, keepdims=True)])
        return loss, grad


def make_model(name: str, n_features: int, **kwargs) -> Model:
    """The model ``name`` (one of MODELS) with its keyword arguments (alpha, hidden)."""
    classes = {"logistic": Logistic, "svm": HingeSVM, "least_squares": LeastSquares, "mlp": MLP}
    if name not in classes:
        raise ValueError(f"The 'model' parameter of DistBelief must be one of {MODELS}. Got {name!r} instead.")
    if name != "mlp":
        kwargs.pop("hidden", None)
    try:
        return classes[name](n_features, **kwargs)
    except TypeError as error:
        raise ValueError(f"Model '{name}': {error}") from None
