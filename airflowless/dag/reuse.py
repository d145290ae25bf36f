"""Whether an earlier stage output may stand in for running the stage again.

It may when its file exists, its signature checks out (a file that does not
is refused with :class:`airflowless.errors.SignatureError`, never skipped
silently), and the stage's ``cache_valid`` check, if it has one, accepts the
output — a stage whose effect lives outside its return value (a server it
started) says there whether that effect still holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .outputs import check_output, output_exists, read_output

if TYPE_CHECKING:
    from ..store.records import StageRecord
    from .stage import Stage

__all__ = ["still_reusable"]


def still_reusable(stage: Stage, earlier: StageRecord | None) -> StageRecord | None:
    """``earlier`` if its output may be reused for ``stage``, else ``None``."""
    if earlier is None or not earlier.output_uri or not output_exists(earlier.output_uri):
        return None
    check_output(earlier.output_uri)
    valid = stage.options.cache_valid
    if valid is not None and not valid(read_output(earlier.output_uri)):
        return None
    return earlier
