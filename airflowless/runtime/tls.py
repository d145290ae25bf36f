"""TLS for a whole cluster: certificates, a ``distributed.security.Security``, and SSL contexts.

One CA signs a certificate and key per role — ``scheduler``, ``worker`` and
``client`` (the driver) — kept as PEM files in one folder::

    ca.pem  ca-key.pem  scheduler.pem  scheduler-key.pem  worker.pem  worker-key.pem
    client.pem  client-key.pem

:func:`generate` makes such a folder for a test or dev setup (with the
``cryptography`` package Dask already brings); :func:`load` reads one made by
your own CA (the same file names; a folder given to a driver needs only
``ca.pem``, ``client.pem`` and ``client-key.pem``). :class:`TLSFiles` turns
the files into the ``Security`` every Dask process uses, so every plane speaks
TLS with the same certificates: Dask's comms (``tls://``), the dashboard and
control plane (HTTPS), the serve data plane and the serve HTTP ingress. Every
port requires a certificate signed by the cluster's CA (mutual TLS):
a plaintext client or one with a certificate from another CA is refused.

>>> import tempfile
>>> files = generate(tempfile.mkdtemp(), hosts=["10.0.0.5"])
>>> sorted(p.name for p in files.directory.glob("*.pem"))[:3]
['ca-key.pem', 'ca.pem', 'client-key.pem']
>>> files.security().require_encryption
True

This module is also a Dask preload (``--preload airflowless.runtime.tls``):
it makes the process's HTTP server (the dashboard) require a client
certificate too, which Dask's own dashboard TLS settings do not.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import socket
import ssl
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from distributed.security import Security

__all__ = ["ROLES", "TLSFiles", "generate", "load", "from_security", "from_settings", "resolve", "dashboard_config",
           "dask_config", "dask_environ", "client_context", "server_context", "https_context", "with_client_role",
           "dask_setup"]

ROLES = ("scheduler", "worker", "client")


@dataclass(frozen=True)
class TLSFiles:
    """The PEM files of one cluster: ``ca.pem`` and ``<role>.pem`` / ``<role>-key.pem`` in ``directory``.

    ``temporary``: the folder was made for this process (generated, or
    written out from a ``Security``) and goes when the cluster does.
    """

    directory: Path
    temporary: bool = False

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    def cert(self, role: str) -> Path:
        return self.directory / f"{role}.pem"

    def key(self, role: str) -> Path:
        return self.directory / f"{role}-key.pem"

    def roles(self) -> list[str]:
        """The roles whose certificate and key are both here."""
        return [r for r in ROLES if self.cert(r).is_file() and self.key(r).is_file()]

    def security(self) -> Security:
        """A ``Security`` with every role found here, encryption required.

        A role without files (a driver's folder has only ``client``) borrows
        another role's certificate, so a worker's own client and a driver
        that starts serve replicas both present one signed by the CA.
        """
        from distributed.security import Security

        present = self.roles()
        if not present:
            raise ConfigError(f"expected a certificate and key per role in {self.directory} (e.g. client.pem and "
                              "client-key.pem), found none; make them with `airflowless cluster up --tls` or "
                              "airflowless.runtime.tls.generate()")
        kwargs: dict[str, Any] = {"tls_ca_file": str(self.ca), "require_encryption": True}
        for role in ROLES:
            source = role if role in present else present[0]
            kwargs[f"tls_{role}_cert"] = str(self.cert(source))
            kwargs[f"tls_{role}_key"] = str(self.key(source))
        return Security(**kwargs)


def generate(directory: str | Path, *, hosts: Iterable[str] = (), days: int = 365) -> TLSFiles:
    """Make a CA and a certificate per role in ``directory`` (created 0700; keys 0600); return them.

    Each certificate names ``localhost``, 127.0.0.1, ::1, this machine's host
    names and addresses, and ``hosts`` (names or IP addresses of the other
    machines), so HTTPS clients that check names accept it too. For tests and
    dev setups: a production cluster uses certificates from its own CA
    (:func:`load`).
    """
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:
        raise ConfigError(f"generating certificates needs the cryptography package ({exc}); install "
                          "airflowless[tls], or use certificates you made: load(DIR)") from exc
    if days < 1:
        raise ConfigError(f"expected days >= 1 for the certificates' validity, got {days}")
    folder = Path(directory).expanduser()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=days)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "airflowless"),
                          x509.NameAttribute(NameOID.COMMON_NAME, common)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name(f"airflowless cluster CA {os.urandom(4).hex()}")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write(folder / "ca.pem", ca_cert.public_bytes(serialization.Encoding.PEM), private=False)
    _write(folder / "ca-key.pem", _key_pem(ca_key), private=True)
    names = _subject_alt_names(hosts)
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder().subject_name(name(f"airflowless {role}")).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_agreement=True, key_cert_sign=False,
                                         crl_sign=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        _write(folder / f"{role}.pem", cert.public_bytes(serialization.Encoding.PEM), private=False)
        _write(folder / f"{role}-key.pem", _key_pem(key), private=True)
    return TLSFiles(folder)


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,  # type: ignore[no-any-return]
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, *, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _subject_alt_names(hosts: Iterable[str]) -> list[Any]:
    from cryptography import x509

    dns: list[str] = ["localhost"]
    ips: list[str] = ["127.0.0.1", "::1"]
    for name in {socket.gethostname(), socket.getfqdn()}:
        if name and name not in dns:
            dns.append(name)
        with contextlib.suppress(OSError):
            ips.extend(str(info[4][0]) for info in socket.getaddrinfo(name, None))
    for host in hosts:
        host = str(host).strip().strip("[]")
        if not host:
            continue
        try:
            ipaddress.ip_address(host)
            ips.append(host)
        except ValueError:
            dns.append(host)
    unique_ips = list(dict.fromkeys(str(ipaddress.ip_address(ip.split("%")[0])) for ip in ips))
    return ([x509.DNSName(d) for d in dict.fromkeys(dns)]
            + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in unique_ips])


def load(directory: str | Path) -> TLSFiles:
    """The certificates in ``directory`` (see the module docstring); :class:`ConfigError` if it lacks them."""
    files = TLSFiles(Path(directory).expanduser())
    if not files.ca.is_file():
        raise ConfigError(f"expected the cluster's CA certificate at {files.ca}, found no file; make a folder "
                          "with `airflowless cluster up --tls` or airflowless.runtime.tls.generate(), or point "
                          "AIRFLOWLESS_TLS_DIR at one")
    files.security()  # raises when no role has both files
    return files


def from_security(security: Security, directory: str | Path | None = None) -> TLSFiles:
    """``security``'s certificates as files (the dashboard and uvicorn read files); in-memory PEM is written out.

    Paths are linked, PEM text (``Security.temporary()``) is written into
    ``directory`` (default a new private temporary folder).
    """
    ca = getattr(security, "tls_ca_file", None)
    if not ca:
        raise ConfigError("expected a Security with TLS certificates (tls_ca_file and a certificate per role), "
                          "got one without; pass Security(tls_ca_file=..., tls_client_cert=..., ...) or security=True")
    folder = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="airflowless-tls-"))
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    _place(ca, folder / "ca.pem", private=False)
    for role in ROLES:
        cert, key = getattr(security, f"tls_{role}_cert"), getattr(security, f"tls_{role}_key")
        if cert:
            _place(cert, folder / f"{role}.pem", private=False)
            _place(key or cert, folder / f"{role}-key.pem", private=True)
    return TLSFiles(load(folder).directory, temporary=directory is None)


def _place(source: str, target: Path, *, private: bool) -> None:
    if "\n" in source:
        _write(target, source.encode(), private=private)
        return
    path = Path(source).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"expected a PEM file at {source}, found none; fix the path in your Security")
    if target.exists() or target.is_symlink():
        target.unlink()
    target.symlink_to(path)


def resolve(security: Any, *, directory: str | Path | None = None) -> TLSFiles | None:
    """What ``init(security=...)`` was given, as files (None: no TLS).

    ``None``/``False`` no TLS; ``True`` certificates generated for this
    cluster into ``directory`` (default a new private temporary folder); a
    path, a folder of certificates; a :class:`TLSFiles`; a ``Security``.
    """
    if security is None or security is False:
        return None
    if security is True:
        folder = directory if directory is not None else tempfile.mkdtemp(prefix="airflowless-tls-")
        return TLSFiles(generate(folder).directory, temporary=directory is None)
    if isinstance(security, TLSFiles):
        return security
    if isinstance(security, str | os.PathLike):
        return load(os.fspath(security))
    from distributed.security import Security

    if isinstance(security, Security):
        return from_security(security, directory)
    raise ConfigError(f"security must be True (generate certificates), a folder of certificates, a TLSFiles or a "
                      f"distributed.security.Security, got {type(security).__name__}; see airflowless.runtime.tls")


def from_settings(settings: Any) -> TLSFiles | None:
    """The driver's certificates from ``AIRFLOWLESS_TLS_DIR`` / ``_CA`` / ``_CERT`` / ``_KEY`` (None if unset)."""
    if not (settings.tls_dir or settings.tls_ca or settings.tls_cert or settings.tls_key):
        return None
    folder = TLSFiles(Path(settings.tls_dir).expanduser()) if settings.tls_dir else None
    if folder is not None and not (settings.tls_ca or settings.tls_cert or settings.tls_key):
        return load(folder.directory)
    chosen = {
        "AIRFLOWLESS_TLS_CA": settings.tls_ca or (folder and str(folder.ca)),
        "AIRFLOWLESS_TLS_CERT": settings.tls_cert or (folder and str(folder.cert("client"))),
        "AIRFLOWLESS_TLS_KEY": settings.tls_key or (folder and str(folder.key("client"))),
    }
    missing = [name for name, value in chosen.items() if not value]
    if missing:
        raise ConfigError(f"expected AIRFLOWLESS_TLS_CA, _CERT and _KEY together (or AIRFLOWLESS_TLS_DIR), "
                          f"got no {', '.join(missing)}; set it, or unset the others to connect without TLS")
    from distributed.security import Security

    return from_security(Security(tls_ca_file=chosen["AIRFLOWLESS_TLS_CA"], require_encryption=True,
                                  tls_client_cert=chosen["AIRFLOWLESS_TLS_CERT"],
                                  tls_client_key=chosen["AIRFLOWLESS_TLS_KEY"]))


def dashboard_config(files: TLSFiles, role: str) -> dict[str, str]:
    """Dask config serving a process's dashboard over HTTPS with ``role``'s certificate."""
    role = role if role in files.roles() else files.roles()[0]
    return {"distributed.scheduler.dashboard.tls.ca-file": str(files.ca),
            "distributed.scheduler.dashboard.tls.cert": str(files.cert(role)),
            "distributed.scheduler.dashboard.tls.key": str(files.key(role))}


def dask_config(files: TLSFiles, role: str) -> dict[str, Any]:
    """The whole Dask config of a process of ``role``: comms of every role, the dashboard, encryption required.

    As ``DASK_*`` environment variables (``dask.config`` reads them) this is
    what ``airflowless cluster up --tls`` gives ``dask scheduler`` and ``dask worker``.
    """
    security = files.security()
    config: dict[str, Any] = {"distributed.comm.require-encryption": True,
                              "distributed.comm.tls.ca-file": str(files.ca)}
    for each in ROLES:
        config[f"distributed.comm.tls.{each}.cert"] = getattr(security, f"tls_{each}_cert")
        config[f"distributed.comm.tls.{each}.key"] = getattr(security, f"tls_{each}_key")
    config.update(dashboard_config(files, role))
    return config


def with_client_role(security: Security | None) -> Security | None:
    """``security`` with a client certificate: its own, else its worker's or scheduler's.

    A ``dask worker`` started with ``--tls-cert`` has only the worker role;
    serve started inside one of its tasks connects and listens as a client.
    """
    if security is None or getattr(security, "tls_client_cert", None):
        return security
    for role in ("worker", "scheduler"):
        cert = getattr(security, f"tls_{role}_cert", None)
        if cert:
            from distributed.security import Security

            attrs = {name: getattr(security, name) for name in Security.__slots__
                     if getattr(security, name, None) is not None}
            attrs.update(tls_client_cert=cert, tls_client_key=getattr(security, f"tls_{role}_key"))
            return Security(**attrs)
    return security


def dask_environ(files: TLSFiles, role: str) -> dict[str, str]:
    """:func:`dask_config` as ``DASK_*`` environment variables, for a ``dask scheduler`` or ``dask worker``."""
    return {"DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value)
            for key, value in dask_config(files, role).items()}


def client_context(security: Security | None, role: str = "client") -> ssl.SSLContext | None:
    """An SSL context to connect with as ``role`` (the CA checked, our certificate shown); None without TLS."""
    if security is None:
        return None
    return security.get_connection_args(role).get("ssl_context")  # type: ignore[no-any-return]


def server_context(security: Security | None, role: str) -> ssl.SSLContext | None:
    """An SSL context to listen with as ``role``, requiring a client certificate from the CA; None without TLS."""
    if security is None:
        return None
    return security.get_listen_args(role).get("ssl_context")  # type: ignore[no-any-return]


def https_context(files: TLSFiles | None = None, *, cert: str | Path | None = None,
                  key: str | Path | None = None, ca: str | Path | None = None) -> ssl.SSLContext:
    """An SSL context for an HTTPS server of airflowless's own (``airflowless ui --tls``).

    With ``files``: the scheduler's certificate (or the folder's only role's),
    and clients need a certificate from the cluster's CA, as at every port of a
    TLS cluster. With ``cert`` and ``key``: that certificate (e.g. one that
    browsers trust); with ``ca`` too, clients need a certificate signed by it,
    else any client may connect (the server is authenticated, clients are not).

    >>> import tempfile
    >>> https_context(generate(tempfile.mkdtemp())).verify_mode == ssl.CERT_REQUIRED
    True
    """
    if files is not None:
        if cert is not None or key is not None or ca is not None:
            raise ConfigError("expected either a folder of the cluster's certificates or a certificate and key "
                              "of your own, got both; pass one of them")
        context = server_context(files.security(), "scheduler")
        assert context is not None  # a TLSFiles' Security always has certificates
        return context
    if cert is None or key is None:
        missing = " and no key" if key is None else ""
        got = f"no certificate{missing}" if cert is None else "no key"
        raise ConfigError(f"expected a certificate and its key for HTTPS, got {got}; pass both "
                          "(--tls-cert FILE --tls-key FILE), or use the cluster's certificates (--tls)")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(os.fspath(cert), os.fspath(key))
        if ca is not None:
            context.load_verify_locations(cafile=os.fspath(ca))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"expected PEM files of a certificate ({cert}), its private key ({key})"
                          f"{f' and a CA ({ca})' if ca is not None else ''} that belong together, got: {exc}; "
                          "check the paths, and that the key is the certificate's") from exc
    context.verify_mode = ssl.CERT_REQUIRED if ca is not None else ssl.CERT_NONE
    return context


def dask_setup(server: Any) -> None:
    """Preload hook: the process's dashboard refuses clients without a certificate from the cluster's CA."""
    from .._dask_internals import require_http_client_certificates

    require_http_client_certificates(server)


_PRELOAD = "airflowless.runtime.tls"


class DriverTLS:
    """TLS as ``airflowless.init`` holds it while its runtime lives.

    Sets the dashboard's Dask config in the driver (the embedded scheduler's
    dashboard serves HTTPS with the scheduler's certificate, and dashboard
    links say ``https``) until :meth:`close`, which also removes certificates
    it generated (``owned``).
    """

    def __init__(self, files: TLSFiles, *, owned: bool = False) -> None:
        import dask.config

        self.files = files
        self.security = files.security()
        self._owned = owned or files.temporary
        self._config: Any = dask.config.set(dashboard_config(files, "scheduler"))

    def apply(self, scheduler_options: dict[str, Any], worker_options: Iterable[dict[str, Any]]) -> None:
        """Put an embedded cluster's scheduler and :class:`WorkerProcess` options on TLS."""
        preload = scheduler_options.get("preload") or []
        preload = [preload] if isinstance(preload, str) else list(preload)
        scheduler_options.update(protocol="tls://", security=self.security,
                                 preload=[*preload, _PRELOAD] if _PRELOAD not in preload else preload)
        for options in worker_options:
            options["tls"] = str(self.files.directory)

    def close(self) -> None:
        """Undo the Dask config; remove the certificates if they were generated for this cluster."""
        import shutil

        if self._config is not None:
            self._config.__exit__(None, None, None)
            self._config = None
        if self._owned:
            shutil.rmtree(self.files.directory, ignore_errors=True)
