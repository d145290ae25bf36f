"""The service's schedule lag against cron + ``airflowless run``, and its idle cost (issue 26).

Run: python -m pytest tests/benchmarks/test_service_lag.py --benchmarks -s   (SERVICE_IDLE=1 adds the 1,000-deployment
idle cost, 65 s more; SERVICE_TICKS sets the ticks measured, default 30)
Targets: lag (due time to the first stage running) p99 <= 1 s; 1,000 deployments on 1-minute schedules cost the idle
service <= 10% of one core. For reference, the peers' documented floors: Airflow's scheduler loop and task start take
seconds between dependent tasks; Dagster's sensors tick every 30 s; Prefect's workers poll every 10 s.
"""

from __future__ import annotations

import pytest

from .common_cases import run_case


@pytest.mark.benchmark
def test_service_lag() -> None:
    figures = run_case("service_lag", env={"AIRFLOWLESS_HOME": "/tmp/airflowless-bench/home"}, timeout=1800)
    print(f"\nschedule lag, due time to the first stage running, {figures['ticks']:.0f} ticks")
    print(f"  service             p50 {figures['service p50']:.3f} s  p99 {figures['service p99']:.3f} s  "
          f"(limit 1 s: x{figures['service p99'] / 1.0:.2f})")
    print(f"  cron + airflowless run  p50 {figures['cron p50']:.3f} s  p99 {figures['cron p99']:.3f} s")
    print(f"  service / cron p50  x{figures['service p50'] / figures['cron p50']:.2f}")
    if "idle cpu share" in figures:
        print(f"  1,000 deployments, 1-minute schedules: the service used {figures['idle cpu share'] * 100:.1f}% of "
              f"one core over 65 s (limit 10%), {figures['idle queued']:.0f} runs queued")
