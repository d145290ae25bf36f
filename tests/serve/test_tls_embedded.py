"""An embedded cluster with ``init(security=...)``: a pipeline, a 2-rank fit and a deployment over TLS,
and every port it opens refusing plaintext, certificate-less and wrong-certificate clients."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflowless.runtime import tls
from tests.support.tls_driver import KNOCKS, knock_everywhere, run_tls_app

EXPECTED_KINDS = {"scheduler", "scheduler dashboard", "worker", "nanny", "worker dashboard", "serve data plane",
                  "serve HTTP ingress"}


@pytest.mark.timeout(180)
def test_embedded_cluster_on_tls_runs_everything_and_refuses_strangers_everywhere(tmp_path: Path) -> None:
    ours = tls.generate(tmp_path / "ours").directory
    other = tls.generate(tmp_path / "other").directory  # another CA: a valid-looking certificate, not ours
    with run_tls_app([str(ours)], {"AIRFLOWLESS_HOME": str(tmp_path / "home")}) as report:
        knocks = knock_everywhere(report["ports"], ours, other)

    assert report["address"].startswith("tls://")
    assert report["pipeline"] == {"total": 90}
    assert report["fit_error"] is None and report["fit_rounds"] == 2
    assert report["url"].startswith("https://")
    assert (report["status"], report["answer"], report["handle"]) == (200, {"double": 42}, {"double": 8})
    assert {port["kind"] for port in report["ports"]} == EXPECTED_KINDS
    assert sum(port["kind"] == "serve data plane" for port in report["ports"]) == 2
    expected = {knock: "open" if knock == "right-cert" else "refused" for knock, _ in KNOCKS}
    wrong = {port: seen for port, seen in knocks.items() if seen != expected}
    assert not wrong, f"ports that did not refuse strangers (or refused us): {wrong}"
