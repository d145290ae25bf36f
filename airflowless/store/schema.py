"""The tables of the record, as SQLAlchemy Core metadata.

The schema is built up by the versioned steps in :mod:`.migrations`; this module
only names the tables so the rest of the store can query them. Pipeline runs
and stage runs came first (migration 1); experiments, trials, metrics and
checkpoints joined them (2), then serve's deployments (3), keyed the same way
(integer ids, a link column where rows belong to another row). Runs then
learned who drives them (4): the driver's host, pid and start time, a
heartbeat, and which run resumes them; experiments, a summary of what their
run measured (5). The service (7) added pipeline deployments, pools and the
services themselves, and what started a run: a run queued by the service
says its deployment, trigger, data interval, priority and pool, and waits in
state ``queued`` until a driver the service started takes it; a unique index on
(deployment, interval start, rerun) keeps a scheduled interval from running
twice. Deployments then learned to follow other deployments' runs (8): a run
says which upstream run started it, unique per deployment; and to notify (9):
one row per run, event and channel, written before it is sent (never twice).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

schema_version = Table(
    "airflowless_schema_version",
    metadata,
    Column("version", Integer, primary_key=True),
    Column("applied_at", DateTime(timezone=True), nullable=False),
    Column("description", String(200), nullable=False),
)

pipeline_runs = Table(
    "pipeline_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("pipeline", String(200), nullable=False, index=True),
    Column("module", String(500), nullable=False),
    Column("params", JSON, nullable=False),
    Column("status", String(20), nullable=False, index=True),
    Column("address", String(200)),
    Column("resumed_from", Integer, ForeignKey("pipeline_runs.id")),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("error", Text),
    Column("driver_host", String(255)),
    Column("driver_pid", Integer),
    Column("driver_started", Float),
    Column("heartbeat_at", DateTime(timezone=True)),
    Column("resumed_by", Integer),
    # what started the run, and the queue it waited in (airflowless.service)
    Column("target", Text),  # what the service's driver loads: a file or module, optionally :NAME
    Column("deployment_id", Integer, index=True),
    Column("trigger", String(20)),  # schedule, backfill, submit, manual (None: a driver of its own)
    Column("priority", Integer),
    Column("pool", String(200)),
    Column("interval_start", DateTime(timezone=True)),
    Column("interval_end", DateTime(timezone=True)),
    Column("rerun", Integer),  # 0 for an interval's first run, n for the n-th explicit rerun
    Column("queue_reason", Text),  # why a queued run still waits
    Column("claimed_by", Integer),  # the service that started its driver
    Column("claimed_at", DateTime(timezone=True)),
    Column("backfill_id", Integer, index=True),
    Column("upstream_run", Integer),  # the run whose end started this one (a deployment's --after trigger)
    Column("upstream_runs", JSON),  # upstream deployment -> the run of it this one followed (fan-in: several)
    Column("started_at", DateTime(timezone=True)),  # when its driver took it (a queued run waits before)
    Column("trigger_detail", Text),  # what the trigger saw: "new folder s3://b/taxi/date=2024-01-03/ (3 files)"
    Column("driver_log_uri", Text),  # a service's driver: the copy of its output (airflowless.service.driver_logs)
    Index("uq_runs_deployment_interval", "deployment_id", "interval_start", "rerun", unique=True),
    Index("uq_runs_deployment_upstream", "deployment_id", "upstream_run", unique=True),
)

stage_runs = Table(
    "stage_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("pipeline_runs.id"), nullable=False, index=True),
    Column("node", String(200), nullable=False),
    Column("stage", String(200), nullable=False),
    Column("status", String(20), nullable=False),
    Column("upstream", JSON, nullable=False),
    Column("cache_key", String(64), nullable=False, index=True),
    Column("task_key", String(300)),
    Column("attempts", Integer, nullable=False, default=0),
    Column("worker", String(200)),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("duration_s", Float),
    Column("output_uri", Text),
    Column("output_summary", Text),
    Column("reused_from_run", Integer),
    Column("error", Text),
    Column("traceback", Text),
    Column("log_uri", Text),  # the latest attempt's log (airflowless.dag.logs)
    UniqueConstraint("run_id", "node", name="uq_stage_runs_run_node"),
)


experiments = Table(
    "experiments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False, index=True),
    Column("kind", String(20), nullable=False),
    Column("status", String(20), nullable=False),
    Column("config", JSON, nullable=False),
    Column("storage_path", Text),
    Column("metric", String(200)),
    Column("mode", String(10)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("error", Text),
    Column("summary", JSON),  # what the run measured, written when it ends (the prepared-data cache's use)
    # the pipeline run and stage whose body started it (a Tuner or Trainer inside a stage); None outside one
    Column("run_id", Integer, index=True),
    Column("stage", String(200)),
)

trials = Table(
    "trials",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("experiment_id", Integer, ForeignKey("experiments.id"), nullable=False, index=True),
    Column("name", String(200), nullable=False),
    Column("status", String(20), nullable=False),
    Column("config", JSON, nullable=False),
    Column("restarts", Integer, nullable=False, default=0),
    Column("iterations", Integer, nullable=False, default=0),
    Column("last_metrics", JSON),
    Column("checkpoint_uri", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("error", Text),
    UniqueConstraint("experiment_id", "name", name="uq_trials_experiment_name"),
)

metrics = Table(
    "metrics",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("trial_id", Integer, ForeignKey("trials.id"), nullable=False, index=True),
    Column("step", Integer, nullable=False),
    Column("values", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("trial_id", "step", name="uq_metrics_trial_step"),
)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("trial_id", Integer, ForeignKey("trials.id"), nullable=False, index=True),
    Column("step", Integer, nullable=False),
    Column("uri", Text, nullable=False),
    Column("metrics", JSON, nullable=False),
    Column("deleted", Integer, nullable=False, default=0),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

deployments = Table(
    "deployments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("app", String(200), nullable=False, index=True),
    Column("deployment", String(200), nullable=False),
    Column("route_prefix", String(500)),
    Column("http_address", String(200)),
    Column("num_replicas", Integer, nullable=False),
    Column("status", String(20), nullable=False, index=True),
    Column("config", JSON, nullable=False),
    Column("pid", Integer),
    Column("hostname", String(255)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("models", JSON(none_as_null=True)),  # the registered versions it serves: ["models:/NAME/V", ...]
)


pipeline_deployments = Table(
    "pipeline_deployments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("pipeline", String(200), nullable=False),
    Column("target", Text, nullable=False),
    Column("params", JSON, nullable=False),
    Column("schedule", JSON),  # {"cron": expr, "timezone": tz} or {"every": seconds}; None: runs when triggered
    Column("catchup", Integer, nullable=False, default=0),
    Column("max_active_runs", Integer),
    Column("priority", Integer, nullable=False, default=0),
    Column("pool", String(200)),
    Column("paused", Integer, nullable=False, default=0),
    Column("next_due_at", DateTime(timezone=True), index=True),
    Column("broken", Text),  # why the service cannot run it (its module fails to import)
    Column("after", JSON(none_as_null=True)),  # {"deployments": [names], "states": [run states]}: runs when those runs end so
    Column("notify", JSON(none_as_null=True)),  # [{"on": "failure", "channel": "webhook", "secret": "env:VAR"}]: who hears what
    Column("on_files", JSON(none_as_null=True)),  # FileSpec.to_json(): runs once per new file or partition
    Column("conditions", JSON(none_as_null=True)),  # run conditions (airflowless.service.conditions)
    Column("deadline_s", Float),  # a run not ended this long after it was due is late (notify on_late / on_failure)
    Column("expect_every_s", Float),  # no run started for this long: its data is late (notify on_late / on_failure)
    Column("resume_abandoned", Integer),  # how many times a run whose driver died is resumed by the service (None: 0)
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

pools = Table(
    "pools",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("slots", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

backfills = Table(
    "backfills",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("deployment_id", Integer, nullable=False, index=True),
    Column("start", DateTime(timezone=True), nullable=False),
    Column("end", DateTime(timezone=True), nullable=False),
    Column("max_active_runs", Integer),
    Column("rerun", Integer, nullable=False, default=0),
    Column("status", String(20), nullable=False),  # running, done, cancelled
    Column("created_at", DateTime(timezone=True), nullable=False),
)

services = Table(
    "services",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started", Float),
    Column("address", String(200)),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False),
    Column("stopped_at", DateTime(timezone=True)),
)

notifications = Table(
    "notifications",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, nullable=False, index=True),
    Column("event", String(20), nullable=False),  # failure, success
    Column("channel", String(200), nullable=False),  # "webhook:env:VAR": where it went (the secret's name only)
    Column("status", String(20), nullable=False),  # sending, sent, failed
    Column("attempts", Integer, nullable=False, default=0),
    Column("error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("sent_at", DateTime(timezone=True)),
    UniqueConstraint("run_id", "event", "channel", name="uq_notifications_run_event_channel"),
)

deployment_alerts = Table(  # notifications about a deployment rather than one of its runs: its data is late
    "deployment_alerts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("deployment_id", Integer, nullable=False),
    Column("event", String(20), nullable=False),  # on_late_data
    Column("channel", String(200), nullable=False),
    Column("since", DateTime(timezone=True), nullable=False),  # the last run it started: one alert per silence
    Column("status", String(20), nullable=False),  # sending, sent, failed
    Column("attempts", Integer, nullable=False, default=0),
    Column("error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("sent_at", DateTime(timezone=True)),
    UniqueConstraint("deployment_id", "event", "channel", "since", name="uq_deployment_alerts_once"),
)

trigger_seen = Table(
    "trigger_seen",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("deployment_id", Integer, nullable=False),
    Column("key", Text, nullable=False),  # the partition's or file's URL
    Column("status", String(20), nullable=False),  # taken (a run was queued for it), existing (there at deploy time)
    Column("run_id", Integer),
    Column("files", Integer),
    Column("newest", Float),  # its files' newest modification time when it was taken (epoch seconds)
    Column("seen_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("deployment_id", "key", name="uq_trigger_seen_deployment_key"),
    Index("ix_trigger_seen_run_id", "run_id"),
)

# -- the model registry (airflowless.models) --------------------------------------------------------------------------

registered_models = Table(
    "registered_models",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("description", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

model_versions = Table(
    "model_versions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("model_id", Integer, nullable=False),
    Column("version", Integer, nullable=False),
    Column("uri", Text, nullable=False),  # the registry's copy: <storage>/models/<digest>, its manifest signed
    Column("digest", String(64), nullable=False),  # sha256 of the manifest (every file's path and sha256)
    Column("source", Text),  # the checkpoint it was registered from
    Column("metrics", JSON),
    Column("tags", JSON),
    Column("description", Text),
    Column("run_id", Integer),  # lineage: the pipeline run and stage that registered it, the trial that made it
    Column("stage", String(200)),
    Column("experiment_id", Integer),
    Column("trial_id", Integer),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("datasets", JSON(none_as_null=True)),  # role -> {plan, fingerprint, files, paths} (models.lineage)
    Column("code_version", String(100)),  # the git commit of the file that registered it (+dirty)
    UniqueConstraint("model_id", "version", name="uq_model_versions_model_version"),
)

model_aliases = Table(
    "model_aliases",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("model_id", Integer, nullable=False),
    Column("alias", String(100), nullable=False),
    Column("version", Integer),  # None: the alias was removed (the row is its history)
    Column("set_at", DateTime(timezone=True), nullable=False),
    Index("ix_model_aliases_model_alias", "model_id", "alias"),
)

