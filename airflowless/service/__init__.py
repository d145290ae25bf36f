"""The service: runs pipelines without a person's process — submitted, on schedules, on new data, queued.

See docs/scheduling.md and docs/triggers.md. :mod:`.deploy` checks and records
what users ask for; :mod:`.schedules` says when a deployment is due;
:mod:`.files` which files and folders a pattern matches and when each is whole,
:mod:`.watch` the threads that take each new one; the record's queue
(:mod:`airflowless.store.service`) decides which queued runs start (limits,
pools, priorities); :mod:`.service` is the long-running process that ticks it
all and starts each run's driver as a child process (:mod:`.driver`);
:mod:`.notify` tells people how runs ended.
"""
