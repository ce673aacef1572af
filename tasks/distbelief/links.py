"""Direct links between the partitions of a model-parallel replica: a socket each way per pair.

A replica's step sends activations and gradients between its partitions three or more times,
and waits for each. A Dask actor call costs a few milliseconds a message (two event-loop hops
and Dask's RPC, both ways), a plain socket between the two processes tens of microseconds; so
each partition listens on its worker's host (:class:`Listener`, opened by the partition's
inbox) and connects to each peer's listener (:class:`Links`). A frame is a fixed header
(step, phase, sender, dtype, shape) and the array's bytes, received straight into a new array
by one reader thread per incoming connection, so that a peer's send never waits for this
partition's thread. On a cluster with TLS (Dask's ``Security``) the links use the worker's own
TLS contexts, so they are authenticated and encrypted as Dask's comms are.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Callable, List, Optional, Tuple

import numpy as np

# step, phase ("f1", "b2", ...), sender, dtype ("<f8"), rows, cols
_FRAME = struct.Struct("<q8si8sqq")
_HELLO = struct.Struct("<i")  # the connecting partition's index


def worker_endpoint(worker=None):
    """(host, listening TLS context, connecting TLS context) of a Dask worker (default: the one
    this runs on): its address's host (loopback for an in-process cluster) and its
    ``Security``'s contexts (None without TLS)."""
    from distributed import get_worker
    from distributed.comm import get_address_host, parse_address

    worker = worker or get_worker()
    scheme, _ = parse_address(worker.address)
    host = "127.0.0.1" if scheme == "inproc" else get_address_host(worker.address)
    listen = worker.security.get_listen_args("worker").get("ssl_context")
    connect = worker.security.get_connection_args("worker").get("ssl_context")
    return host, listen, connect


def _recv_exactly(sock, view: memoryview) -> bool:
    """Fill ``view`` from ``sock``; False if the peer closed the connection first."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            return False
        got += n
    return True


class Listener:
    """A partition's listening socket on ``host``; each peer's frames are handed to
    ``deliver((step, phase, sender), array)`` as they arrive, and ``lost(sender)`` is called
    once a peer's connection ends. ``tls``: a server-side ``ssl.SSLContext``, or None."""

    def __init__(self, name: str, deliver: Callable[[tuple, np.ndarray], None], lost: Callable[[int], None],
                 host: str, tls=None):
        self.name, self._deliver, self._lost, self._tls = name, deliver, lost, tls
        self._sock = socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.address: Tuple[str, int] = self._sock.getsockname()[:2]
        self._conns: List[socket.socket] = []
        self._closed = False
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"{name}-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._read, args=(conn,), name=f"{self.name}-read", daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        sender = None
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                conn = self._tls.wrap_socket(conn, server_side=True)
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._conns.append(conn)
            hello = bytearray(_HELLO.size)
            if not _recv_exactly(conn, memoryview(hello)):
                return
            (sender,) = _HELLO.unpack(hello)
            header = bytearray(_FRAME.size)
            while _recv_exactly(conn, memoryview(header)):
                step, phase, j, dtype, rows, cols = _FRAME.unpack(header)
                array = np.empty((rows, cols), dtype=np.dtype(dtype.rstrip(b"\0").decode()))
                if array.nbytes and not _recv_exactly(conn, memoryview(array).cast("B")):
                    return
                self._deliver((step, phase.rstrip(b"\0").decode(), j), array)
        except OSError:  # a peer lost, or this listener closed
            pass
        finally:
            if sender is not None:
                self._lost(sender)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, []
        for s in [self._sock, *conns]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


class Links:
    """Partition ``me``'s connections to its peers' listeners (``addresses[j]`` is partition
    j's; its own entry is not used): :meth:`send` writes one array to one peer. ``tls``: a
    client-side ``ssl.SSLContext``, or None; ``timeout`` bounds a connection and each send."""

    def __init__(self, me: int, addresses: List[Optional[Tuple[str, int]]], timeout: float, tls=None):
        self.me = int(me)
        self._socks = {}
        try:
            for j, address in enumerate(addresses):
                if j == self.me:
                    continue
                sock = socket.create_connection(tuple(address), timeout=timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if tls is not None:
                    sock = tls.wrap_socket(sock)
                sock.settimeout(timeout)  # a send to a peer that stopped reading fails, not hangs
                sock.sendall(_HELLO.pack(self.me))
                self._socks[j] = sock
        except BaseException:
            self.close()
            raise

    def send(self, j: int, step: int, phase: str, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        if array.ndim != 2:
            raise ValueError(f"a partition's message is a 2-D array; got shape {array.shape}")
        sock = self._socks[j]
        sock.sendall(_FRAME.pack(step, phase.encode(), self.me, array.dtype.str.encode(), *array.shape))
        if array.nbytes:  # (an empty array's memoryview cannot be cast to bytes)
            sock.sendall(memoryview(array).cast("B"))

    def __enter__(self) -> "Links":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for sock in self._socks.values():
            try:
                sock.close()
            except OSError:
                pass
        self._socks = {}
