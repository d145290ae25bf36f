"""The control plane: airflowless pages, a REST API and Prometheus metrics on the Dask dashboard.

Layout:

- :mod:`.context`  what every handler needs: the store URL, the scheduler (if any), the token.
- :mod:`.errors`   API errors with their HTTP status.
- :mod:`.api`      JSON reads and action endpoints under ``/airflowless/api/v1`` (+ OpenAPI).
- :mod:`.actions`  cancel a run, stop a trial or an experiment, scale a deployment.
- :mod:`.live`     what the driver publishes to the scheduler while work runs (data, serve).
- :mod:`.metrics`  the ``airflowless_*`` Prometheus collector on the scheduler's ``/metrics``.
- :mod:`.pages`    the HTML pages under ``/airflowless/``.
- :mod:`.mount`    installs all of that on a scheduler's HTTP server, or a standalone one.

Nothing here is imported on the start path of :func:`airflowless.init`; the pages'
modules load when a page is first opened.
"""
