"""Knock on a TLS port as four kinds of client and say what the port did.

- ``plaintext``: TCP, sends the port's greeting (or an HTTP request) in the clear;
- ``no-cert``: TLS, trusts anything, shows no certificate;
- ``wrong-cert``: TLS, trusts anything, shows a certificate from another CA;
- ``right-cert``: TLS, shows the cluster's client certificate (the control:
  the same probe must see the port answer or wait, not close).

:func:`probe` sends the port's greeting after the handshake (an HTTP request,
the serve data plane's hello; Dask comms speak first) and returns
``"refused"`` when the server ended the connection (a TLS alert, a reset, end
of file) without a byte of application data, ``"open"`` when it answered, and
``"silent"`` when it did neither in time. A port that refuses every client
(or is not there) fails the ``right-cert`` control instead of passing quietly.

>>> import ssl
>>> isinstance(client_context(None), ssl.SSLContext)
True
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

__all__ = ["client_context", "probe", "KINDS", "GREETINGS"]

KINDS = ("plaintext", "no-cert", "wrong-cert", "right-cert")
_REQUEST = b"GET / HTTP/1.1\r\nHost: probe\r\n\r\n"
GREETINGS = {"http": _REQUEST, "wire": b"AFLWIRE1" + bytes(16), "dask": b""}
"""What a client says first, by protocol (a Dask listener speaks first)."""


def client_context(cert_dir: Path | None, role: str = "client") -> ssl.SSLContext:
    """A TLS client context that trusts any server, showing ``role``'s certificate from ``cert_dir`` (or none)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if cert_dir is not None:
        context.load_cert_chain(cert_dir / f"{role}.pem", cert_dir / f"{role}-key.pem")
    return context


def probe(host: str, port: int, context: ssl.SSLContext | None, *, protocol: str, wait_s: float = 10.0) -> str:
    """``"refused"``, ``"open"`` or ``"silent"`` (see the module docstring); ``protocol`` is a key of GREETINGS."""
    greeting = GREETINGS[protocol]
    try:
        raw = socket.create_connection((host, port), timeout=5)
    except OSError:
        return "refused"
    with raw:
        try:
            if context is None:
                raw.sendall(greeting or _REQUEST)
                conn: socket.socket = raw
            else:
                conn = context.wrap_socket(raw, server_hostname=None)
                if greeting:
                    conn.sendall(greeting)
            conn.settimeout(wait_s)
            data = conn.recv(1)
        except TimeoutError:
            return "silent"
        except (ssl.SSLError, ConnectionError, OSError):
            return "refused"
        if not data or (context is None and data[:1] == b"\x15"):  # end of file, or a TLS alert in the clear
            return "refused"
        return "open"
