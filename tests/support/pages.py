"""Helpers for the pages' tests: a real tornado server for the control plane's routes, run in
a thread of its own, and headless Chromium driven from its command line.

>>> import shutil
>>> chromium() == shutil.which("chromium") or chromium() is None
True
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["Browser", "chromium", "fetch", "serve"]

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio"]


@contextmanager
def serve(rules: list[tuple[str, type, dict[str, Any]]]) -> Iterator[str]:
    """Serve tornado ``rules`` on 127.0.0.1 (a free port) from a thread; yield the base URL."""
    from tornado import httpserver, web

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    ready = threading.Event()
    state: dict[str, Any] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)

        async def start() -> None:
            server = httpserver.HTTPServer(web.Application(rules))
            server.add_sockets([sock])
            state["server"], state["stop"] = server, asyncio.Event()
            ready.set()
            await state["stop"].wait()
            server.stop()
            await server.close_all_connections()

        state["loop"] = loop
        loop.run_until_complete(start())
        loop.close()

    thread = threading.Thread(target=run, name="pages-test-server", daemon=True)
    thread.start()
    ready.wait(30)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(30)


def fetch(url: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    """``(status, body text, headers)`` of one request, errors included."""
    request = urllib.request.Request(url, method=method, headers=headers or {},
                                     data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def chromium() -> str | None:
    """The Chromium the browser tests drive (Debian's package), or None."""
    return shutil.which("chromium") or (os.path.exists("/usr/bin/chromium") and "/usr/bin/chromium") or None


class Browser:
    """One headless Chromium for many pages, driven over the DevTools protocol (tornado's websocket
    client; the protocol is Chromium's own, nothing is downloaded). Pages are loaded, then waited on
    until a condition holds in the page (their scripts have drawn what the test reads).

    >>> with Browser() as browser:                                    # doctest: +SKIP
    ...     dom = browser.show("http://127.0.0.1:8787/airflowless/runs", until="document.title")
    """

    def __init__(self, *, size: tuple[int, int] = (1280, 900)) -> None:
        executable = chromium()
        if executable is None:
            raise FileNotFoundError("chromium is not installed (apt-get install -y chromium)")
        self._profile = tempfile.TemporaryDirectory(prefix="airflowless-chromium-", ignore_cleanup_errors=True)
        self._process = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={self._profile.name}", "--remote-debugging-port=0",
             f"--window-size={size[0]},{size[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chromium-devtools", daemon=True)
        self._thread.start()
        self._ids = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        try:
            self._call(self._connect(size))
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _connect(self, size: tuple[int, int]) -> None:
        from tornado.websocket import websocket_connect

        active = Path(self._profile.name) / "DevToolsActivePort"
        for _ in range(600):
            if active.exists() and len(active.read_text().split()) == 2:
                break
            if self._process.poll() is not None:
                raise RuntimeError(f"chromium exited ({self._process.returncode}) before it listened")
            await asyncio.sleep(0.05)
        port, path = active.read_text().split()
        self._ws = await websocket_connect(f"ws://127.0.0.1:{port}{path}", max_message_size=256 << 20)
        self._reader = asyncio.ensure_future(self._read())
        target = await self._send("Target.createTarget", {"url": "about:blank"})
        attached = await self._send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        self._session = attached["sessionId"]
        await self._send("Page.enable", session=True)
        await self._send("Emulation.setDeviceMetricsOverride", {"width": size[0], "height": size[1],
                                                               "deviceScaleFactor": 1, "mobile": False}, session=True)

    async def _read(self) -> None:
        while True:
            message = await self._ws.read_message()
            if message is None:
                for waiting in self._pending.values():
                    if not waiting.done():
                        waiting.set_exception(ConnectionError("chromium closed the DevTools connection"))
                return
            data = json.loads(message)
            future: asyncio.Future[Any] | None = self._pending.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                if "error" in data:
                    future.set_exception(RuntimeError(f"DevTools error: {data['error']}"))
                else:
                    future.set_result(data.get("result", {}))

    async def _send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = False) -> Any:
        self._ids += 1
        message: dict[str, Any] = {"id": self._ids, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        future: asyncio.Future[Any] = self._loop.create_future()
        self._pending[self._ids] = future
        await self._ws.write_message(json.dumps(message))
        return await future

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able values only)."""
        result = self._call(self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                            "awaitPromise": True}, session=True))
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw in the page: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def navigate(self, url: str) -> None:
        """Open ``url`` in the page and return once Chromium has started loading it (no waiting on scripts)."""
        self._call(self._send("Page.navigate", {"url": url}, session=True))

    def show(self, url: str, *, until: str, screenshot: Path | None = None, timeout: float = 60) -> str:
        """Open ``url``, wait until ``until`` (a JavaScript expression) is true in the page, and return
        the DOM; with ``screenshot``, save a PNG of the page there too."""
        self.navigate(url)
        deadline = time.monotonic() + timeout
        while not self.evaluate(f"document.readyState === 'complete' && !!({until})"):
            if time.monotonic() > deadline:
                status = self.evaluate("(document.getElementById('status') || {}).textContent || ''")
                raise AssertionError(f"{url}: not true within {timeout:g} s: {until} (status line: {status!r})")
            time.sleep(0.1)
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            shot = self._call(self._send("Page.captureScreenshot", {"format": "png"}, session=True))
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        return str(self.evaluate("document.documentElement.outerHTML"))

    def close(self) -> None:
        """Close Chromium (all its processes: they share its process group) and its profile."""
        if getattr(self, "_ws", None) is not None:
            with contextlib.suppress(Exception):
                self._call(self._send("Browser.close"), timeout=5)
            with contextlib.suppress(Exception):
                self._ws.close()
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(10)
        self._profile.cleanup()
