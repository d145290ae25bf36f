from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from airflowless.dag.params import params_of, parse_assignments, parse_value
from airflowless.errors import ParameterError


def pipe(path: str, n: int = 2, lr: float = 0.1, flag: bool = False, where: Path = Path("."),
         mode: Literal["a", "b"] = "a", opt: int | None = None, items: list[int] | None = None,
         untyped=3):  # noqa: ANN001
    return None


def test_parse_to_declared_types() -> None:
    declared = params_of(pipe)
    values = parse_assignments(
        ["path=x", "n=5", "lr=1e-3", "flag=yes", "where=/tmp", "mode=b", "opt=none", "items=[1,2]",
         "untyped=7"], declared)
    assert values == {"path": "x", "n": 5, "lr": 1e-3, "flag": True, "where": Path("/tmp"), "mode": "b",
                      "opt": None, "items": [1, 2], "untyped": 7}
    assert parse_assignments(["opt=4"], declared) == {"opt": 4}


@pytest.mark.parametrize(("pair", "match"), [
    ("n=five", r"parameter 'n' expects int, got 'five'"),
    ("flag=maybe", r"parameter 'flag' expects bool"),
    ("mode=c", r"parameter 'mode'"),
    ("items={}", r"parameter 'items'"),
    ("nope=1", r"unknown parameter 'nope'"),
    ("novalue", r"name=value"),
])
def test_bad_values_name_the_parameter(pair: str, match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        parse_assignments([pair], params_of(pipe))


def test_parse_value_bool_words() -> None:
    assert parse_value("f", "0", bool) is False
    assert parse_value("f", "TRUE", bool) is True
