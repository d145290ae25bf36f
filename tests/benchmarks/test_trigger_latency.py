"""File trigger latency: a partition's last file written to its run's first stage running (issue 27).

Run: python -m pytest tests/benchmarks/test_trigger_latency.py --benchmarks -s   (TRIGGER_PARTITIONS, default 15;
TRIGGER_POLL, the S3 poll interval, default 2 s)
Targets: local paths with the default settings p90 <= 2 s; S3 within one poll interval plus 1 s. The baseline is the
loop users write without the service: list the folder every second, start `airflowless run` per new folder (it
takes a folder as soon as it appears, whole or not). For reference, the peers' documented floors: Airflow's
FileSensor pokes every 60 s by default; Dagster's sensors tick every 30 s.
"""

from __future__ import annotations

import pytest

from .common_cases import run_case


@pytest.mark.benchmark
def test_trigger_latency() -> None:
    f = run_case("trigger_latency", env={"AIRFLOWLESS_HOME": "/tmp/airflowless-bench/home"}, timeout=1800)
    print(f"\nfile trigger latency, partition whole to its first stage running, {f['partitions']:.0f} partitions")
    print(f"  local (events, quiet 0.5 s)  p50 {f['local p50']:.3f} s  p90 {f['local p90']:.3f} s  "
          f"max {f['local max']:.3f} s  (limit 2 s: x{f['local p90'] / 2.0:.2f})")
    limit = f["poll"] + 1.0
    print(f"  s3 (poll {f['poll']:g} s)             p50 {f['s3 p50']:.3f} s  p90 {f['s3 p90']:.3f} s  "
          f"max {f['s3 max']:.3f} s  (limit {limit:g} s: x{f['s3 max'] / limit:.2f})")
    print(f"  loop + airflowless run       p50 {f['loop p50']:.3f} s  p90 {f['loop p90']:.3f} s  "
          f"max {f['loop max']:.3f} s")
    print(f"  service / loop p50  x{f['local p50'] / f['loop p50']:.2f}")
