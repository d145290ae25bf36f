"""Who may call the control plane: one bearer token per cluster, compared in constant time.

Reads are open while the server listens on loopback only; actions always need
the token, and everything needs it once the server listens beyond loopback.
A request without ``Authorization: Bearer <token>`` gets 401, one with another
token 403. The token is ``AIRFLOWLESS_TOKEN`` or, when unset, one generated when
the control plane is installed on a scheduler and kept in
``$AIRFLOWLESS_HOME/tokens/<host>-<dashboard port>`` (mode 0600): one file per
cluster, so clusters sharing a home never overwrite each other's token.

>>> from airflowless.control.context import ControlContext
>>> ctx = ControlContext(None, token="s3cret")
>>> check(ctx, None, action=False)            # a read on loopback: open
>>> check(ctx, "Bearer s3cret", action=True)  # an action with the token
>>> check(ctx, "Bearer guess", action=True)
Traceback (most recent call last):
...
airflowless.control.errors.Forbidden: the bearer token is not this cluster's token; ...
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
from pathlib import Path

from .context import ControlContext
from .errors import Forbidden, Unauthorized

__all__ = ["check", "generate_token", "is_loopback", "token_path", "write_token"]

_WHERE = ("the token is in $AIRFLOWLESS_HOME/tokens/<host>-<dashboard port>, or AIRFLOWLESS_TOKEN "
          "where the scheduler started")


def generate_token() -> str:
    """A new random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def token_path(home: Path, port: int) -> Path:
    """Where the token of the cluster whose dashboard listens on ``port`` of this machine is kept."""
    return Path(home) / "tokens" / f"{socket.gethostname()}-{port}"


def write_token(token: str, home: Path, port: int) -> Path:
    """Keep ``token`` in :func:`token_path`, readable by this user only; return the path."""
    path = token_path(home, port)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".token.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(token + "\n")
    os.replace(partial, path)
    return path


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address a server binds) is reachable from this machine only."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name or "" (every interface): not provably loopback


def named_here(host_header: str) -> bool:
    """Whether a request's ``Host`` names this machine's loopback (``localhost``, ``127.0.0.1:8787``,
    ``[::1]``) or its own host name: what a browser on this machine sends, not a rebound domain.

    >>> named_here("127.0.0.1:8787"), named_here("[::1]:80"), named_here("attacker.test:8787")
    (True, True, False)
    """
    name = host_header.strip()
    name = name[1:].split("]", 1)[0] if name.startswith("[") else name.rsplit(":", 1)[0] if name.count(":") == 1 else name
    return is_loopback(name) or name.lower() in {socket.gethostname().lower(), socket.getfqdn().lower()}


def check(ctx: ControlContext, authorization: str | None, *, action: bool, host: str | None = None,
          private: str | None = None) -> None:
    """Refuse a request that needs the token and lacks it (401) or has another one (403).

    Reads on a loopback-only server need no token, if their ``Host`` names this
    machine (:func:`named_here`): a page of another site whose name was rebound
    to 127.0.0.1 (DNS rebinding) sends its own name, and needs the token. A
    ``private`` read (what it reads, said in the refusal: "logs") needs the
    token always, as an action does: it shows what only the cluster's owner may
    read (files kept 0600), or costs the server a process.
    """
    if not action and private is None and ctx.loopback and (host is None or named_here(host)):
        return
    scheme, _, given = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        why = ("actions need" if action else f"reading {private} needs" if private is not None else
               f"the Host {str(host)[:100]!r} does not name this machine (open the pages at 127.0.0.1 or "
               "localhost), so this read needs" if ctx.loopback else
               "this server listens beyond loopback, so every request needs")
        raise Unauthorized(f"{why} the cluster's token: send 'Authorization: Bearer <token>' ({_WHERE})")
    if ctx.token is None:
        raise Forbidden("this server was started without a token, so it takes no actions; "
                        "set AIRFLOWLESS_TOKEN where it starts")
    if not hmac.compare_digest(given.strip().encode(), ctx.token.encode()):
        raise Forbidden(f"the bearer token is not this cluster's token; {_WHERE}")
