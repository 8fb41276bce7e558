"""A local HTTP server for the framework drop-in tests: 127.0.0.1 only, answers each POST with
the next body it was handed (GETs of ``/health`` and ``/v1/models`` with fixed answers), and
stops after a bounded number of requests."""

from __future__ import annotations

import http.server
import json
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

MAX_REQUESTS = 10_000


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, body: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _count(self) -> bool:
        server = self.server
        with server.lock:  # type: ignore[attr-defined]
            server.count += 1  # type: ignore[attr-defined]
            return server.count <= MAX_REQUESTS  # type: ignore[attr-defined]

    def do_GET(self) -> None:  # noqa: N802
        if not self._count():
            return self._send(b'{"error":"request budget spent"}', 503)
        if self.path.rstrip("/").endswith("/models"):
            return self._send(json.dumps({"data": [{"id": self.server.model}]}).encode())  # type: ignore[attr-defined]
        self._send(b"{}")

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        request = self.rfile.read(length)
        if not self._count():
            return self._send(b'{"error":"request budget spent"}', 503)
        server = self.server
        with server.lock:  # type: ignore[attr-defined]
            server.requests.append((self.path, request))  # type: ignore[attr-defined]
            queued = bool(server.bodies)  # type: ignore[attr-defined]
            body = server.bodies.popleft() if queued else b'{"error":"no body queued"}'  # type: ignore[attr-defined]
        self._send(body, 200 if queued else 500)


class Server:
    """``serve(body, ...)`` queues the bodies the next POSTs are answered with; ``url`` is the
    base URL; ``requests`` the (path, body) of every POST."""

    def __init__(self, httpd: http.server.ThreadingHTTPServer) -> None:
        self._httpd = httpd
        host, port = httpd.server_address[:2]
        self.url = f"http://{host}:{port}"

    def serve(self, *bodies: bytes) -> None:
        with self._httpd.lock:  # type: ignore[attr-defined]
            self._httpd.bodies.extend(bodies)  # type: ignore[attr-defined]

    @property
    def requests(self) -> list[tuple[str, bytes]]:
        return list(self._httpd.requests)  # type: ignore[attr-defined]


@contextmanager
def local_server(model: str = "test-model") -> Iterator[Server]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.lock = threading.Lock()  # type: ignore[attr-defined]
    httpd.bodies = deque()  # type: ignore[attr-defined]
    httpd.requests = []  # type: ignore[attr-defined]
    httpd.count = 0  # type: ignore[attr-defined]
    httpd.model = model  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Server(httpd)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
