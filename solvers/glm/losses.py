"""Vectorised losses of a margin m = y <w, x>, for the methods that work on the primal
(DIANA, DistBelief). ``xp`` is the array module: NumPy, or CuPy for device arrays.

The kernels' scalar versions live with the model entries (solvers.glm.models:
``softplus`` is the logistic loss of margin -t there)."""

import numpy as np


def sigmoid(t, xp=np):
    """1 / (1 + exp(-t)), stable for large |t|."""
    return 0.5 * (1.0 + xp.tanh(0.5 * t))


def logistic(margins, xp=np):
    """(sum_i log(1 + exp(-m_i)), d loss_i / d m_i = -sigmoid(-m_i))."""
    return float(xp.sum(xp.logaddexp(0.0, -margins))), -sigmoid(-margins, xp)


def hinge(margins, xp=np):
    """(sum_i max(0, 1 - m_i), a subgradient: -1 where m_i < 1, else 0)."""
    slack = 1.0 - margins
    return float(xp.sum(xp.maximum(slack, 0.0))), xp.where(slack > 0, -1.0, 0.0)
