"""The server the framework live tests (nemo_gym_live.py, areal_live.py) answer from: on
127.0.0.1, a bounded request loop, each POST answered with the JSON its handler's
``payload()`` gives (copied beside them by the suite scripts)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_REQUESTS = 500  # the server's loop is bounded


class JSONHandler(BaseHTTPRequestHandler):
    """Answers each POST with ``self.payload()`` (the request's body read and dropped)."""

    def payload(self) -> bytes:
        raise NotImplementedError

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        payload = self.payload()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def bounded_server(handler: type[JSONHandler]) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 for the block (at most :data:`MAX_REQUESTS` requests);
    yields ``host:port``."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)

    def serve() -> None:
        for _ in range(MAX_REQUESTS):
            if getattr(httpd, "stopping", False):
                break
            httpd.handle_request()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.stopping = True
        httpd.server_close()
