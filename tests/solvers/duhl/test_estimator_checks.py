"""scikit-learn's estimator checks for the six estimators."""

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from solvers import ElasticNet, Lasso, LinearSVC, LogisticRegression, LogisticRegressionCV, Ridge

ESTIMATORS = [Lasso(), ElasticNet(), Ridge(), LinearSVC(), LogisticRegression(), LogisticRegressionCV(Cs=3, cv=3)]

# Bugs in solvers/ found by these checks; xfail(strict=True) so that the fix shows up.
KNOWN_BUGS = {}


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_compatible(estimator, check, request):
    name = getattr(check, "func", check).__name__
    if name in KNOWN_BUGS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[name]))
    check(estimator)
