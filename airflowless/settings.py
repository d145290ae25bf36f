"""The one place that reads airflowless's environment variables.

Every other module asks :func:`get_settings` instead of reading ``os.environ``.

>>> from airflowless.settings import Settings, get_settings
>>> settings = get_settings()                                   # os.environ, read now
>>> Settings.from_env({"AIRFLOWLESS_HOME": "/srv/af"}).db_url   # or any mapping
'sqlite:////srv/af/airflowless.db'
>>> Settings.from_env({}).home.name                             # the default home
'.airflowless'
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

__all__ = ["Settings", "get_settings"]


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Where airflowless keeps its files and which cluster and store it uses.

    ``AIRFLOWLESS_HOME``     folder for the default store, storage and cluster state
                             (default ``~/.airflowless``).
    ``AIRFLOWLESS_DB``       SQLAlchemy URL of the store (default an SQLite file
                             ``$AIRFLOWLESS_HOME/airflowless.db``).
    ``AIRFLOWLESS_STORAGE``  local path or fsspec URL where stage outputs and
                             checkpoints are written (default ``$AIRFLOWLESS_HOME/storage``).
    ``AIRFLOWLESS_SHARE``    ``group`` to share airflowless's folders and files with
                             your group (0750/0640); by default they are yours
                             alone (0700/0600, :mod:`airflowless.private`).
    ``AIRFLOWLESS_ADDRESS``  scheduler address to connect to instead of starting an
                             embedded cluster.
    ``CUDA_VISIBLE_DEVICES``  which GPUs the embedded cluster may use (one worker each).
    ``AIRFLOWLESS_REQUIRE_SERVICES``  when ``1``, tests that need PostgreSQL or other
                             services fail instead of skipping (CI sets it).
    ``AIRFLOWLESS_SERVE_LEASE_S``  seconds a serve replica keeps running without
                             hearing from its controller (default 10); read where
                             the controller runs.
    ``AIRFLOWLESS_SERVE_START_TIMEOUT_S``  seconds a new serve replica may take to build
                             the user's object before it counts as failed (default 300).
    ``AIRFLOWLESS_HEARTBEAT_S``  how often a run's driver and the service touch their
                             heartbeat in the record (default 5).
    ``AIRFLOWLESS_HEARTBEAT_TIMEOUT_S``  a driver on another host whose heartbeat is
                             older than this counts as dead: its run shows ``abandoned``
                             (default 60; read where the record is read).
    ``AIRFLOWLESS_DECISION_TIMEOUT_S``  how long a rank's or a trial's report waits for
                             the driver's continue, pause or stop before it goes on
                             (default 300; read where the ranks and trials run).
    ``AIRFLOWLESS_PARK_TIMEOUT_S``  how long a paused trial waits to be resumed before
                             it ends (default 1800; read where the trials run).
    ``AIRFLOWLESS_TRAIN_GRACE_S``  how long a rank asked to stop gets before it is
                             interrupted, and then ended (default 5).
    ``AIRFLOWLESS_TRAIN_FAILED_GRACE_S``  once a rank failed, how long the driver waits
                             for the other ranks to end before it goes on (default 10).
    ``AIRFLOWLESS_TOKEN``    bearer token of the control plane's actions (and of every
                             request off loopback); generated per cluster when unset.
    ``AIRFLOWLESS_TLS_DIR``  folder of the cluster's certificates (``ca.pem``,
                             ``client.pem``, ``client-key.pem``, as ``airflowless cluster
                             up --tls`` writes): connect to a ``tls://`` scheduler with them.
    ``AIRFLOWLESS_TLS_CA`` / ``_CERT`` / ``_KEY``  the same as three files (CA
                             certificate, this client's certificate and key); each
                             overrides the folder's file.
    ``AIRFLOWLESS_DRIVER_MEMORY_MB``  the most memory (resident, MiB) a run's driver started by
                             the service may use; past it the service stops the run
                             (default: no bound; read where the service runs).
    ``AIRFLOWLESS_DRIVER_TIMEOUT_S``  the most seconds a run's driver started by the service
                             may run; past it the service stops the run (default: no bound).
    ``AIRFLOWLESS_WARM_DRIVERS``  ``0``: the service starts each run's driver when the run
                             starts, instead of keeping one started and waiting (default ``1``).
    ``AIRFLOWLESS_WARM_WORKERS``  ``0``: the embedded cluster's workers import the Data
                             libraries (pyarrow's dataset reader, pandas) at their first
                             Data task, instead of in the background once they are up
                             (default ``1``; read by each worker alone).
    ``AIRFLOWLESS_SMTP``     the mail server of email notifications, read where the
                             service runs: ``smtp://[USER@]HOST[:PORT]`` (STARTTLS when the
                             server offers it), ``smtps://...`` (TLS from the start), or
                             ``smtp+plain://...`` (never TLS: a relay on loopback).
    ``AIRFLOWLESS_SMTP_PASSWORD`` / ``AIRFLOWLESS_SMTP_PASSWORD_FILE``  USER's password, or a
                             file holding it (never in the record).
    ``AIRFLOWLESS_SMTP_FROM``  the sender of email notifications (default
                             ``airflowless@HOSTNAME``).
    """

    home: Path
    db_url: str
    storage: str
    address: str | None
    require_services: bool
    cuda_visible_devices: str | None
    serve_lease_s: float = 10.0
    serve_start_timeout_s: float = 300.0
    heartbeat_s: float = 5.0
    heartbeat_timeout_s: float = 60.0
    decision_timeout_s: float = 300.0
    park_timeout_s: float = 1800.0
    train_grace_s: float = 5.0
    train_failed_grace_s: float = 10.0
    submit_max_mb: float = 100.0
    driver_memory_mb: float | None = None
    driver_timeout_s: float | None = None
    warm_drivers: bool = True
    token: str | None = field(default=None, repr=False)  # a secret: kept out of logs
    tls_dir: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    share: str = ""
    smtp: str | None = None
    smtp_password: str | None = field(default=None, repr=False)  # a secret: kept out of logs
    smtp_from: str | None = None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        home = Path(env.get("AIRFLOWLESS_HOME") or Path.home() / ".airflowless").expanduser()
        return cls(
            home=home,
            db_url=env.get("AIRFLOWLESS_DB") or f"sqlite:///{home / 'airflowless.db'}",
            storage=env.get("AIRFLOWLESS_STORAGE") or str(home / "storage"),
            address=env.get("AIRFLOWLESS_ADDRESS") or None,
            require_services=env.get("AIRFLOWLESS_REQUIRE_SERVICES", "") in {"1", "true", "yes"},
            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
            serve_lease_s=_seconds(env, "AIRFLOWLESS_SERVE_LEASE_S", 10.0),
            serve_start_timeout_s=_seconds(env, "AIRFLOWLESS_SERVE_START_TIMEOUT_S", 300.0),
            heartbeat_s=_seconds(env, "AIRFLOWLESS_HEARTBEAT_S", 5.0),
            heartbeat_timeout_s=_seconds(env, "AIRFLOWLESS_HEARTBEAT_TIMEOUT_S", 60.0),
            decision_timeout_s=_seconds(env, "AIRFLOWLESS_DECISION_TIMEOUT_S", 300.0),
            park_timeout_s=_seconds(env, "AIRFLOWLESS_PARK_TIMEOUT_S", 1800.0),
            train_grace_s=_seconds(env, "AIRFLOWLESS_TRAIN_GRACE_S", 5.0),
            train_failed_grace_s=_seconds(env, "AIRFLOWLESS_TRAIN_FAILED_GRACE_S", 10.0),
            submit_max_mb=_positive(env, "AIRFLOWLESS_SUBMIT_MAX_MB", 100.0, "MiB"),
            driver_memory_mb=_positive(env, "AIRFLOWLESS_DRIVER_MEMORY_MB", None, "MiB"),
            driver_timeout_s=_positive(env, "AIRFLOWLESS_DRIVER_TIMEOUT_S", None, "seconds"),
            warm_drivers=switched_on("AIRFLOWLESS_WARM_DRIVERS", env),
            token=env.get("AIRFLOWLESS_TOKEN") or None,
            tls_dir=env.get("AIRFLOWLESS_TLS_DIR") or None,
            tls_ca=env.get("AIRFLOWLESS_TLS_CA") or None,
            tls_cert=env.get("AIRFLOWLESS_TLS_CERT") or None,
            tls_key=env.get("AIRFLOWLESS_TLS_KEY") or None,
            share=_share(env),
            smtp=env.get("AIRFLOWLESS_SMTP") or None,
            smtp_password=_secret(env, "AIRFLOWLESS_SMTP_PASSWORD"),
            smtp_from=env.get("AIRFLOWLESS_SMTP_FROM") or None,
        )


def switched_on(name: str, env: os._Environ[str] | dict[str, str] | None = None) -> bool:
    """Whether the switch ``name`` is on: it is unless set to 0 (or false, no, off)."""
    return (os.environ if env is None else env).get(name, "1").strip().lower() not in {"0", "false", "no", "off"}


def _seconds(env: os._Environ[str] | dict[str, str], name: str, default: float) -> float:
    return _positive(env, name, default, "seconds")


@overload
def _positive(env: os._Environ[str] | dict[str, str], name: str, default: float, unit: str) -> float: ...
@overload
def _positive(env: os._Environ[str] | dict[str, str], name: str, default: None, unit: str) -> float | None: ...


def _positive(env: os._Environ[str] | dict[str, str], name: str, default: float | None, unit: str) -> float | None:
    from .errors import ConfigError

    text = env.get(name) or ""
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"{name} must be a number of {unit} > 0, got {text!r}; fix or unset it")
    return value


def _secret(env: os._Environ[str] | dict[str, str], name: str) -> str | None:
    """The secret in variable ``name``, or in the file that ``name``_FILE names."""
    from .errors import ConfigError

    if env.get(name):
        return env[name]
    path = env.get(f"{name}_FILE")
    if not path:
        return None
    try:
        return Path(path).read_text().strip() or None
    except OSError as exc:
        raise ConfigError(f"{name}_FILE names {path}, which cannot be read ({exc.strerror})") from None


def _share(env: os._Environ[str] | dict[str, str]) -> str:
    from .errors import ConfigError

    share = env.get("AIRFLOWLESS_SHARE", "").strip().lower()
    if share not in ("", "group"):
        raise ConfigError(f"AIRFLOWLESS_SHARE must be 'group' (or unset: private to you), got {share!r}")
    return share


def get_settings() -> Settings:
    """Settings read from the environment now (cheap; not cached, so tests may change it)."""
    return Settings.from_env()
