"""W8 case: the engine's own cost, airflowless against dask.delayed on the same cluster (2 processes x 1 thread).

(a) a chain of 50 dependent no-op stages; (b) a fan-out of 200 no-op stages into one sum, as 200 stage calls
and as one ``.map``; (c, W8_WIDE=1) the same with 2,000. airflowless records every stage; "cache on" runs
with a new seed each round (every stage a miss that is looked up, written and recorded for later runs).
Rounds alternate the systems; the figures are medians over W8_ROUNDS rounds after one warm round.
"""

import os
import statistics
import tempfile
import time

import dask

import airflowless
from airflowless import pipeline, stage
from airflowless.store import open_store

CHAIN, FAN = 50, 200
WIDE = 2_000
STATE: dict = {}


@stage
def step(x: int, seed: int) -> int:
    return x + 1


@stage
def leaf(i: int, seed: int) -> int:
    return i


@stage
def total(values: list[int]) -> int:
    return sum(values)


@pipeline
def chain(seed: int = 0, length: int = CHAIN):
    x = step(0, seed)
    for _ in range(length - 1):
        x = step(x, seed)
    return x


@pipeline
def fan(seed: int = 0, width: int = FAN):
    return total([leaf(i, seed) for i in range(width)])


@pipeline
def fan_map(seed: int = 0, width: int = FAN):
    return total(leaf.map(list(range(width)), seed))


def _inc(x: int) -> int:
    return x + 1


def _ident(i: int) -> int:
    return i


def _delayed_chain(length: int) -> float:
    began = time.perf_counter()
    x = dask.delayed(_inc, pure=False)(0)
    for _ in range(length - 1):
        x = dask.delayed(_inc, pure=False)(x)
    assert x.compute() == length
    return time.perf_counter() - began


def _delayed_fan(width: int) -> float:
    began = time.perf_counter()
    leaves = [dask.delayed(_ident, pure=False)(i) for i in range(width)]
    assert dask.delayed(sum)(leaves).compute() == sum(range(width))
    return time.perf_counter() - began


def _ours(pipe, cache: bool, **params) -> float:
    STATE["seed"] += 1
    began = time.perf_counter()
    pipe.run({"seed": STATE["seed"], **params}, store=STATE["store"], cache=cache)
    return time.perf_counter() - began


def setup():
    home = tempfile.mkdtemp()
    os.environ["AIRFLOWLESS_HOME"] = home
    STATE["client"] = airflowless.init(n_workers=2, threads_per_worker=1, quiet=True, dashboard_address=None)
    STATE["store"] = open_store(f"sqlite:///{home}/w8.db")
    STATE["seed"] = 0


def run():
    wide = os.environ.get("W8_WIDE") == "1"
    cases = {
        "chain dask.delayed": lambda: _delayed_chain(CHAIN),
        "chain cache off": lambda: _ours(chain, False),
        "chain cache on": lambda: _ours(chain, True),
        "fan dask.delayed": lambda: _delayed_fan(FAN),
        "fan cache off": lambda: _ours(fan, False),
        "fan cache on": lambda: _ours(fan, True),
        "fan map cache off": lambda: _ours(fan_map, False),
    }
    if wide:
        cases |= {"wide dask.delayed": lambda: _delayed_fan(WIDE),
                  "wide map cache off": lambda: _ours(fan_map, False, width=WIDE)}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for round_ in range(int(os.environ.get("W8_ROUNDS", "3")) + 1):
        for name, case in cases.items():
            took = case()
            if round_:  # the first round warms imports and the workers
                times[name].append(took)
    return {name: statistics.median(values) for name, values in times.items()}


def teardown():
    airflowless.shutdown()
