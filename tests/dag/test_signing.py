"""Signed pickles: a stage output or Tune state replaced by a hostile pickle is refused, never run.

The hostile pickle opens (creates) a marker file when it is unpickled; every
test checks that the marker never appears and that the error names the file
and says what to do.
"""

from __future__ import annotations

import pickle
import stat
from pathlib import Path

import pytest

from airflowless import pipeline, stage, tune
from airflowless.errors import SignatureError
from airflowless.integrity import key_path, read_signed, sign, unsign, write_signed
from airflowless.train import RunConfig

pytestmark = pytest.mark.usefixtures("cluster_client")


class _Hostile:
    """Unpickling this creates ``marker`` (a stand-in for running any code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.marker, "w"))


def hostile_pickle(marker: Path) -> bytes:
    return pickle.dumps(_Hostile(marker))


@stage
def produce(n: int) -> int:
    return n * 2


@stage
def consume(x: int, tag: str) -> str:
    return f"{tag}{x}"


@pipeline
def signed(n: int = 3, tag: str = "a"):
    return consume(produce(n), tag)


def _tamper(path: Path, how: str, marker: Path) -> None:
    if how == "unsigned":  # a plain pickle where ours was
        path.write_bytes(hostile_pickle(marker))
    else:  # our header and signature kept, the payload after it replaced
        header = path.read_bytes().split(b"\n", 2)
        path.write_bytes(header[0] + b"\n" + header[1] + b"\n" + hostile_pickle(marker))


@pytest.mark.parametrize("how", ["unsigned", "signature-kept"])
def test_a_replaced_cached_output_is_refused_and_never_unpickled(store, tmp_path: Path, how: str) -> None:  # noqa: ANN001
    first = signed.run({"n": 3, "tag": "a"}, store=store)
    assert first.value == "a6"
    again = signed.run({"n": 3, "tag": "b"}, store=store)  # written by workers, checked by the driver
    assert again.value == "b6" and again.record.stage("produce").status == "cached"

    output = Path(first.record.stage("produce").output_uri or "")
    marker = tmp_path / "pwned"
    _tamper(output, how, marker)

    with pytest.raises(SignatureError) as info:
        signed.run({"n": 3, "tag": "c"}, store=store)
    message = str(info.value)
    assert str(output) in message
    assert "modified, or written by someone else" in message
    assert "--no-cache" in message
    assert not marker.exists(), "the hostile pickle ran"
    assert store.list_runs(limit=1)[0].status == "failed"

    fresh = signed.run({"n": 3, "tag": "c"}, store=store, cache=False)  # what the error says to do
    assert fresh.value == "c6" and not marker.exists()


def test_the_key_file_is_private_and_created_once(store) -> None:  # noqa: ANN001
    signed.run({"n": 1}, store=store)
    path = key_path()
    assert path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.read_text()
    signed.run({"n": 2}, store=store)
    assert path.read_text() == before


def test_a_signed_file_copied_over_another_is_refused(tmp_path: Path) -> None:
    key = b"k" * 32
    framed = sign(b"payload", "a.pkl", key=key)
    assert unsign(framed, "a.pkl", key=key) == b"payload"
    with pytest.raises(SignatureError, match="does not match"):
        unsign(framed, "b.pkl", key=key)
    with pytest.raises(SignatureError, match="does not match"):
        unsign(framed, "a.pkl", key=b"o" * 32)


def trainable(config: dict[str, float]) -> None:
    tune.report({"loss": config["x"]})


def test_replaced_tune_state_is_refused_on_restore(home: Path, tmp_path: Path) -> None:
    grid = tune.Tuner(trainable, param_space={"x": tune.grid_search([1.0, 2.0])},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=RunConfig(name="signed-state")).fit()
    state = Path(grid.experiment_path) / "experiment_state.pkl"
    assert tune.Tuner.restore(str(state.parent)).name == "signed-state"  # ours restores

    marker = tmp_path / "pwned"
    state.write_bytes(hostile_pickle(marker))
    with pytest.raises(SignatureError) as info:
        tune.Tuner.restore(str(state.parent))
    assert str(state) in str(info.value) and "carries no airflowless signature" in str(info.value)
    assert "start the experiment again" in str(info.value)
    assert not marker.exists(), "the hostile pickle ran"


def test_write_signed_round_trip_and_no_temp_left(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "out" / "x.pkl"
    write_signed(str(target), b"data")
    assert read_signed(str(target)) == b"data"
    assert [p.name for p in target.parent.iterdir()] == ["x.pkl"]
