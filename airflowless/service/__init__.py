"""The service: runs pipelines without a person's process — submitted, on schedules, backfilled, queued.

See docs/scheduling.md. :mod:`.schedules` says when a deployment is due;
:mod:`.queue` decides which queued runs start (limits, pools, priorities);
:mod:`.service` is the long-running process that ticks both and starts each
run's driver as a child process (:mod:`.driver`).
"""
