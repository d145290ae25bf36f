"""How airflowless's pictures show in a notebook: interactive while it runs, a still PNG once saved.

A cell whose value is one of :mod:`airflowless.plots`'s figures (``result.plot()``,
``grid.plot()``, ``ds.stats().plot()`` as the cell's last line) displays a bundle
of two renderings. ``text/html`` holds the Bokeh picture (its div and script,
drawn by the BokehJS that ``bokeh.io.output_notebook()`` loads) with the still
PNG inside it, which the script removes once Bokeh draws: a live JupyterLab
shows the interactive picture, and GitHub or nbviewer, which run no script,
show the PNG. ``image/png`` holds the PNG alone for tools that prefer images
(nbconvert to PDF or Markdown, VS Code's renderer).

Only figures tagged :data:`TAG` are formatted this way; other Bokeh objects keep
IPython's usual display. ``bokeh.io.show(fig)`` still works, interactive only.
"""

from __future__ import annotations

import base64
from typing import Any

__all__ = ["TAG", "bundle", "offer"]

TAG = "airflowless-picture"

_UNVEIL = ("<script>(function () {{ var still = document.getElementById('{id}'), tries = 0;"
           " function check() {{ if (window.Bokeh && still && still.previousElementSibling &&"
           " still.previousElementSibling.childElementCount) {{ still.remove(); }}"
           " else if (tries++ < 100) {{ setTimeout(check, 100); }} }} check(); }})();</script>")


def bundle(model: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The display data of ``model`` (IPython's mimebundle formatter); nothing for a figure not ours."""
    if TAG not in (getattr(model, "tags", None) or []):
        return {}, {}
    from bokeh.embed import components

    from .static import to_png

    png = to_png(model)
    encoded = base64.b64encode(png).decode()
    script, div = components(model)
    still = f"still-{model.id}"
    html = (f'<div class="airflowless-picture">{div}<img id="{still}" alt="{_alt(model)}" '
            f'src="data:image/png;base64,{encoded}"/></div>{script}{_UNVEIL.format(id=still)}')
    return {"text/html": html, "image/png": encoded}, {}


def _alt(model: Any) -> str:
    import html

    title = getattr(getattr(model, "title", None), "text", None) or "an airflowless plot"
    return html.escape(str(title), quote=True)


def offer() -> None:
    """In an IPython kernel, display tagged Bokeh figures with :func:`bundle` (registering it again is harmless)."""
    import sys

    if "IPython" not in sys.modules:
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        from bokeh.model import Model

        shell.display_formatter.mimebundle_formatter.for_type(Model, bundle)
