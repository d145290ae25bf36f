"""What a user asks of the service: deploy a pipeline (on a schedule or not), submit one run, backfill.

Everything is checked here, in the caller's process, before the record is
written: the module imports, the parameters are ones the pipeline takes, of
its types, and the graph traces with them; a schedule's cron expression and
time zone are valid. The service then only runs what passed. A submission
uploads the module's folder into the storage by default (:mod:`.upload`); a
deployment keeps the module's absolute path (the service loads the file as it
is at each run) unless ``upload=True`` pins the code as it is now.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .conditions import parse_conditions
from .files import FileSpec, Match, check_reachable, typed
from .notify import parse_deadline, parse_notify
from .schedules import INTERVAL_PARAMS, UPSTREAM_PARAM, Schedule, parse_after
from .upload import is_submission, local_target, uploaded

if TYPE_CHECKING:
    from ..dag.pipeline import Pipeline
    from ..store import Store

__all__ = ["deploy", "submit", "trigger", "backfill", "resolve_target", "checked_params"]


def resolve_target(target: str) -> tuple[str, Pipeline]:
    """The target as the service loads it (a file as an absolute path, with ``:NAME``), and its pipeline."""
    from ..dag import load_pipeline

    pipe = load_pipeline(target)
    module_part = target
    if not Path(target).exists() and ":" in target:
        module_part = target.rpartition(":")[0]
    path = Path(module_part)
    shown = str(path.resolve()) if module_part.endswith(".py") or path.exists() else module_part
    return f"{shown}:{pipe.name}", pipe


def checked_params(pipe: Pipeline, params: dict[str, Any], *, scheduled: bool,
                   supplied: dict[str, Any] | None = None) -> dict[str, Any]:
    """``params`` checked against the pipeline (types, unknown and missing names, a traced graph).

    A scheduled deployment's runs get ``interval_start`` / ``interval_end`` when the
    pipeline declares them, and ``supplied`` names what a trigger sets for each run
    (with sample values, or None where no sample is known): they are traced here
    with samples, and may not be set by hand.
    """
    from ..dag.params import bind_params

    given = dict(params)
    samples = dict(supplied or {})
    if scheduled:
        sample = datetime(2000, 1, 1, tzinfo=timezone.utc).isoformat()
        samples.update({name: sample for name in INTERVAL_PARAMS if name in pipe.params})
        if UPSTREAM_PARAM in pipe.params and UPSTREAM_PARAM not in given:
            samples[UPSTREAM_PARAM] = 1
    fixed = sorted(set(samples) & set(given))
    if fixed:
        raise ConfigError(f"{fixed} are set for each run by its trigger (the schedule's data interval, or what "
                          "the file trigger matched); do not pass them as --param")
    if None in samples.values():  # no sample to trace with: the other parameters are checked
        bind_params(pipe.name, {n: p for n, p in pipe.params.items() if n not in samples}, given)
        return given
    if samples:
        pipe.graph(**{**given, **samples})
        return given
    bind_params(pipe.name, pipe.params, given)
    pipe.graph(**given)
    return given


def deploy(target: str | Pipeline, name: str, *, params: dict[str, Any] | None = None, cron: str | None = None,
           timezone_name: str | None = None, every: float | None = None, catchup: bool = False,
           max_active_runs: int | None = None, priority: int = 0, pool: str | None = None, paused: bool = False,
           replace: bool = False, upload: bool = False, after: list[str] | None = None,
           notify: list[str | tuple[str, Callable[..., Any]]] | None = None, on_new_files: str | FileSpec | None = None,
           include_existing: bool = False, deadline: str | float | None = None, only_if: list[str] | None = None,
           pass_params: list[str] | None = None, expect_every: str | float | None = None,
           resume_abandoned: int = 0, now: datetime | None = None, store: Store | None = None) -> dict[str, Any]:
    """Record deployment ``name`` of the pipeline at ``target``; the deployment as stored.

    ``upload``: its runs run the code as it is now, packed into the storage (:mod:`.upload`), not the file
    as it will be when each runs. ``after``: ``["NAME[:STATE,...]", ...]``: it runs when a run of each of those
    deployments ends in one of the states (default ``succeeded``), instead of on a schedule. ``notify``:
    ``["on_failure=webhook:env:VAR", "on_late=email:ops@example.com", ("on_failure", fn), ...]`` (:mod:`.notify`);
    ``deadline``: ``"30m"``: a run not ended that long after it was due is late. ``expect_every``: ``"1d"``: no
    run started for that long means its data is late. ``only_if``: run conditions,
    ``["weekdays", "previous-succeeded"]`` (:mod:`.conditions`). ``on_new_files``: a pattern (or a
    :class:`~.files.FileSpec` with its options): it runs once per new file or partition that matches, with
    the match's fields as parameters; what matches now is left alone unless ``include_existing``.
    ``resume_abandoned``: when a run's driver dies, the service resumes it, up to that many times. ``now``: the
    moment it counts as deployed (its schedule's first tick is the next after it; default the present)."""
    from ..store import open_store

    _check_name(name)
    _check_limit(max_active_runs)
    if not isinstance(resume_abandoned, int) or isinstance(resume_abandoned, bool) or resume_abandoned < 0:
        raise ConfigError(f"resume_abandoned is how many times a run whose driver died is resumed: an integer >= 0, "
                          f"got {resume_abandoned!r}")
    resolved, pipe = _resolve(target)
    schedule = None if cron is None and every is None else Schedule.parse(cron=cron, timezone=timezone_name,
                                                                           every=every)
    if schedule is None and timezone_name is not None:
        raise ConfigError("--tz applies to a cron schedule (--cron); this deployment has none")
    if pass_params and not after:
        raise ConfigError("--pass-param passes parameters from the run a deployment follows: add --after NAME")
    following = parse_after(after or [], pass_params)
    notifying = parse_notify(notify or [])
    deadline_s = parse_deadline(deadline)
    expect_every_s = parse_deadline(expect_every, option="--expect-every")
    for option, value in (("--deadline", deadline_s), ("--expect-every", expect_every_s)):
        if value is not None and not any(rule["on"] in ("on_late", "on_failure") for rule in notifying or []):
            raise ConfigError(f"{option} says when something is late, which is told through --notify: add e.g. "
                              "--notify on_late=webhook:env:OPS_HOOK (on_failure channels hear of it too)")
    _check_functions(resolved, notifying or [])
    conditions = parse_conditions(only_if or [])
    files = FileSpec.parse(on_new_files) if isinstance(on_new_files, str) else on_new_files
    found: dict[str, Match] = {}
    supplied: dict[str, Any] = {}
    if files is not None:
        files = _mapped(files, pipe, params or {})
        found = check_reachable(files)
        supplied = _samples(files, pipe, found)
    if following is not None and following.get("pass"):
        supplied.update(_passed(following, pipe, params or {}, store))
    checked = checked_params(pipe, params or {}, scheduled=schedule is not None or following is not None,
                             supplied=supplied)
    if following is not None and UPSTREAM_PARAM in checked:
        raise ConfigError(f"{UPSTREAM_PARAM!r} is set for each run to the run it follows; do not pass it as --param")
    if upload:
        resolved = uploaded(resolved, pipe.name)
    db = store or open_store()
    db.create_pipeline_deployment(name, pipeline=pipe.name, target=resolved, params=checked, schedule=schedule,
                                  catchup=catchup, max_active_runs=max_active_runs, priority=priority, pool=pool,
                                  paused=paused, replace=replace, after=following, notify=notifying,
                                  on_files=files.to_json() if files is not None else None, deadline_s=deadline_s,
                                  conditions=conditions, expect_every_s=expect_every_s,
                                  resume_abandoned=resume_abandoned, now=None if now is None else _utc(now))
    deployment = db.get_pipeline_deployment(name)
    if files is not None and not include_existing:  # what is there and whole now is not new
        db.record_existing(deployment["id"], [m for m in found.values() if m.ready])
    return deployment


def submit(target: str | Pipeline, *, params: dict[str, Any] | None = None, priority: int = 0,
           pool: str | None = None, upload: bool = True, store: Store | None = None) -> int:
    """Queue one run of the pipeline at ``target`` for the service; its run id (``queued`` until it starts).

    ``upload`` (default): the module's folder is packed into the storage now (:mod:`.upload`), so the service
    runs this code wherever it runs, even once the file changes; False: it loads the file where it is."""
    from ..store import open_store
    from ..store.service import Trigger

    resolved, pipe = _resolve(target)
    checked = checked_params(pipe, params or {}, scheduled=False)
    if upload:
        resolved = uploaded(resolved, pipe.name)
    db = store or open_store()
    return db.enqueue_run(pipe.name, target=resolved, params=checked, trigger=Trigger.SUBMIT, priority=priority,
                          pool=pool)


def trigger(name: str, *, params: dict[str, Any] | None = None, store: Store | None = None,
            checked: bool = False) -> int:
    """Queue one run of deployment ``name`` now (its parameters, overridden by ``params``, which are checked
    against the pipeline unless ``checked`` says the caller did); its run id."""
    from ..store import open_store
    from ..store.service import Trigger

    db = store or open_store()
    deployment = db.get_pipeline_deployment(name)
    merged = {**deployment["params"], **(params or {})}
    if params and not checked:
        _, pipe = _resolve(local_target(deployment["target"]))
        merged = checked_params(pipe, merged, scheduled=False)
    return db.enqueue_run(deployment["pipeline"], target=deployment["target"], params=merged,
                          trigger=Trigger.MANUAL, deployment_id=deployment["id"], priority=deployment["priority"],
                          pool=deployment["pool"])


def backfill(name: str, start: datetime, end: datetime, *, max_active_runs: int | None = None, rerun: bool = False,
             store: Store | None = None) -> tuple[int, list[int]]:
    """Queue one run per interval of deployment ``name`` ending in ``(start, end]``; the backfill's id and runs."""
    from ..store import open_store

    _check_limit(max_active_runs)
    db = store or open_store()
    return db.create_backfill(name, _utc(start), _utc(end), max_active_runs=max_active_runs, rerun=rerun)


def _check_functions(target: str, rules: list[dict[str, str]]) -> None:
    """Each ``python:FUNCTION`` channel names a function of the pipeline's module."""
    from ..dag.loader import load_module

    wanted = [rule["function"] for rule in rules if rule["channel"] == "python"]
    if not wanted:
        return
    module_part = target.rpartition(":")[0]
    module = load_module(module_part)
    missing = [name for name in wanted if not callable(getattr(module, name, None))]
    if missing:
        raise ConfigError(f"--notify python:{missing[0]}: {module_part} has no function {missing[0]!r}; define "
                          "it in the pipeline's module (it is called with the message, a dict)")


def _passed(following: dict[str, Any], pipe: Pipeline, params: dict[str, Any], store: Store | None
            ) -> dict[str, None]:
    """The parameters ``--pass-param`` takes from the upstream run, checked against both pipelines (no sample:
    the graph is traced at each run)."""
    from ..store import open_store

    mapped: dict[str, str] = following["pass"]
    unknown = sorted(set(mapped) - set(pipe.params))
    if unknown:
        raise ConfigError(f"--pass-param sets {unknown}, which pipeline {pipe.name!r} does not take; it takes "
                          f"{sorted(pipe.params) or 'no parameters'}")
    (name,) = following["deployments"]
    try:
        upstream = (store or open_store()).get_pipeline_deployment(name)
    except KeyError as exc:
        raise ConfigError(exc.args[0]) from None
    _, upstream_pipe = _resolve(local_target(upstream["target"]))
    missing = sorted(up for up in mapped.values() if up not in upstream_pipe.params)
    if missing:
        raise ConfigError(f"--pass-param takes {missing} from runs of {name!r}, whose pipeline "
                          f"{upstream_pipe.name!r} has no such parameter; it has {sorted(upstream_pipe.params)}")
    return dict.fromkeys(mapped)


def _mapped(files: FileSpec, pipe: Pipeline, params: dict[str, Any]) -> FileSpec:
    """``files`` with each field that names a parameter of the pipeline (not given, not mapped) mapped to it;
    :class:`ConfigError` for a mapped parameter the pipeline does not take."""
    from dataclasses import replace

    unknown = sorted(set(files.params) - set(pipe.params))
    if unknown:
        raise ConfigError(f"--param-from-match sets {unknown}, which pipeline {pipe.name!r} does not take; it takes "
                          f"{sorted(pipe.params) or 'no parameters'}")
    mapped = dict(files.params)
    for name in files.fields:
        if name in pipe.params and name not in params and name not in mapped and name not in mapped.values():
            mapped[name] = name
    missing = sorted(n for n, p in pipe.params.items() if p.required and n not in params and n not in mapped)
    if missing:
        raise ConfigError(f"pipeline {pipe.name!r} needs {missing}: set each from the match with "
                          f"--param-from-match {missing[0]}=FIELD (the pattern captures {list(files.fields)}), "
                          f"or pass --param {missing[0]}=...")
    return replace(files, params=mapped)


def _samples(files: FileSpec, pipe: Pipeline, found: dict[str, Match]) -> dict[str, Any]:
    """Each parameter the trigger sets, with a value to trace the graph with: from a match there is now, else
    None (the graph is traced at each run)."""
    sample = next(iter(found.values()), None)
    if sample is None:
        return dict.fromkeys(files.params)
    try:
        return typed(files.values([sample]), pipe.params)
    except Exception as exc:
        raise ConfigError(f"--on-new-files: the match {sample.key} does not suit the pipeline's parameters: {exc}"
                          ) from None


def _resolve(target: str | Pipeline) -> tuple[str, Pipeline]:
    from ..dag.pipeline import Pipeline

    if isinstance(target, Pipeline):
        module = target.module  # "module:file" for a file's pipeline
        file = module.partition(":")[2]
        if not file:
            raise ConfigError(f"pipeline {target.name!r} has no source file the service could load; "
                              "deploy it by its module's path")
        return f"{file}:{target.name}", target
    if is_submission(target):  # uploaded (the REST API's pipeline-uploads): it stays the upload
        _, pipe = resolve_target(local_target(target))
        return target, pipe
    return resolve_target(target)


def _check_name(name: str) -> None:
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}", name or ""):
        raise ConfigError(f"a deployment name is letters, digits, '.', '_' and '-' (up to 200), starting with a "
                          f"letter or digit; got {name!r}")


def _check_limit(value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"--max-active-runs is a whole number from 1 up, got {value!r}")


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)
