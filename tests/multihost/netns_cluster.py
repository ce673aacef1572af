"""A multi-host Dask cluster on one Linux machine: network namespaces, a bridge, no shared files.

Each "host" (the scheduler, every worker) is

* a **network namespace** ``duhl-<tag>-<node>`` whose only interface besides ``lo`` is
  ``eth0``, one end of a veth pair; the other end is enslaved to a bridge ``dh<tag>br`` in the
  root namespace. The bridge carries the first address of a private /24 (``10.213.X.0/24``,
  X chosen so it overlaps no address or route of this machine), so the driver, which stays in
  the root namespace (the pytest process), reaches every node, and the nodes reach each other
  at layer 2. The namespaces have no default route: nothing leaves the test's subnet.
* a **mount namespace** (``unshare --mount --propagation private``) in which the node's own
  directory ``<base>/<node>`` is bind-mounted over ``/tmp`` and a fresh tmpfs over ``/dev/shm``:
  the node sees its own ``/tmp`` (cwd ``/tmp/work``, Dask ``--local-directory /tmp/dask``,
  certificates in ``/tmp/tls``, staged files in ``/tmp/data``) and *nothing* the driver keeps
  under ``/tmp`` -- a driver path there is ENOENT on a node, the error a real second host gives.
  Paths outside ``/tmp`` that must be hidden (``hide=``: e.g. a data cache under the project)
  get an empty read-only tmpfs over them; ``base`` itself is always hidden.
* a **UTS namespace** with hostname ``duhl-<node>`` (``socket.gethostname()`` differs per host).

The processes are the real CLIs (``dask scheduler`` / ``dask worker``) of a virtualenv
(``dask_bin``; default the one running this code, so workers import the project code the way
an installed copy on each host would), started with ``ip netns exec`` in their own session
(process group), with a minimal environment (no variable of the driver leaks in).

Use::

    with NetnsCluster(tmp_path, n_workers=2, protocol="tls", hide=[cache_dir]) as c:
        client = Client(c.scheduler_address, security=c.client_security())
        c.kill_worker("w1")          # SIGKILL the worker's process group (nanny + worker)
        c.kill_scheduler()

Teardown (``close()``, run by ``__exit__`` whatever happened) SIGKILLs every process group, then
every process still in a namespace (``ip netns pids``), deletes the namespaces (which destroys
their veth ends) and the bridge, and checks that nothing is left. A state file per cluster in
``/run/duhl-netns`` lets ``cleanup_stale()`` (called on every start) remove what a killed
driver left behind.

``skip_reason()`` returns why this cannot run here (not root, no ``ip netns``, ...) or None.
``python tests/multihost/netns_cluster.py cleanup`` removes every leftover of this module.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import functools
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence

PREFIX = "duhl"
STATE_DIR = Path("/run/duhl-netns")
DEFAULT_DASK_BIN = Path(os.environ.get("DUHL_NETNS_DASK_BIN", Path(sys.executable).parent))
# the /24s are carved from this; only ranges not already on this machine are used
SUBNET_BASE = ipaddress.ip_network(os.environ.get("DUHL_NETNS_SUBNET_BASE", "10.213.0.0/16"))
SCHEDULER_PORT = 8786  # a namespace has its own port space: no clash with the machine's 8786

# Runs inside `ip netns exec NS unshare --mount --uts --propagation private -- sh -c SCRIPT`:
# argv: node_dir hostname hide... -- command...
_NODE_SH = r"""set -e
node_dir=$1; host=$2; shift 2
mount --rbind "$node_dir" /tmp
mount -t tmpfs -o mode=1777 duhl-shm /dev/shm
while [ "$1" != "--" ]; do
  case "$1" in
    /tmp|/tmp/*) ;;  # already gone: /tmp is this node's own directory now
    *) if [ -e "$1" ]; then mount -t tmpfs -o ro,mode=0555,size=4k duhl-hidden "$1"; fi ;;
  esac
  shift
done
shift
hostname "$host"
cd /tmp/work
exec "$@"
"""


def _run(*args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=timeout)


@functools.lru_cache(maxsize=None)
def skip_reason() -> Optional[str]:
    """Why a NetnsCluster cannot run here, or None. Probes in a throw-away namespace only."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "needs root: creates network namespaces, veth pairs and a bridge (run pytest as root)"
    for tool in ("ip", "unshare", "mount", "hostname"):
        if shutil.which(tool) is None:
            return f"'{tool}' not found (apt-get install iproute2 util-linux)"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    try:
        r = _run("ip", "netns", "add", probe, check=False)
        if r.returncode:
            return f"'ip netns add' failed: {r.stderr.strip()}"
        steps = [("ip", "-n", probe, "link", "add", "pbr", "type", "bridge"),
                 ("ip", "-n", probe, "link", "add", "pa", "type", "veth", "peer", "name", "pb"),
                 ("ip", "netns", "exec", probe, "unshare", "--mount", "--uts", "--propagation",
                  "private", "--", "sh", "-c", "mount -t tmpfs t /tmp && hostname probe")]
        for step in steps:
            r = _run(*step, check=False)
            if r.returncode:
                return f"'{' '.join(step)}' failed: {r.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


# ---------------------------------------------------------------- state / stale clean-up

def _proc_start_time(pid: int) -> Optional[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _kill_netns_pids(ns: str, deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while True:
        r = _run("ip", "netns", "pids", ns, check=False)
        pids = [int(p) for p in r.stdout.split()] if r.returncode == 0 else []
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > end:
            raise RuntimeError(f"processes {pids} in namespace {ns} survive SIGKILL")
        time.sleep(0.05)


def _teardown_names(namespaces: Iterable[str], links: Iterable[str]) -> List[str]:
    """Kill what runs in the namespaces, delete them and the links; return the errors."""
    errors = []
    existing = set(list_namespaces())
    for ns in namespaces:
        if ns not in existing:
            continue
        try:
            _kill_netns_pids(ns)
        except RuntimeError as e:
            errors.append(str(e))
        r = _run("ip", "netns", "del", ns, check=False)
        if r.returncode:
            errors.append(f"ip netns del {ns}: {r.stderr.strip()}")
    for link in links:
        if Path(f"/sys/class/net/{link}").exists():
            r = _run("ip", "link", "del", link, check=False)
            if r.returncode:
                errors.append(f"ip link del {link}: {r.stderr.strip()}")
    return errors


def list_namespaces(prefix: str = PREFIX + "-") -> List[str]:
    r = _run("ip", "netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.startswith(prefix)]


def cleanup_stale(everything: bool = False) -> List[str]:
    """Tear down clusters whose owner process is gone (all of them with ``everything``)."""
    cleaned = []
    if not STATE_DIR.exists():
        return cleaned
    with _locked():
        for f in sorted(STATE_DIR.glob("*.json")):
            try:
                st = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            alive = _proc_start_time(st["owner_pid"]) == st.get("owner_start")
            if alive and not everything:
                continue
            _teardown_names(st["namespaces"], st["links"])
            f.unlink(missing_ok=True)
            cleaned.append(st["tag"])
    return cleaned


# ---------------------------------------------------------------- addresses

def _used_ipv4_networks() -> List[ipaddress.IPv4Network]:
    nets = []
    addrs = json.loads(_run("ip", "-j", "-4", "addr").stdout or "[]")
    for link in addrs:
        for a in link.get("addr_info", []):
            nets.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
    routes = json.loads(_run("ip", "-j", "-4", "route", "show", "table", "all").stdout or "[]")
    for r in routes:
        dst = r.get("dst", "default")
        if dst == "default" or r.get("type") in ("broadcast", "local"):
            continue  # the default route covers everything; skip it (namespaces won't use it)
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.ip_network(dst if "/" in dst else dst + "/32", strict=False))
    return nets


def _pick_subnet(start: int) -> ipaddress.IPv4Network:
    used = _used_ipv4_networks()
    subnets = list(SUBNET_BASE.subnets(new_prefix=24))
    for i in range(len(subnets)):
        net = subnets[(start + i) % len(subnets)]
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError(f"no free /24 in {SUBNET_BASE}")


# ---------------------------------------------------------------- TLS

def make_tls(out: Path, nodes: Dict[str, str], driver_ip: str, days: int = 1) -> Dict[str, Dict[str, Path]]:
    """A CA and one certificate per node (SAN: its IP and hostname) plus one for the driver.

    Returns {name: {"ca": ..., "cert": ..., "key": ...}} with name in nodes or "driver";
    the CA key stays in ``out/ca`` (never in a node's directory)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    def key():
        return ec.generate_private_key(ec.SECP256R1())

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "duhl-lab test"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = key()
    ca_cert = (x509.CertificateBuilder().subject_name(name("duhl-lab test CA")).issuer_name(name("duhl-lab test CA"))
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .sign(ca_key, hashes.SHA256()))
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    (out / "ca").mkdir(parents=True, exist_ok=True)
    (out / "ca" / "ca.pem").write_bytes(ca_pem)
    _write_private(out / "ca" / "ca-key.pem", ca_key)

    result = {}
    for who, ip in list(nodes.items()) + [("driver", driver_ip)]:
        k = key()
        host = f"{PREFIX}-{who}"
        cert = (x509.CertificateBuilder().subject_name(name(host)).issuer_name(ca_cert.subject)
                .public_key(k.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=True,
                                             encipher_only=False, decipher_only=False), critical=True)
                # a worker is a TLS server (to the scheduler, peers) and a client (of them)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(host),
                                                            x509.IPAddress(ipaddress.ip_address(ip))]),
                               critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        d = out / who / "tls" if who != "driver" else out / "driver-tls"
        d.mkdir(parents=True, exist_ok=True)
        (d / "ca.pem").write_bytes(ca_pem)
        (d / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_private(d / "key.pem", k)
        result[who] = {"ca": d / "ca.pem", "cert": d / "cert.pem", "key": d / "key.pem"}
    return result


def _write_private(path: Path, k) -> None:
    from cryptography.hazmat.primitives import serialization

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()))


# ---------------------------------------------------------------- the cluster

@dataclass
class Node:
    name: str  # "sched", "w1", ...
    ns: str  # network namespace
    veth: str  # root-namespace end of its veth pair
    ip: str
    dir: Path  # the driver's view of this node's /tmp
    log: Path
    proc: Optional[subprocess.Popen] = None
    killed: bool = False

    def host_path(self, node_path: str) -> Path:
        """The driver's path of a file this node sees at ``node_path`` (under /tmp)."""
        p = Path(node_path)
        if p.parts[:2] != ("/", "tmp"):
            raise ValueError(f"{node_path} is not under the node's /tmp")
        return self.dir.joinpath(*p.parts[2:])


@dataclass
class NetnsCluster:
    base: Path  # the driver's working folder for this cluster (logs, node dirs, CA); hidden from nodes
    n_workers: int = 2
    protocol: str = "tcp"  # or "tls"
    dask_bin: Path = DEFAULT_DASK_BIN
    hide: Sequence[os.PathLike] = ()  # driver paths outside /tmp that nodes must not see
    env: Dict[str, str] = field(default_factory=dict)  # extra environment (e.g. DASK_* settings)
    scheduler_env: Dict[str, str] = field(default_factory=dict)
    worker_env: Dict[str, str] = field(default_factory=dict)
    worker_args: Sequence[str] = ()  # extra `dask worker` options (e.g. "--death-timeout", "10")
    scheduler_port: int = SCHEDULER_PORT
    start_timeout_s: float = 60.0

    nodes: Dict[str, Node] = field(default_factory=dict, init=False)
    tag: str = field(default="", init=False)
    bridge: str = field(default="", init=False)
    driver_ip: str = field(default="", init=False)
    tls_files: Dict[str, Dict[str, Path]] = field(default_factory=dict, init=False)
    timings: Dict[str, float] = field(default_factory=dict, init=False)
    _state: Optional[Path] = field(default=None, init=False)

    # ------------------------------------------------------------ life cycle
    def __enter__(self) -> "NetnsCluster":
        try:
            self.start()
        except BaseException:
            self.close(raise_errors=False)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(raise_errors=exc_type is None)

    def start(self) -> "NetnsCluster":
        if self.protocol not in ("tcp", "tls"):
            raise ValueError(f"protocol must be 'tcp' or 'tls', got {self.protocol!r}")
        reason = skip_reason()
        if reason:
            raise RuntimeError(reason)
        if not (self.dask_bin / "dask").exists():
            raise FileNotFoundError(f"no 'dask' in {self.dask_bin}")
        t0 = time.perf_counter()
        cleanup_stale()
        self.base = Path(self.base).resolve()
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "logs").mkdir(exist_ok=True)
        self._build_network()
        self.timings["network_s"] = time.perf_counter() - t0
        self._check_reachability()
        self.timings["reachability_s"] = time.perf_counter() - t0 - self.timings["network_s"]
        if self.protocol == "tls":
            self.tls_files = make_tls(self.base, {n: node.ip for n, node in self.nodes.items()}, self.driver_ip)
        t1 = time.perf_counter()
        self._start_scheduler()
        self._wait_log(self.nodes["sched"], "Scheduler at:")
        self.timings["scheduler_s"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        for name in self.worker_names:
            self._start_worker(name)
        for name in self.worker_names:
            self._wait_log(self.nodes[name], "Registered to:")
        self.timings["workers_s"] = time.perf_counter() - t2
        self.timings["start_s"] = time.perf_counter() - t0
        return self

    def close(self, raise_errors: bool = True) -> None:
        """Stop everything; idempotent. Raises (if asked) when something could not be removed."""
        t0 = time.perf_counter()
        for node in self.nodes.values():
            self._killpg(node)
        errors = _teardown_names([n.ns for n in self.nodes.values()], [self.bridge] if self.bridge else [])
        left_ns = [n.ns for n in self.nodes.values() if n.ns in list_namespaces()]
        left_link = self.bridge and Path(f"/sys/class/net/{self.bridge}").exists()
        if left_ns or left_link:
            errors.append(f"left over: namespaces {left_ns}, bridge {self.bridge if left_link else None}")
        if self._state is not None and not errors:
            self._state.unlink(missing_ok=True)
        self.timings["close_s"] = time.perf_counter() - t0
        if errors and raise_errors:
            raise RuntimeError("NetnsCluster teardown: " + "; ".join(errors))

    # ------------------------------------------------------------ what a test uses
    @property
    def worker_names(self) -> List[str]:
        return [f"w{i}" for i in range(1, self.n_workers + 1)]

    @property
    def scheduler_address(self) -> str:
        return f"{self.protocol}://{self.nodes['sched'].ip}:{self.scheduler_port}"

    def client_security(self, require_encryption: bool = True):
        """distributed.security.Security for the driver (None for tcp)."""
        if self.protocol != "tls":
            return None
        from distributed.security import Security

        f = self.tls_files["driver"]
        return Security(tls_ca_file=str(f["ca"]), tls_client_cert=str(f["cert"]),
                        tls_client_key=str(f["key"]), require_encryption=require_encryption)

    def kill_worker(self, name: str, sig: int = signal.SIGKILL) -> float:
        """Signal the worker's whole process group (nanny and worker); returns time.monotonic()."""
        return self._killpg(self.nodes[name], sig)

    def kill_scheduler(self, sig: int = signal.SIGKILL) -> float:
        return self._killpg(self.nodes["sched"], sig)

    def partition(self, name: str, up: bool = False) -> float:
        """Cut a node off the network (its eth0 down; no FIN/RST is sent) or reconnect it."""
        _run("ip", "-n", self.nodes[name].ns, "link", "set", "eth0", "up" if up else "down")
        return time.monotonic()

    def exec_in(self, name: str, *argv: str, **kw) -> subprocess.CompletedProcess:
        """Run a command in a node's network namespace (not its mount namespace)."""
        return _run("ip", "netns", "exec", self.nodes[name].ns, *argv, **kw)

    def pids(self) -> Dict[str, List[int]]:
        out = {}
        for n in self.nodes.values():
            r = _run("ip", "netns", "pids", n.ns, check=False)
            out[n.name] = [int(p) for p in r.stdout.split()]
        return out

    def log_tail(self, name: str, n: int = 30) -> str:
        try:
            return "\n".join(self.nodes[name].log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # ------------------------------------------------------------ internals
    def _build_network(self) -> None:
        with _locked():
            self.tag = f"{os.getpid() & 0xffff:04x}{secrets.token_hex(1)}"
            net = _pick_subnet(int(self.tag, 16) % 256)
            hosts = list(net.hosts())
            self.bridge = f"dh{self.tag}br"
            self.driver_ip = str(hosts[0])
            names = ["sched"] + self.worker_names
            for i, name in enumerate(names):
                d = self.base / name
                for sub in ("work", "dask", "data"):
                    (d / sub).mkdir(parents=True, exist_ok=True)
                self.nodes[name] = Node(name=name, ns=f"{PREFIX}-{self.tag}-{name}",
                                        veth=f"dh{self.tag}{name[0]}{name[1:] if name != 'sched' else ''}",
                                        ip=str(hosts[9 + i]), dir=d, log=self.base / "logs" / f"{name}.log")
            # state first: a crash from here on leaves something cleanup_stale() can find
            self._state = STATE_DIR / f"{self.tag}.json"
            self._state.write_text(json.dumps({
                "tag": self.tag, "owner_pid": os.getpid(), "owner_start": _proc_start_time(os.getpid()),
                "namespaces": [n.ns for n in self.nodes.values()], "links": [self.bridge],
                "subnet": str(net), "base": str(self.base)}))
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.driver_ip}/{net.prefixlen}", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
        for node in self.nodes.values():
            _run("ip", "netns", "add", node.ns)
            _run("ip", "link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.ns)
            _run("ip", "link", "set", node.veth, "master", self.bridge, "up")
            _run("ip", "-n", node.ns, "addr", "add", f"{node.ip}/{net.prefixlen}", "dev", "eth0")
            _run("ip", "-n", node.ns, "link", "set", "eth0", "up")
            _run("ip", "-n", node.ns, "link", "set", "lo", "up")

    def _check_reachability(self) -> None:
        """driver -> each node and node -> node, with a TCP connect to a throw-away listener."""
        py = str(self.dask_bin / "python")
        port = 9
        srv = ("import socket,sys;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
               "s.bind((sys.argv[1],int(sys.argv[2])));s.listen(16);s.settimeout(10)\n"
               "for _ in range(int(sys.argv[3])): s.accept()[0].close()")
        cli = ("import socket,sys\nfor ip in sys.argv[2:]:\n"
               " socket.create_connection((ip,int(sys.argv[1])),timeout=5).close()")
        names = list(self.nodes)
        target = self.nodes[names[0]]  # every other node and the driver connect to the first
        peers = [self.nodes[n] for n in names[1:]]
        server = subprocess.Popen(["ip", "netns", "exec", target.ns, py, "-c", srv, target.ip, str(port),
                                   str(len(peers) + 1)], stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 10
            while True:  # the driver (root namespace) first: also waits until the listener is up
                try:
                    socket.create_connection((target.ip, port), timeout=1).close()
                    break
                except OSError as e:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise RuntimeError(f"driver cannot reach {target.ip} over bridge {self.bridge}: {e} "
                                           "(firewall on bridged traffic? see net.bridge.bridge-nf-call-iptables)")
                    time.sleep(0.05)
            for p in peers:
                r = self.exec_in(p.name, py, "-c", cli, str(port), target.ip, check=False)
                if r.returncode:
                    raise RuntimeError(f"{p.name} ({p.ip}) cannot reach {target.ip}: {r.stderr.strip()[-300:]}")
            server.wait(timeout=10)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()

    def _env(self, extra: Dict[str, str]) -> Dict[str, str]:
        env = {"PATH": f"{self.dask_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1",  # never write __pycache__ into the (shared) source tree
               "PYTHONUNBUFFERED": "1"}
        env.update(self.env)
        env.update(extra)
        return env

    def _tls_args(self) -> List[str]:
        if self.protocol != "tls":
            return []
        return ["--protocol", "tls", "--tls-ca-file", "/tmp/tls/ca.pem",
                "--tls-cert", "/tmp/tls/cert.pem", "--tls-key", "/tmp/tls/key.pem"]

    def _spawn(self, node: Node, argv: List[str], env: Dict[str, str]) -> None:
        hide = [str(Path(h).resolve()) for h in self.hide] + [str(self.base)]
        cmd = ["ip", "netns", "exec", node.ns,
               "unshare", "--mount", "--uts", "--propagation", "private", "--",
               "/bin/sh", "-c", _NODE_SH, "duhl-node", str(node.dir), f"{PREFIX}-{node.name}",
               *hide, "--", *argv]
        with open(node.log, "ab") as log:
            node.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True, close_fds=True)

    def _start_scheduler(self) -> None:
        node = self.nodes["sched"]
        argv = [str(self.dask_bin / "dask"), "scheduler", "--host", node.ip, "--port", str(self.scheduler_port),
                # --no-dashboard alone still binds an HTTP server to 0.0.0.0:8787: pin it
                "--no-dashboard", "--dashboard-address", f"{node.ip}:0", *self._tls_args()]
        self._spawn(node, argv, self._env(self.scheduler_env))

    def _start_worker(self, name: str) -> None:
        node = self.nodes[name]
        argv = [str(self.dask_bin / "dask"), "worker", self.scheduler_address, "--name", name,
                "--nworkers", "1", "--nthreads", "1", "--no-dashboard", "--dashboard-address", f"{node.ip}:0",
                "--local-directory", "/tmp/dask", "--host", node.ip, *self._tls_args(), *self.worker_args]
        self._spawn(node, argv, self._env(self.worker_env))

    def _wait_log(self, node: Node, marker: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            text = node.log.read_text(errors="replace") if node.log.exists() else ""
            if marker in text:
                return
            if node.proc is not None and node.proc.poll() is not None:
                raise RuntimeError(f"{node.name} exited with {node.proc.returncode} before '{marker}':\n"
                                   + self.log_tail(node.name))
            if time.monotonic() > deadline:
                raise TimeoutError(f"{node.name}: no '{marker}' within {self.start_timeout_s}s:\n"
                                   + self.log_tail(node.name))
            time.sleep(0.05)

    def _killpg(self, node: Node, sig: int = signal.SIGKILL) -> float:
        t = time.monotonic()
        p = node.proc
        if p is None:
            return t
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, sig)  # start_new_session: pgid == pid of `ip netns exec`/dask
        if sig == signal.SIGKILL:
            p.wait(timeout=10)
            node.killed = True
        return t


# ---------------------------------------------------------------- command line

if __name__ == "__main__":
    if sys.argv[1:] != ["cleanup"]:
        sys.exit("usage: python netns_cluster.py cleanup")
    print("cleaned:", cleanup_stale(everything=True) or "nothing")
