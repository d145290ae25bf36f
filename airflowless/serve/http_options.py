"""``HTTPOptions``: where the HTTP proxy listens and the limits it holds every client to.

The defaults keep one slow or greedy client from holding the proxy: a request
must send its headers within ``header_timeout_s`` and its whole body within
``body_timeout_s``; an idle keep-alive connection is closed after
``keep_alive_timeout_s``; a request whose deployment has not answered within
``request_timeout_s`` (60 s, kept within a second; ``None`` waits for ever)
gets a 504 and its call is cancelled on the replica, as it is when the client
goes away first;
beyond ``limit_concurrency`` requests being worked on at once the proxy
answers 503 (clients still sending their headers do not count, and
``/-/healthz`` and ``/-/routes`` are never refused); a body is at most ``max_body_bytes`` (413)
and the headers at most ``max_header_bytes`` (431, also while they are still
arriving, with either parser).

HTTPS: when the cluster runs on TLS the proxy serves HTTPS with the driver's
certificate and requires a client certificate from the cluster's CA. Or give
your own: ``ssl_certfile`` and ``ssl_keyfile`` (PEM) serve HTTPS with them,
and ``ssl_ca_certs`` then also requires client certificates signed by that CA
(without it, any client may connect, as to a public HTTPS site).

>>> HTTPOptions.from_dict({"port": 0, "limit_concurrency": 64}).limit_concurrency
64
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

__all__ = ["HTTPOptions"]


@dataclass(frozen=True, kw_only=True)
class HTTPOptions:
    """``serve.start(http_options={...})``: every key is optional (see the module docstring)."""

    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 1 << 20
    max_header_bytes: int = 16 << 10
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_timeout_s: float = 5.0
    request_timeout_s: float | None = 60.0
    limit_concurrency: int = 512
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_ca_certs: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise ConfigError(f"http_options['host'] must be a host name or address, got {self.host!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port < 65536:
            raise ConfigError(f"http_options['port'] must be an int in [0, 65535], got {self.port!r}")
        for name in ("max_body_bytes", "max_header_bytes", "limit_concurrency"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"http_options[{name!r}] must be an int >= 1, got {value!r}")
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_timeout_s", "request_timeout_s"):
            value = getattr(self, name)
            if value is None and name == "request_timeout_s":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                allowed = " (or None: no limit)" if name == "request_timeout_s" else ""
                raise ConfigError(f"http_options[{name!r}] must be a number of seconds > 0{allowed}, got {value!r}")
        for name in ("ssl_certfile", "ssl_keyfile", "ssl_ca_certs"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(f"http_options[{name!r}] must be the path of a PEM file, got {value!r}")
        if (self.ssl_keyfile or self.ssl_ca_certs) and not self.ssl_certfile:
            raise ConfigError("http_options 'ssl_keyfile' and 'ssl_ca_certs' need 'ssl_certfile' (the "
                              "proxy's certificate) too; add it, or drop them to follow the cluster's TLS")

    @classmethod
    def from_dict(cls, options: dict[str, Any] | None) -> HTTPOptions:
        """Options from ``serve.start``'s dict; unknown keys raise :class:`ConfigError` naming the known ones."""
        options = dict(options or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(options) - known
        if unknown:
            raise ConfigError(f"unknown http_options {sorted(unknown)}; expected some of {sorted(known)}")
        return cls(**options)
