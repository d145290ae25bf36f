"""``airflowless ui``: the control plane's pages and API from the record alone, no cluster (like ``mlflow ui``)."""

from __future__ import annotations

import shutil
import ssl
import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from ..runtime.tls import TLSFiles


@click.command()
@click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; beyond loopback every request needs AIRFLOWLESS_TOKEN.")
@click.option("--port", default=8788, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0: a free one).")
@click.option("--tls", "use_tls", is_flag=True,
              help="Serve HTTPS with the cluster's certificates (AIRFLOWLESS_TLS_DIR or _CA/_CERT/_KEY, else "
                   "those of `cluster up --tls`); clients need a certificate from its CA.")
@click.option("--tls-dir", default=None, type=click.Path(file_okay=False),
              help="Use the certificates in this folder (ca.pem, <role>.pem, <role>-key.pem); implies --tls.")
@click.option("--tls-cert", default=None, type=click.Path(dir_okay=False),
              help="Serve HTTPS with this certificate (PEM) of your own instead; needs --tls-key.")
@click.option("--tls-key", default=None, type=click.Path(dir_okay=False), help="The private key of --tls-cert.")
@click.option("--tls-ca", default=None, type=click.Path(dir_okay=False),
              help="With --tls-cert: clients need a certificate signed by this CA (default: any client).")
def ui(db: str | None, host: str, port: int, use_tls: bool, tls_dir: str | None, tls_cert: str | None,
       tls_key: str | None, tls_ca: str | None) -> None:
    """Serve the runs, experiments and deployments of a record over HTTP (or HTTPS) until Ctrl-C.

    \b
    airflowless ui --db postgresql://db/airflowless --port 8788
    curl http://127.0.0.1:8788/airflowless/api/v1/runs
    airflowless ui --tls     # the certificates of `airflowless cluster up --tls`
    curl --cacert ca.pem --cert client.pem --key client-key.pem https://127.0.0.1:8788/airflowless/api/v1/runs
    """
    from ..control import auth, mount
    from ..control.context import ControlContext
    from ..errors import ConfigError
    from ..settings import get_settings
    from .runs import _open

    settings = get_settings()
    if not auth.is_loopback(host) and settings.token is None:
        click.echo(f"error: --host {host} listens beyond this machine, so every request needs a token; "
                   "set AIRFLOWLESS_TOKEN (e.g. to the output of `python -c \"import secrets; "
                   "print(secrets.token_urlsafe(32))\"`) or use --host 127.0.0.1", err=True)
        sys.exit(2)
    try:
        context, clients = _https(use_tls or tls_dir is not None, tls_dir, tls_cert, tls_key, tls_ca)
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    url = db or settings.db_url
    _open(url).close()  # a bad URL or an unreachable database: a message and exit code 2, before listening
    ctx = ControlContext(url, token=settings.token)

    def ready(link: str) -> None:
        click.echo(f"airflowless ui: the record {_shown(url)} at {link}airflowless/ (Ctrl-C to stop)", err=True)
        if clients:
            click.echo(f"airflowless ui: HTTPS; {clients}", err=True)

    try:
        mount.serve_standalone(ctx, host, port, ssl_context=context, ready=ready)
    except OSError as exc:
        click.echo(f"error: cannot listen on {host}:{port} ({exc}); choose another --port or --host", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        pass


def _https(use_tls: bool, tls_dir: str | None, cert: str | None, key: str | None,
           ca: str | None) -> tuple[ssl.SSLContext | None, str]:
    """The SSL context to serve with (None: plain HTTP), and a line saying what clients need."""
    from ..errors import ConfigError
    from ..runtime import tls

    own = cert is not None or key is not None or ca is not None
    if own and use_tls:
        raise ConfigError("expected either the cluster's certificates (--tls, --tls-dir) or a certificate of your "
                          "own (--tls-cert, --tls-key, --tls-ca), got both; pass one of them")
    if ca is not None and cert is None:
        raise ConfigError("--tls-ca names the CA of the clients' certificates for --tls-cert, got no --tls-cert; "
                          "add --tls-cert FILE --tls-key FILE, or use --tls for the cluster's certificates")
    if own:
        who = f"clients need a certificate signed by {ca}" if ca else "any client may connect"
        return tls.https_context(cert=cert, key=key, ca=ca), who
    if not use_tls:
        return None, ""
    files = _cluster_certificates(tls_dir)
    context, trusted = tls.https_context(files), files.ca.resolve()
    if files.temporary:  # links to the files AIRFLOWLESS_TLS_CA/_CERT/_KEY name, read into the context now
        shutil.rmtree(files.directory, ignore_errors=True)
    return context, f"clients need a certificate signed by {trusted}"


def _cluster_certificates(tls_dir: str | None) -> TLSFiles:
    """``tls_dir``, else the ``AIRFLOWLESS_TLS_*`` settings, else the certificates of ``cluster up --tls``."""
    from ..errors import ConfigError
    from ..runtime import tls
    from ..runtime.processes import load_state
    from ..settings import get_settings

    if tls_dir is not None:
        return tls.load(tls_dir)
    settings = get_settings()
    named = tls.from_settings(settings)
    if named is not None:
        return named
    state = load_state()
    folder = state.tls_dir if state is not None and state.tls_dir else settings.home / "tls"
    try:
        return tls.load(folder)
    except ConfigError as exc:
        raise ConfigError(f"--tls found no certificates: AIRFLOWLESS_TLS_DIR (or _CA, _CERT, _KEY) is not set, and "
                          f"{exc}") from None


def _shown(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
