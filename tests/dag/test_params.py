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


def test_a_parameter_set_twice_is_refused() -> None:
    with pytest.raises(ParameterError, match=r"parameter 'n' is set once per run, got it twice \('n=5' and 'n=6'\)"):
        parse_assignments(["n=5", "n=6"], params_of(pipe))


def test_list_items_are_checked_against_their_type() -> None:
    with pytest.raises(ParameterError, match=r"parameter 'items' expects list\[int\] \| None, got '\[\"a\"\]'"):
        parse_assignments(['items=["a"]'], params_of(pipe))
    assert parse_assignments(["items=[1, 2]"], params_of(pipe)) == {"items": [1, 2]}


DEMO = '''\
from airflowless import pipeline, stage


@stage
def count(n_rows: int, sizes: list[int]) -> int:
    return n_rows + sum(sizes)


@pipeline
def demo(n_rows: int = 3, sizes: list[int] = [1]):  # noqa: B006
    return count(n_rows, sizes)
'''


@pytest.mark.parametrize(("args", "expected"), [
    (["-p", "n_rows=5", "-p", "n_rows=6"], "parameter 'n_rows' is set once per run, got it twice"),
    (["-p", 'sizes=["a"]'], "parameter 'sizes' expects list[int], got '[\"a\"]' (item 0: 'a' is not int)"),
])
def test_the_cli_refuses_repeated_and_mistyped_parameters(home: Path, tmp_path: Path, args: list[str],
                                                           expected: str) -> None:
    import os
    import subprocess
    import sys

    module = tmp_path / "demo.py"
    module.write_text(DEMO)
    proc = subprocess.run([sys.executable, "-m", "airflowless.cli", "run", str(module), *args],
                          env={**os.environ, "AIRFLOWLESS_HOME": str(home)}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert expected in proc.stderr
    assert not (home / "airflowless.db").exists(), "nothing should run (or be recorded) on bad parameters"


def test_the_python_api_refuses_mistyped_parameters(home: Path) -> None:
    from airflowless import pipeline, stage

    @stage
    def count(n_rows: int, sizes: list[int]) -> int:
        return n_rows + sum(sizes)

    @pipeline
    def demo(n_rows: int = 3, sizes: list[int] = [1]):  # noqa: B006
        return count(n_rows, sizes)

    with pytest.raises(ParameterError, match=r"parameter 'sizes' of pipeline 'demo' expects list\[int\], "
                                             r"got \['a'\] \(item 0: 'a' is not int\)"):
        demo(sizes=["a"])
    with pytest.raises(ParameterError, match=r"parameter 'n_rows' of pipeline 'demo' expects int, got '5'"):
        demo.run({"n_rows": "5"})
    with pytest.raises(ParameterError, match=r"expects int, got True"):
        demo(n_rows=True)
