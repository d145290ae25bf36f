"""The control plane on a Dask scheduler you run yourself: ``dask scheduler --preload airflowless.dashboard``.

The scheduler's dashboard then serves the airflowless pages, the REST API under
``/airflowless/api/v1`` and the ``airflowless_*`` metrics, reading the record at
``AIRFLOWLESS_DB`` (or under ``AIRFLOWLESS_HOME``) of the scheduler's environment.
Actions need the token: ``AIRFLOWLESS_TOKEN`` of that environment, or one
generated at start, kept in ``$AIRFLOWLESS_HOME/tokens/<host>-<dashboard port>``
(mode 0600) and named in the scheduler's log. The embedded cluster of :func:`airflowless.init` needs none
of this: it installs the same at start.

.. code-block:: console

    $ AIRFLOWLESS_DB=postgresql://db/airflowless dask scheduler --preload airflowless.dashboard
    $ curl http://127.0.0.1:8787/airflowless/api/v1/runs
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["dask_setup"]

logger = logging.getLogger("distributed.scheduler")  # shown by `dask scheduler` at INFO


def dask_setup(scheduler: Any) -> None:
    """Dask's preload hook: install the control plane on ``scheduler``'s dashboard server.

    Also keeps code file names in what this scheduler pickles: distributed's scheduler unpickles a
    client's graph and pickles each task again for its worker, so an unpatched scheduler would send
    stages as ``File "<dynamic-code>"`` (cloudpickle >= 3.1.3) even from a patched driver.
    """
    from ._cloudpickle_internals import keep_code_filenames
    from ._dask_internals import quiet_cancelled_waits
    from ._library_internals import bokeh_close_after_keep_alive
    from .control import mount

    keep_code_filenames()
    quiet_cancelled_waits()
    bokeh_close_after_keep_alive()

    ctx = mount.install(scheduler)
    if ctx is None:
        logger.warning("airflowless: this scheduler has no dashboard server (started with --no-dashboard?), "
                       "so the airflowless control plane is not installed")
        return
    logger.info("airflowless: control plane at %s (record %s; token in %s)", mount.link(scheduler),
                _shown(ctx.store_url), ctx.token_hint)


def _shown(url: str | None) -> str:
    if url is None:
        return "none"
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL: the store says why when it is opened
        return "<unparsable URL>"
