"""Keep full garbage collections from stalling requests in flight.

A full (generation 2) collection walks every object the process holds. In a
worker or a driver that imported pandas, scikit-learn and Dask that is
hundreds of thousands of objects, a pause of ~80 ms on a 2-core machine,
which was the whole p99 of a replica under load (W5). :func:`freeze_heap`
(run when a replica starts, and by the HTTP proxy when it starts) collects
once and moves every object alive then to the permanent generation
(``gc.freeze()``), so later collections walk only what was made since. The
price: a cycle among those objects that becomes garbage later is not
reclaimed (plain reference counting still frees everything else).
"""

from __future__ import annotations

import gc

__all__ = ["freeze_heap"]


def freeze_heap() -> None:
    """Collect garbage once, then exempt every object alive now from later collections."""
    gc.collect()
    gc.freeze()
