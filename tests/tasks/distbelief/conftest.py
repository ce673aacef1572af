import importlib.util
import sys
from pathlib import Path

import pytest

MULTIHOST = Path(__file__).resolve().parents[2] / "multihost" / "netns_cluster.py"


@pytest.fixture(scope="session")
def tls_security(tmp_path_factory):
    """A Dask ``Security`` requiring TLS, with a fresh CA and one certificate for 127.0.0.1
    (the multi-host tests' certificate maker, loaded by path: that folder is no package)."""
    from distributed import Security

    module = sys.modules.get("netns_cluster")  # (as the multi-host tests import it)
    if module is None:
        spec = importlib.util.spec_from_file_location("netns_cluster", MULTIHOST)
        module = sys.modules["netns_cluster"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    files = module.make_tls(tmp_path_factory.mktemp("tls"), {"local": "127.0.0.1"}, "127.0.0.1")["local"]
    ca, cert, key = (str(files[name]) for name in ("ca", "cert", "key"))
    return Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key, tls_scheduler_cert=cert,
                    tls_scheduler_key=key, tls_worker_cert=cert, tls_worker_key=key, require_encryption=True)
