"""errors.py's promise: every error a user can cause is an AirflowlessError (with the builtin it stands for as a
base), and every one is importable from airflowless.errors."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import airflowless
from airflowless import errors

ROOT = Path(airflowless.__file__).parent.parent

# builtin errors still raised on purpose: caught inside airflowless, or an internal call's misuse
INTERNAL = {
    "airflowless/dag/params.py": "caught by parse_params, which raises ParameterError naming the parameter",
    "airflowless/jsonsafe.py": "the TypeError json's default hook is expected to raise",
    "airflowless/serve/json_body.py": "caught by the proxy, which answers 400",
    "airflowless/service/channels.py": "caught by the notifier, which records the failed delivery",
    "airflowless/store/experiments.py": "unknown column names passed by airflowless's own code",
    "airflowless/store/store.py": "unknown column names passed by airflowless's own code",
}


def test_every_error_class_is_exported() -> None:
    defined = {name for name, value in vars(errors).items()
               if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == errors.__name__}
    assert defined - set(errors.__all__) == set()


def test_no_bare_builtin_error_is_raised_where_a_user_can_cause_it() -> None:
    bare = re.compile(r"raise (ValueError|TypeError|RuntimeError)\(")
    found = sorted(f"{path.relative_to(ROOT)}:{number}"
                   for folder in ("airflowless", "connectors")  # pipelines/ is user code
                   for path in (ROOT / folder).rglob("*.py")
                   if str(path.relative_to(ROOT)) not in INTERNAL
                   for number, line in enumerate(path.read_text().splitlines(), 1) if bare.search(line))
    assert found == [], "raise an airflowless.errors class (ConfigError, UsageError, ...) instead"


def test_our_errors_keep_the_builtin_bases_callers_catch() -> None:
    assert issubclass(errors.ConfigError, ValueError) and issubclass(errors.UsageError, TypeError)
    assert issubclass(errors.ClusterError, RuntimeError)
