"""tasks.problems: labels as each model needs them; the warm-up's miniature keeps what
Numba compiles on (dtype, layout, read-only flags)."""

import numpy as np

from tasks.problems import labels_for, read_only_miniature


def test_continuous_targets_become_two_balanced_classes_for_classifiers():
    y = np.array([-2.0, -1.0, 0.5, 3.0])
    np.testing.assert_array_equal(labels_for("svm", y), [-1, -1, 1, 1])
    np.testing.assert_array_equal(labels_for("mlp", y), [-1, -1, 1, 1])
    np.testing.assert_array_equal(labels_for("lasso", y), y)


def test_two_classes_map_the_larger_to_plus_one():
    np.testing.assert_array_equal(labels_for("logistic", np.array([0, 1, 1])), [-1, 1, 1])
    np.testing.assert_array_equal(labels_for("svm", np.array([7, 2, 7])), [1, -1, 1])


def test_warmup_miniature_keeps_dtype_layout_and_read_only_flags():
    X = np.asfortranarray(np.random.default_rng(0).standard_normal((500, 8)).astype(np.float32))
    X.setflags(write=False)
    y = np.where(np.arange(500) < 480, -1.0, 1.0)  # rare positives, all at the end
    small, small_y = read_only_miniature("svm", X, y)
    assert small.dtype == np.float32 and np.isfortran(small) and not small.flags.writeable
    assert set(np.unique(small_y)) == {-1.0, 1.0} and not small_y.flags.writeable
    # a wide X: its first columns only (a Fortran file's row would touch a page of every column)
    wide = np.asfortranarray(np.ones((100, 1000)))
    small, _ = read_only_miniature("lasso", wide, np.zeros(100))
    assert small.shape == (64, 256) and np.isfortran(small)


def test_a_discrete_multiclass_target_stops_with_the_option_to_choose_a_class():
    import pytest

    from tasks.data import DataError

    with pytest.raises(DataError, match=r"model 'logistic' trains two classes; the target has 3 \(0, 1, 2\): "
                                        r"set data.positive_class=<one of them>"):
        labels_for("logistic", np.array([0, 1, 2, 1, 0]))
    np.testing.assert_array_equal(labels_for("ridge", np.array([0, 1, 2])), [0, 1, 2])  # regression: as is


def test_a_continuous_target_is_split_and_said_so():
    from tasks.problems import describe_labels

    y = np.array([-2.0, -1.0, 0.5, 3.0])
    assert "continuous" in describe_labels("svm", y) and "median" in describe_labels("svm", y)
    assert describe_labels("svm", np.array([0.0, 1.0, 1.0])) is None
    assert describe_labels("lasso", y) is None


def test_resolve_model_picks_a_classifiers_side_once():
    """A Hydra model config with a classifier's options resolves to its entry on the data's shape;
    ``dual_for`` (arms that need the dual) makes dual='auto' take the dual, saying why; a resolved
    config (no options left) resolves to itself; a config without options is its own entry."""
    from tasks.problems import resolve_model

    cfg = {"name": "logistic", "C": 1.0, "fit_intercept": False, "intercept_scaling": 1.0, "penalty": "l2",
           "l1_ratio": 0.5, "dual": "auto"}
    tall, note = resolve_model(cfg, 100, 10)
    assert tall == {"name": "logistic_l2", "C": 1.0, "fit_intercept": False, "intercept_scaling": 1.0}
    assert note == "dual='auto' chose the primal formulation: n_samples=100 >= n_features=10"
    assert resolve_model(tall, 100, 10) == (tall, None)
    wide, _ = resolve_model(cfg, 10, 100)
    assert wide["name"] == "logistic" and resolve_model(wide, 100, 10) == (wide, None)  # no flip on re-resolving
    forced, note = resolve_model(cfg, 100, 10, dual_for="CoCoA+ arms")
    assert forced["name"] == "logistic" and note == "dual='auto' chose the dual formulation: CoCoA+ arms"
    l1, note = resolve_model({**cfg, "penalty": "l1"}, 100, 10, dual_for="CoCoA+ arms")  # no dual: the primal
    assert l1["name"] == "logistic_l1" and "only the primal" in note
    enet, _ = resolve_model({**cfg, "penalty": "elasticnet", "l1_ratio": 0.3}, 10, 100)
    assert enet == {"name": "logistic_elasticnet", "C": 1.0, "fit_intercept": False, "intercept_scaling": 1.0,
                    "l1_ratio": 0.3}
    svm, _ = resolve_model({"name": "svm", "C": 2.0, "loss": "squared_hinge", "penalty": "l1", "dual": "auto",
                            "fit_intercept": True, "intercept_scaling": 1.0}, 10, 100)
    assert svm["name"] == "svm_l1" and svm["C"] == 2.0
    assert resolve_model({"name": "lasso", "alpha": 0.1}, 10, 100) == ({"name": "lasso", "alpha": 0.1}, None)
