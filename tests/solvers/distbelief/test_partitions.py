"""Model parallelism's math: the deeper MLP against finite differences and its written-out
formula, a partitioned forward and backward pass against the unpartitioned one (to 1e-12),
the bytes the partitions send against the count the layer widths give (a closed form written
here), and the partitions' parameters against the whole vector."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import check_grad

from solvers.distbelief.models import make_model
from solvers.distbelief.partitions import Part, Partitioning, partitioned_loss_grad

# (hidden widths, activation, output, classes): widths that K = 2 and 3 do not divide, every
# layer at least 3 units (K = 3 fits)
NETS = [([5, 7], "tanh", "logistic", 2), ([7, 5, 6], "relu", "softmax", 3), ([4], "tanh", "logistic", 2),
        ([3, 8], "tanh", "softmax", 2)]


def data(net, n=13, d=6, seed=0, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X[rng.random((n, d)) < 0.3] = 0.0
    hidden, activation, output, classes = net
    y = (np.where(rng.standard_normal(n) > 0, 1.0, -1.0) if classes == 2
         else rng.integers(0, classes, n).astype(float))
    model = make_model("mlp", d, hidden=hidden, alpha=0.05, activation=activation, output=output, n_classes=classes)
    w = model.init(1) + 0.1 * rng.standard_normal(model.n_params)
    return (sp.csr_matrix(X) if sparse else X), y, model, w


@pytest.mark.parametrize("net", NETS)
def test_deep_mlp_gradient_matches_finite_differences(net):
    X, y, model, w = data(net)
    err = check_grad(lambda v: model.loss_grad(v, X, y)[0], lambda v: model.loss_grad(v, X, y)[1], w)
    assert err < 1e-6 * max(1.0, np.linalg.norm(model.loss_grad(w, X, y)[1]))


def test_one_hidden_layer_is_the_written_out_network():
    """f(x) = v . tanh(W^T x + c) + b, mean logistic loss + alpha/2 (||W||^2 + ||v||^2)."""
    X, y, model, w = data(([4], "tanh", "logistic", 2))
    d, h = 6, 4
    W, c, v, b = w[:d * h].reshape(d, h), w[d * h:d * h + h], w[d * h + h:d * h + 2 * h], w[-1]
    f = np.tanh(X @ W + c) @ v + b
    expected = np.mean(np.log1p(np.exp(-y * f))) + 0.025 * (np.sum(W ** 2) + np.sum(v ** 2))
    assert model.loss(w, X, y) == pytest.approx(expected, rel=1e-13)


def test_softmax_output_is_cross_entropy():
    X, y, model, w = data(([7, 5, 6], "relu", "softmax", 3))
    z = model.decision(w, X)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    penalty = 0.025 * np.sum(model.reg_mask() * w * w)
    expected = -np.mean(np.log(p[np.arange(len(y)), y.astype(int)])) + penalty
    assert model.loss(w, X, y) == pytest.approx(expected, rel=1e-13)


@pytest.mark.parametrize("net", NETS)
@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("sparse", [False, True])
def test_partitioned_pass_equals_the_whole_network(net, K, sparse):
    X, y, model, w = data(net, sparse=sparse)
    loss, grad = model.loss_grad(w, X, y)
    p_loss, p_grad, _ = partitioned_loss_grad(Partitioning(model, K), w, X, y)
    assert abs(p_loss - loss) <= 1e-12 * max(1.0, abs(loss))
    np.testing.assert_allclose(p_grad, grad, rtol=0, atol=1e-12 * max(1.0, np.abs(grad).max()))


def test_more_partitions_than_units_is_refused():
    model = make_model("mlp", 6, hidden=[4, 9])
    with pytest.raises(ValueError, match=r"'n_partitions' parameter of the model-parallel MLP must be an int in "
                                         r"\[1, 4\]. Got 5 instead."):
        Partitioning(model, 5)


@pytest.mark.parametrize("hidden, K", [([5, 7], 2), ([5, 7], 3), ([7, 5, 6], 3), ([4], 3), ([10, 11, 9, 12], 4)])
def test_bytes_sent_per_step_are_the_count_the_widths_give(hidden, K):
    """Forward, each hidden layer but the last sends its activations to the K - 1 other
    partitions, and backward the same counts of gradients; the last hidden layer sends nothing,
    each partition sending its share of the logits (one value a row here) to the K - 1 others
    instead. 8 bytes a value, B rows."""
    B = 13
    X, y, model, w = data((hidden, "tanh", "logistic", 2), n=B)
    expected = 8 * B * (2 * (K - 1) * sum(hidden[:-1]) + K * (K - 1) * 1)
    p = Partitioning(model, K)
    assert partitioned_loss_grad(p, w, X, y)[2] == expected
    assert p.bytes_per_step(B) == expected


@pytest.mark.parametrize("net", NETS)
@pytest.mark.parametrize("K", [2, 3])
def test_partitions_parameters_are_blocks_of_every_layer_and_add_up_to_the_vector(net, K):
    X, y, model, w = data(net)
    p = Partitioning(model, K)
    index = np.concatenate([p.param_index(k) for k in range(K)])
    assert np.array_equal(np.sort(index), np.arange(model.n_params))  # disjoint, and cover the vector
    np.testing.assert_array_equal(p.join(p.split(w)), w)
    # partition k's local vector is, layer after layer, the columns of its units: W_l[:, units], b_l[units];
    # the output layer's rows of the last hidden layer's units of k, and its bias on partition 0
    widths = [model.n_features, *net[0], 1 if net[2] == "logistic" else net[3]]
    for k, local in enumerate(p.split(w)):
        expected = []
        for layer, (W, b) in enumerate(model.layers(w), start=1):
            if layer == len(widths) - 1:
                rows = np.array_split(np.arange(widths[layer - 1]), K)[k]
                expected += [W[rows, :].ravel(), b if k == 0 else b[:0]]
            else:
                units = np.array_split(np.arange(widths[layer]), K)[k]
                expected += [W[:, units].ravel(), b[units]]
        np.testing.assert_array_equal(local, np.concatenate(expected))


def test_a_part_runs_its_phases_with_messages_from_the_others_only():
    """Each phase's messages go to other partitions, and a partition waits only for what it is sent."""
    X, y, model, w = data(([5, 7], "tanh", "logistic", 2))
    p = Partitioning(model, 3)
    parts = [Part(p, k) for k in range(3)]
    for part, local in zip(parts, p.split(w)):
        part.start(local, X, y)
    pending = {}
    for phase in p.phases():
        sent = {}
        for part in parts:
            received = {j: pending.pop((part.k, j)) for j in p.senders(phase, part.k)}
            for j, message in part.run(phase, received).items():
                assert j != part.k and message.shape[0] == X.shape[0]
                sent[(j, part.k)] = message
        pending = sent
    assert pending == {}


@pytest.mark.gpu
@pytest.mark.parametrize("K", [1, 3])
def test_partitioned_pass_on_the_gpu_equals_the_cpu(K):
    import cupy

    X, y, model, w = data(([5, 7], "tanh", "logistic", 2))
    loss, grad = model.loss_grad(w, X, y)
    g_loss, g_grad, sent = partitioned_loss_grad(Partitioning(model, K), cupy.asarray(w), cupy.asarray(X),
                                                 cupy.asarray(y), xp=cupy)
    assert abs(g_loss - loss) <= 1e-12 * max(1.0, abs(loss))
    np.testing.assert_allclose(cupy.asnumpy(g_grad), grad, rtol=0, atol=1e-12 * max(1.0, np.abs(grad).max()))
    assert sent == Partitioning(model, K).bytes_per_step(X.shape[0])
