"""Rank 0's reports gathering other ranks' metrics of the same step, and who scores what in LightGBM."""

from __future__ import annotations

from typing import Any

from airflowless.train.gather import ReportGatherer
from airflowless.train.lightgbm import scoring_ranks


def _report(rank: int, step: int, metrics: dict[str, Any], gather: list[int] | None = None) -> dict[str, Any]:
    message = {"event": "report", "rank": rank, "step": step, "metrics": metrics, "checkpoint": None}
    if gather is not None:
        message["gather"] = gather
    return message


def _collect() -> tuple[ReportGatherer, list[dict[str, Any]]]:
    delivered: list[dict[str, Any]] = []
    return ReportGatherer(delivered.append), delivered


def test_rank_zero_waits_for_the_parts_of_its_step_in_either_order() -> None:
    reports, out = _collect()
    reports.add(_report(0, 1, {"train-loss": 0.5, "round": 1}, gather=[1]))
    assert out == []  # rank 1's part of step 1 has not come
    reports.add(_report(1, 2, {"valid-loss": 0.7, "round": 2}))  # a part ahead of rank 0
    reports.add(_report(1, 1, {"valid-loss": 0.8, "round": 1}))
    assert [m["metrics"] for m in out] == [{"valid-loss": 0.8, "round": 1, "train-loss": 0.5}]
    reports.add(_report(0, 2, {"train-loss": 0.4, "round": 2}, gather=[1]))
    assert out[-1]["metrics"] == {"valid-loss": 0.7, "round": 2, "train-loss": 0.4}


def test_steps_are_delivered_in_order_once_and_rank_zero_wins() -> None:
    reports, out = _collect()
    reports.add(_report(0, 1, {"a": 1}, gather=[1, 2]))
    reports.add(_report(0, 2, {"a": 2}, gather=[1]))
    reports.add(_report(1, 2, {"b": 2}))
    reports.add(_report(1, 1, {"b": 1, "a": 99}))
    assert out == []  # step 1 still waits for rank 2, and step 2 comes after it
    reports.add(_report(2, 1, {"c": 1}))
    assert [m["step"] for m in out] == [1, 2]
    assert out[0]["metrics"] == {"a": 1, "b": 1, "c": 1}
    for message in (_report(0, 1, {"a": 1}, gather=[1, 2]), _report(1, 1, {"b": 1})):  # history replayed
        reports.add(message)
    assert [m["step"] for m in out] == [1, 2]


def test_without_gather_other_ranks_are_ignored_and_close_flushes() -> None:
    reports, out = _collect()
    reports.add(_report(1, 1, {"loss": 3.0}))
    reports.add(_report(0, 1, {"loss": 1.0}))
    reports.add({"event": "finished", "rank": 0})
    assert [m["metrics"] for m in out] == [{"loss": 1.0}]
    reports.add(_report(0, 2, {"loss": 0.9}, gather=[1]))  # rank 1 ended without its part
    reports.close()
    assert [m["metrics"] for m in out] == [{"loss": 1.0}, {"loss": 0.9}]


def test_lightgbm_evaluation_sets_go_round_robin_to_the_ranks_after_zero() -> None:
    assert scoring_ranks(["train", "valid"], 1) == {"valid": 0}
    assert scoring_ranks(["train", "valid"], 2) == {"valid": 1}
    assert scoring_ranks(["valid", "train", "test", "holdout"], 3) == {"valid": 1, "test": 2, "holdout": 1}
    assert scoring_ranks(["train"], 4) == {}
