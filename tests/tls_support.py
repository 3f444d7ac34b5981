"""A serving certificate from a throwaway CA, loaded as every gpupair server loads its own
(gpupair.command.tls.ReloadingTLS), and a client context that trusts that CA."""

from __future__ import annotations

import ssl
from pathlib import Path

import trustme

from gpupair.command.tls import ReloadingTLS


def serving_tls(directory: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(the server's context, a client's) for the DNS name ``name``; files in ``directory``."""
    ca = trustme.CA()
    leaf = ca.issue_cert(name)
    cert, key = directory / "tls.crt", directory / "tls.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return ReloadingTLS(str(cert), str(key)).context, client
