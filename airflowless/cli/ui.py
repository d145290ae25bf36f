"""``airflowless ui``: the control plane's pages and API from the record alone, no cluster (like ``mlflow ui``)."""

from __future__ import annotations

import sys

import click


@click.command()
@click.option("--db", default=None, metavar="URL", help="Store URL (default: AIRFLOWLESS_DB or the SQLite file).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; beyond loopback every request needs AIRFLOWLESS_TOKEN.")
@click.option("--port", default=8788, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0: a free one).")
def ui(db: str | None, host: str, port: int) -> None:
    """Serve the runs, experiments and deployments of a record over HTTP until Ctrl-C.

    \b
    airflowless ui --db postgresql://db/airflowless --port 8788
    curl http://127.0.0.1:8788/airflowless/api/v1/runs
    """
    from ..control import auth, mount
    from ..control.context import ControlContext
    from ..settings import get_settings
    from .runs import _open

    settings = get_settings()
    if not auth.is_loopback(host) and settings.token is None:
        click.echo(f"error: --host {host} listens beyond this machine, so every request needs a token; "
                   "set AIRFLOWLESS_TOKEN (e.g. to the output of `python -c \"import secrets; "
                   "print(secrets.token_urlsafe(32))\"`) or use --host 127.0.0.1", err=True)
        sys.exit(2)
    url = db or settings.db_url
    _open(url).close()  # a bad URL or an unreachable database: a message and exit code 2, before listening
    ctx = ControlContext(url, token=settings.token)

    def ready(link: str) -> None:
        click.echo(f"airflowless ui: the record {_shown(url)} at {link}airflowless/ (Ctrl-C to stop)", err=True)

    try:
        mount.serve_standalone(ctx, host, port, ready=ready)
    except OSError as exc:
        click.echo(f"error: cannot listen on {host}:{port} ({exc}); choose another --port or --host", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        pass


def _shown(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
