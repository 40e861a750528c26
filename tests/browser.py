"""Headless Chromium driven over its DevTools protocol, for the tests of the status page.

The Debian package's ``/usr/bin/chromium``, started with ``--remote-debugging-port=0`` and
a profile of its own; the port it picked is read from the profile's ``DevToolsActivePort``.
The protocol is JSON over one websocket; the few frames it needs (masked text frames out,
unmasked frames in) are written here on a plain socket rather than taking a websocket
package for them. Console messages and uncaught exceptions are collected as they come.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--window-size=1400,1800",
]


def chromium_missing() -> str | None:
    """Why no browser test can run here (None: Chromium is installed)."""
    return None if os.access(CHROMIUM, os.X_OK) else f"{CHROMIUM} is not installed (apt-get install chromium)"


class Browser:
    """One Chromium and its first page, driven through DevTools; ``close()`` ends it."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.profile = Path(tempfile.mkdtemp(prefix="headrace-chromium-"))
        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.console: list[dict[str, Any]] = []  # Runtime.consoleAPICalled params
        self.exceptions: list[dict[str, Any]] = []  # Runtime.exceptionThrown params
        self.log: list[dict[str, Any]] = []  # Log.entryAdded entries (network errors, CSP, ...)
        self._next_id = 0
        self._socket = self._connect()
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.timeout
        port = self._until(deadline, self._port)
        # The DevTools server may answer before the first page is a target: asked until it is.
        page = self._until(deadline, lambda: self._page(port))
        path = page["webSocketDebuggerUrl"].split(str(port), 1)[1]
        sock = socket.create_connection(("127.0.0.1", port), timeout=self.timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"no websocket from chromium: {head!r}")
        return sock

    def _until(self, deadline: float, found: Callable[[], T | None]) -> T:
        """``found()`` until it is not None, while Chromium runs and ``deadline`` is ahead."""
        while (value := found()) is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit code {self.process.poll()})")
            time.sleep(0.1)
        return value

    def _port(self) -> int | None:
        """The DevTools port, once Chromium has written its whole file (port, then path)."""
        try:
            lines = (self.profile / "DevToolsActivePort").read_text().splitlines()
        except FileNotFoundError:
            return None
        return int(lines[0]) if len(lines) >= 2 and lines[0].isdigit() else None

    def _page(self, port: int) -> dict[str, Any] | None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            pages = [t for t in json.load(response) if t["type"] == "page"]
        return pages[0] if len(pages) == 1 else None

    # -- websocket frames -------------------------------------------------------------------
    def _send(self, text: str) -> None:
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        header = bytes([0x81]) + (
            bytes([0x80 | n])
            if n < 126
            else bytes([0x80 | 126]) + struct.pack("!H", n)
            if n < 65536
            else bytes([0x80 | 127]) + struct.pack("!Q", n)
        )
        self._socket.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self._socket.recv(n - len(out))
            if not chunk:
                raise RuntimeError("chromium closed its websocket")
            out += chunk
        return bytes(out)

    def _receive(self) -> dict[str, Any]:
        message = b""
        while True:
            first, second = self._exactly(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._exactly(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._exactly(8))[0]
            payload = self._exactly(n)
            if first & 0x0F in (0x8, 0x9, 0xA):  # close, ping, pong: not expected from DevTools
                raise RuntimeError(f"unexpected websocket control frame {first:#x}")
            message += payload
            if first & 0x80:  # the last fragment
                result: dict[str, Any] = json.loads(message)
                return result

    # -- DevTools -----------------------------------------------------------------------------
    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send ``method`` and return its result (events arriving meanwhile are recorded)."""
        self._next_id += 1
        self._send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        while True:
            message = self._receive()
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            self._record(message)

    def _record(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled":
            self.console.append(params)
        elif method == "Runtime.exceptionThrown":
            self.exceptions.append(params)
        elif method == "Log.entryAdded":
            self.log.append(params["entry"])

    def open(self, url: str) -> None:
        """Go to ``url`` and wait until its document has loaded."""
        self.call("Page.navigate", url=url)
        self.wait_for(f"document.readyState === 'complete' && location.href === {json.dumps(url)}")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited when it is a promise)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20.0) -> Any:
        """Evaluate ``expression`` until it is truthy; its value (raises on timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError as exc:  # a document still loading has no body yet
                value = exc
            if value and not isinstance(value, RuntimeError):
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression} stayed {value!r} for {timeout} s")
            time.sleep(0.2)

    def screenshot(self) -> bytes:
        """A PNG of the whole page."""
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)["data"]
        return base64.b64decode(data)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and the browser's error log entries so far."""
        found = [
            " ".join(str(a.get("value", a.get("description", ""))) for a in c.get("args", []))
            for c in self.console
            if c.get("type") in ("error", "assert")
        ]
        found += [
            e["exceptionDetails"].get("text", "") + str(e["exceptionDetails"].get("exception", {}))
            for e in self.exceptions
        ]
        found += [
            f"{e.get('source')}: {e.get('text')} {e.get('url', '')}" for e in self.log if e.get("level") == "error"
        ]
        return found

    def close(self) -> None:
        try:
            self._socket.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
