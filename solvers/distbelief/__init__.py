"""DistBelief (Dean et al., NIPS 2012) math: models on a flat parameter vector,
update rules, an L-BFGS on remote vectors, Downpour and Sandblaster state
machines. No Dask here: ``tasks.param_server``, ``tasks.downpour`` and
``tasks.sandblaster`` place these on a cluster."""

from solvers.distbelief.lbfgs import ArrayOps, lbfgs, two_loop
from solvers.distbelief.models import CLASSIFIERS, MODELS, make_model
from solvers.distbelief.rules import RULES, make_rule

__all__ = ["ArrayOps", "lbfgs", "two_loop", "make_model", "MODELS", "CLASSIFIERS", "RULES", "make_rule"]
