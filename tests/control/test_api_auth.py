"""The token rules over real HTTP: reads open on loopback, actions always guarded, everything guarded
beyond loopback; 401 without a token, 403 with another one, compared in constant time."""

from __future__ import annotations

import hmac
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from airflowless.control import auth
from airflowless.control.context import ControlContext
from airflowless.store import open_store
from tests.control.conftest import call

TOKEN = "the-cluster-token-0123456789"
V1 = "airflowless/api/v1/"


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'record.db'}"
    open_store(url).close()
    return url


def test_on_loopback_reads_are_open_and_actions_need_the_token(url: str, control_server: Any) -> None:
    base = control_server(ControlContext(url, token=TOKEN)) + V1
    assert call(base + "runs")[0] == 200
    request = urllib.request.Request(base + "runs/1/cancel", method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401 and refused.value.headers["WWW-Authenticate"].startswith("Bearer")
    for action in ("runs/1/cancel", "trials/1/stop", "experiments/1/stop"):
        assert call(base + action, method="POST")[0] == 401
        assert call(base + action, method="POST", token="guess")[0] == 403
        status, body = call(base + action, method="POST", token=TOKEN)  # past the guard, to the action
        assert status not in (401, 403) and set(body) == {"error"}, (action, status, body)
    basic = urllib.request.Request(base + "trials/1/stop", method="POST", data=b"",
                                   headers={"Authorization": f"Basic {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as wrong_scheme:
        urllib.request.urlopen(basic, timeout=30)
    assert wrong_scheme.value.code == 401
    status, _ = call(base + "deployments/app/dep/scale", method="POST", token=TOKEN, body={"replicas": 1})
    assert status not in (401, 403)


def test_beyond_loopback_every_request_needs_the_token(url: str, control_server: Any) -> None:
    ctx = ControlContext(url, token=TOKEN)
    base = control_server(ctx, host="0.0.0.0").replace("0.0.0.0", "127.0.0.1") + V1
    assert ctx.loopback is False
    for read in ("runs", "experiments", "deployments", "openapi.json", "trials/1/metrics", "no/such/route"):
        assert call(base + read)[0] == 401, read
        assert call(base + read, token=TOKEN[:-1])[0] == 403, read
    assert call(base + "runs", token=TOKEN) == (200, {"runs": []})


def test_the_token_is_compared_in_constant_time(url: str, control_server: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def recording(given: bytes, expected: bytes) -> bool:
        compared.append((given, expected))
        return real(given, expected)

    monkeypatch.setattr(auth.hmac, "compare_digest", recording)
    base = control_server(ControlContext(url, token=TOKEN)) + V1
    assert call(base + "runs/1/cancel", method="POST", token="x" * len(TOKEN))[0] == 403
    assert compared == [(b"x" * len(TOKEN), TOKEN.encode())]


def test_loopback_is_decided_from_the_bound_address() -> None:
    assert [auth.is_loopback(h) for h in ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost")] == [True] * 5
    assert [auth.is_loopback(h) for h in ("0.0.0.0", "::", "", "10.0.0.1", "example.org")] == [False] * 5


def test_a_written_token_is_private_and_one_per_cluster(tmp_path: Path) -> None:
    path = auth.write_token("abc", tmp_path / "home", 8787)
    assert path == tmp_path / "home" / "tokens" / f"{socket.gethostname()}-8787" and path.read_text() == "abc\n"
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o077 == 0
    other = auth.write_token("def", tmp_path / "home", 8788)  # another cluster in the same home
    assert (path.read_text(), other.read_text()) == ("abc\n", "def\n")
    auth.write_token("ghi", tmp_path / "home", 8787)  # a new cluster on that port replaces it
    assert path.read_text() == "ghi\n" and len(list(path.parent.iterdir())) == 2


def _answer_to_headers_only(base: str, headers: str) -> str:
    """Send a POST's headers (announcing a large body) and none of its body; return the status line."""
    host, port = base.split("//")[1].split("/")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(f"POST /{V1}deployments/app/dep/scale HTTP/1.1\r\nHost: {host}\r\n{headers}"
                     "Content-Type: application/json\r\nContent-Length: 50000000\r\n\r\n".encode())
        return conn.recv(4096).decode(errors="replace").splitlines()[0]


def test_the_token_is_checked_before_a_body_is_read_and_bodies_are_bounded(url: str, control_server: Any) -> None:
    base = control_server(ControlContext(url, token=TOKEN))
    # answered from the headers alone: the 50 MB the request announces is never awaited nor kept
    assert " 401 " in _answer_to_headers_only(base, "")
    assert " 403 " in _answer_to_headers_only(base, "Authorization: Bearer guess\r\n")
    assert " 413 " in _answer_to_headers_only(base, f"Authorization: Bearer {TOKEN}\r\n")
    status, body = call(base + V1 + "deployments/app/dep/scale", method="POST", token=TOKEN,
                        body=b'{"replicas": 1, "pad": "' + b"x" * 70_000 + b'"}')
    assert status == 413 and "at most" in body["error"]


def _read_with_host(base: str, path: str, host: str, token: str | None = None) -> tuple[int, str]:
    """GET ``path`` with ``host`` as the Host header (what a browser sends for a rebound name)."""
    address, port = base.split("//")[1].split("/")[0].rsplit(":", 1)
    auth_line = f"Authorization: Bearer {token}\r\n" if token else ""
    with socket.create_connection((address, int(port)), timeout=30) as conn:
        conn.sendall(f"GET /{path} HTTP/1.1\r\nHost: {host}\r\n{auth_line}Connection: close\r\n\r\n".encode())
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    text = answer.decode(errors="replace")
    return int(text.split(" ", 2)[1]), text


def test_a_rebound_host_name_cannot_read_a_loopback_server(url: str, control_server: Any) -> None:
    base = control_server(ControlContext(url, token=TOKEN))
    port = base.split("//")[1].split("/")[0].rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"{socket.gethostname()}:{port}"):
        assert _read_with_host(base, V1 + "runs", host)[0] == 200, host
    status, text = _read_with_host(base, V1 + "runs", f"attacker.test:{port}")  # DNS rebinding
    assert status == 401 and "does not name this machine" in text, text
    assert _read_with_host(base, V1 + "runs", f"attacker.test:{port}", token=TOKEN)[0] == 200
    page_status, page = _read_with_host(base, "airflowless/runs", f"127.0.0.1:{port}")
    assert page_status == 200 and "frame-ancestors 'none'" in page  # no other site may frame the pages
