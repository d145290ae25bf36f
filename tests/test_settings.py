"""settings.py: every variable it reads is documented in docs/concepts.md's table, and a bad timing is refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflowless.errors import ConfigError
from airflowless.settings import Settings

ROOT = Path(__file__).parent.parent


def test_every_variable_read_is_in_the_documented_table() -> None:
    read = set(re.findall(r'"(AIRFLOWLESS_[A-Z_]+)"', (ROOT / "airflowless" / "settings.py").read_text()))
    for path in (ROOT / "airflowless").rglob("*.py"):  # read elsewhere than settings.py: documented all the same
        read |= set(re.findall(r'(?:environ(?:\.get\(|\[)|getenv\()\s*"(AIRFLOWLESS_[A-Z0-9_]+)"', path.read_text()))
    table = (ROOT / "docs" / "concepts.md").read_text().split("## Settings", 1)[1]
    documented = set(re.findall(r"`(AIRFLOWLESS_[A-Z_]+)", table))
    documented |= {f"AIRFLOWLESS{suffix}" for suffix in re.findall(r"`(_[A-Z_]+)", table)}  # `_TLS_CA`, ...
    assert read - documented == set()


def test_timings_come_from_the_environment_and_bad_ones_are_refused() -> None:
    settings = Settings.from_env({"AIRFLOWLESS_DECISION_TIMEOUT_S": "12.5", "AIRFLOWLESS_HEARTBEAT_S": "1"})
    assert (settings.decision_timeout_s, settings.heartbeat_s, settings.heartbeat_timeout_s) == (12.5, 1.0, 60.0)
    with pytest.raises(ConfigError, match="AIRFLOWLESS_TRAIN_GRACE_S must be a number of seconds > 0, got '-1'"):
        Settings.from_env({"AIRFLOWLESS_TRAIN_GRACE_S": "-1"})
