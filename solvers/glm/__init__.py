"""Generalized linear models in one primal-dual form.

- ``models``: the registry, one entry per model with its scalar math
- ``problems``: (X, y, parameters) -> the Problem every solver works on
- ``trace``: the per-round record and the result every solver returns
- ``checks``: one declarative table of parameter checks
- ``losses``: vectorised losses the primal methods share (DIANA, DistBelief)
"""
