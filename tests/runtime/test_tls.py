"""Certificates and settings of airflowless.runtime.tls (no cluster: the cluster tests are in test_tls_cli.py
and tests/serve/test_tls_embedded.py)."""

from __future__ import annotations

import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509

from airflowless.errors import ConfigError
from airflowless.runtime import tls
from airflowless.serve.http_options import HTTPOptions
from airflowless.settings import Settings


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_generate_makes_a_ca_and_a_certificate_per_role_with_the_hosts_named(tmp_path: Path) -> None:
    files = tls.generate(tmp_path / "certs", hosts=["10.77.0.2", "worker-a.example"])
    assert files.roles() == ["scheduler", "worker", "client"]
    assert _mode(files.directory) == 0o700
    assert _mode(files.directory / "ca-key.pem") == 0o600
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    for role in tls.ROLES:
        assert _mode(files.key(role)) == 0o600
        cert = x509.load_pem_x509_certificate(files.cert(role).read_bytes())
        cert.verify_directly_issued_by(ca)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert {"localhost", "worker-a.example"} <= set(names.get_values_for_type(x509.DNSName))
        assert {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("10.77.0.2")} <= set(
            names.get_values_for_type(x509.IPAddress))
    security = files.security()
    assert security.require_encryption
    for role in tls.ROLES:  # every role's contexts load and require the peer's certificate
        assert tls.server_context(security, role).verify_mode == ssl.CERT_REQUIRED  # type: ignore[union-attr]
        assert tls.client_context(security, role).verify_mode == ssl.CERT_REQUIRED  # type: ignore[union-attr]


def test_a_drivers_folder_needs_only_the_client_certificate(tmp_path: Path) -> None:
    full = tls.generate(tmp_path / "full")
    driver = tmp_path / "driver"
    driver.mkdir()
    for name in ("ca.pem", "client.pem", "client-key.pem"):
        (driver / name).write_bytes((full.directory / name).read_bytes())
    security = tls.load(driver).security()
    assert security.tls_client_cert == security.tls_worker_cert == str(driver / "client.pem")


def test_load_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="CA certificate at .*ca.pem"):
        tls.load(tmp_path)
    (tmp_path / "ca.pem").write_text("x")
    with pytest.raises(ConfigError, match="a certificate and key per role"):
        tls.load(tmp_path)
    with pytest.raises(ConfigError, match="security must be True"):
        tls.resolve(42)


def test_settings_name_the_certificates_as_a_folder_or_three_files(tmp_path: Path) -> None:
    files = tls.generate(tmp_path / "certs")
    assert tls.from_settings(Settings.from_env({})) is None
    by_dir = tls.from_settings(Settings.from_env({"AIRFLOWLESS_TLS_DIR": str(files.directory)}))
    assert by_dir is not None and by_dir.directory == files.directory
    by_files = tls.from_settings(Settings.from_env({
        "AIRFLOWLESS_TLS_CA": str(files.ca), "AIRFLOWLESS_TLS_CERT": str(files.cert("client")),
        "AIRFLOWLESS_TLS_KEY": str(files.key("client"))}))
    assert by_files is not None
    assert by_files.cert("client").resolve() == files.cert("client").resolve()
    with pytest.raises(ConfigError, match="got no AIRFLOWLESS_TLS_KEY"):
        tls.from_settings(Settings.from_env({"AIRFLOWLESS_TLS_CA": str(files.ca),
                                             "AIRFLOWLESS_TLS_CERT": str(files.cert("client"))}))


def test_an_in_memory_security_is_written_out_privately(tmp_path: Path) -> None:
    from distributed.security import Security

    files = tls.from_security(Security.temporary(), tmp_path / "mem")
    assert files.roles() == ["scheduler", "worker", "client"]
    assert _mode(files.key("client")) == 0o600
    assert files.security().get_connection_args("client")["ssl_context"] is not None


def test_the_proxy_takes_its_own_certificate_only_whole(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="need 'ssl_certfile'"):
        HTTPOptions.from_dict({"ssl_keyfile": "key.pem"})
    files = tls.generate(tmp_path / "certs")
    from airflowless.serve.http_server import ingress_ssl_context

    public = ingress_ssl_context(HTTPOptions(ssl_certfile=str(files.cert("client")),
                                             ssl_keyfile=str(files.key("client"))), None)
    assert public is not None and public.verify_mode == ssl.CERT_NONE  # HTTPS, any client
    mutual = ingress_ssl_context(HTTPOptions(ssl_certfile=str(files.cert("client")),
                                             ssl_keyfile=str(files.key("client")), ssl_ca_certs=str(files.ca)), None)
    assert mutual is not None and mutual.verify_mode == ssl.CERT_REQUIRED
    assert ingress_ssl_context(HTTPOptions(), None) is None  # no TLS anywhere: plain HTTP


def test_a_worker_with_only_its_own_certificate_can_still_act_as_a_client(tmp_path: Path) -> None:
    from distributed.security import Security

    files = tls.generate(tmp_path / "certs")
    worker_only = Security(tls_ca_file=str(files.ca), tls_worker_cert=str(files.cert("worker")),
                           tls_worker_key=str(files.key("worker")), require_encryption=True)
    assert tls.client_context(worker_only) is None  # what serve inside a `dask worker` task would get
    as_client = tls.with_client_role(worker_only)
    assert as_client is not None and as_client.tls_client_cert == str(files.cert("worker"))
    assert tls.server_context(as_client, "client") is not None  # so the proxy serves HTTPS, not HTTP
    assert tls.with_client_role(None) is None


def test_init_says_how_to_join_a_tls_cluster(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    code = ("import airflowless\nfrom airflowless.errors import ConfigError\n"
            "try:\n    airflowless.init('tls://127.0.0.1:9', security=True, quiet=True)\n"
            "except ConfigError as exc:\n    print(exc)\n")
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert "security=True generates certificates for an embedded cluster" in done.stdout, done.stderr
    assert "AIRFLOWLESS_TLS_DIR" in done.stdout
