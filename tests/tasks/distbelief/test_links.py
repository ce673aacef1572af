"""The direct links between a replica's partitions (tasks.distbelief.links), in one process.

Oracles: the arrays sent, bit for bit, in the order sent; the peer that was closed. The
model-parallel tests run the links between Dask workers (tests/tasks/distbelief/test_model_parallel.py).
"""

import contextlib
import ssl
import threading
import time

import numpy as np
import pytest

from tasks.distbelief.links import Links, Listener

pytestmark = pytest.mark.timeout(60)


class Received:
    """What a listener delivered, and the peers it lost."""

    def __init__(self):
        self.items, self.lost, self.cv = [], [], threading.Condition()

    def deliver(self, tag, array):
        with self.cv:
            self.items.append((tag, array))
            self.cv.notify_all()

    def gone(self, sender):
        with self.cv:
            self.lost.append(sender)
            self.cv.notify_all()

    def wait(self, what, timeout=20.0):
        with self.cv:
            assert self.cv.wait_for(what, timeout), (self.items, self.lost)


def _messages(seed):
    rng = np.random.default_rng(seed)
    return [("f1", rng.standard_normal((1024, 1024))),  # 8 MB: more than the sockets' buffers hold
            ("f3", rng.standard_normal((7, 3)).astype(np.float32)),
            ("b2", np.empty((0, 4))),
            ("b2", np.asfortranarray(rng.standard_normal((5, 6))))]  # sent as its C-ordered copy


def test_two_partitions_sending_at_once_each_get_every_array_whole_and_in_order():
    got = [Received(), Received()]
    listeners = [Listener(f"p{k}", got[k].deliver, got[k].gone, "127.0.0.1") for k in range(2)]
    addresses = [lst.address for lst in listeners]
    links = [Links(k, addresses, timeout=20) for k in range(2)]
    sent = {k: _messages(k) for k in range(2)}

    def send(k):  # nobody reads in this thread: the listener's reader does, as a partition computes
        for step, (phase, array) in enumerate(sent[k]):
            links[k].send(1 - k, step, phase, array)

    threads = [threading.Thread(target=send, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for k in range(2):
        got[k].wait(lambda: len(got[k].items) == 4)
        assert [tag for tag, _ in got[k].items] == [(step, phase, 1 - k) for step, (phase, _) in
                                                   enumerate(sent[1 - k])]
        for (_, array), (_, expected) in zip(got[k].items, sent[1 - k]):
            assert array.dtype == expected.dtype and array.shape == expected.shape
            np.testing.assert_array_equal(array, expected)
    for link in links:
        link.close()
    for k in range(2):  # each listener learns that its peer's link ended
        got[k].wait(lambda: got[k].lost == [1 - k])
        listeners[k].close()


def test_a_send_to_a_closed_listener_fails_and_a_message_must_be_a_matrix():
    got = Received()
    listener = Listener("p1", got.deliver, got.gone, "127.0.0.1")
    link = Links(0, [None, listener.address], timeout=5)
    with pytest.raises(ValueError, match=r"2-D array; got shape \(3,\)"):
        link.send(1, 0, "f1", np.zeros(3))
    listener.close()
    with pytest.raises(OSError):  # reset by the peer, or a broken pipe: within a few sends
        for step in range(100):
            link.send(1, step, "f1", np.zeros((256, 256)))
            time.sleep(0.01)
    link.close()


def test_over_tls_a_link_with_the_clusters_certificate_delivers_and_a_plain_one_does_not(tls_security):
    server = tls_security.get_listen_args("worker")["ssl_context"]
    client = tls_security.get_connection_args("worker")["ssl_context"]
    got = Received()
    listener = Listener("p1", got.deliver, got.gone, "127.0.0.1", tls=server)
    with Links(0, [None, listener.address], timeout=10) as plain, contextlib.suppress(OSError):
        plain.send(1, 0, "f1", np.ones((2, 2)))  # TCP without TLS: the listener's handshake fails on it
    with Links(0, [None, listener.address], timeout=10, tls=client) as link:
        link.send(1, 1, "b2", np.arange(6.0).reshape(2, 3))
        got.wait(lambda: len(got.items) == 1)
    time.sleep(0.2)
    assert [tag for tag, _ in got.items] == [(1, "b2", 0)]  # the plain link's frame never arrived
    np.testing.assert_array_equal(got.items[0][1], np.arange(6.0).reshape(2, 3))
    untrusting = ssl.create_default_context()  # no cluster CA: refuses the listener's certificate
    untrusting.check_hostname = False
    with pytest.raises(ssl.SSLError):
        Links(0, [None, listener.address], timeout=10, tls=untrusting)
    listener.close()
