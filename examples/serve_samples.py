"""Serve tokenwire's embedded sample responses over HTTP, serialized as vLLM serializes them.

vLLM's ``/inference/v1/generate`` handler returns ``JSONResponse(content=...)``, so the bytes
on the wire are Starlette's ``json.dumps`` of the response document. This app does the same:
each sample is decoded once into a document at startup and rendered by ``JSONResponse`` on
every request, so a client reads what the server's serializer wrote, not stored bytes.

Routes (one pair per sample in ``tokenwire.samples.SAMPLES``):

- ``GET /samples``: ``{name: {"top_k": ..., "description": ...}}``
- ``GET /samples/{name}``: ``JSONResponse(document)``, sent with a ``Content-Length``
- ``GET /chunked/{name}``: the same rendered bytes streamed in 64 KiB pieces
  (``Transfer-Encoding: chunked``)

``GZipMiddleware`` compresses either when the request sends ``Accept-Encoding: gzip``.
Every response carries ``Server-Timing: render;dur=<ms>``, the time ``JSONResponse`` took.

Run it::

    python examples/serve_samples.py --port 8000
    python examples/fetch.py http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tokenwire import samples

CHUNK = 64 * 1024


def _render(document: Any) -> tuple[JSONResponse, float]:
    start = time.perf_counter()
    response = JSONResponse(document)
    return response, (time.perf_counter() - start) * 1e3


def _timing(ms: float) -> dict[str, str]:
    return {"server-timing": f"render;dur={ms:.3f}"}


def create_app(*, gzip_level: int = 9, names: list[str] | None = None) -> Starlette:
    """The app; ``gzip_level`` is GZipMiddleware's ``compresslevel`` (Starlette's default is 9)."""
    names = list(samples.SAMPLES) if names is None else names
    documents: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for name in names:  # build and decode every sample before the first request
            documents[name] = json.loads(samples.sample(name))
        yield

    async def listing(request: Request) -> Response:
        return JSONResponse(
            {n: {"top_k": samples.SAMPLES[n].top_k, "description": samples.SAMPLES[n].description} for n in names}
        )

    def whole(name: str):
        async def endpoint(request: Request) -> Response:
            response, ms = _render(documents[name])
            response.headers.update(_timing(ms))
            return response

        return endpoint

    def chunked(name: str):
        async def endpoint(request: Request) -> Response:
            rendered, ms = _render(documents[name])
            body = rendered.body

            async def pieces() -> AsyncIterator[bytes]:
                view = memoryview(body)
                for offset in range(0, len(view), CHUNK):
                    yield bytes(view[offset : offset + CHUNK])

            return StreamingResponse(pieces(), media_type=rendered.media_type, headers=_timing(ms))

        return endpoint

    routes = [Route("/samples", listing)]
    for name in names:
        routes.append(Route(f"/samples/{name}", whole(name)))
        routes.append(Route(f"/chunked/{name}", chunked(name)))
    return Starlette(
        routes=routes,
        middleware=[Middleware(GZipMiddleware, minimum_size=1000, compresslevel=gzip_level)],
        lifespan=lifespan,
    )


def serve(sock: socket.socket, *, gzip_level: int = 9, log_level: str = "warning") -> None:
    """Serve the app with uvicorn on an already listening socket until SIGINT/SIGTERM."""
    import uvicorn

    config = uvicorn.Config(create_app(gzip_level=gzip_level), log_level=log_level, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


@contextlib.contextmanager
def serve_in_subprocess(*, gzip_level: int = 9, timeout: float = 60.0) -> Iterator[str]:
    """Run this script in a child process on 127.0.0.1 with an OS-chosen port; yields the base
    URL once the server answers, and stops the child (SIGTERM, then SIGKILL) on exit."""
    import httpx

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--fd", str(sock.fileno()), "--gzip-level", str(gzip_level)],
        pass_fds=[sock.fileno()],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    sock.close()  # the child holds its own copy
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if child.poll() is not None:
                raise RuntimeError(f"the server exited with {child.returncode}: {child.stderr.read().decode()}")
            try:  # the socket already listens, so this waits in its backlog until the app starts
                httpx.get(f"{base}/samples", timeout=max(0.1, min(5.0, deadline - time.monotonic())))
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not answer within {timeout} s") from None
                time.sleep(0.05)
        yield base
    finally:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)
        child.stderr.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0: let the OS choose (the port is printed)")
    parser.add_argument("--fd", type=int, help="serve on this inherited, listening socket instead")
    parser.add_argument("--gzip-level", type=int, default=9, help="GZipMiddleware compresslevel (default 9)")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    if args.fd is not None:
        sock = socket.socket(fileno=args.fd)
    else:
        sock = socket.create_server((args.host, args.port), backlog=128)
        host, port = sock.getsockname()[:2]
        print(f"serving {len(samples.SAMPLES)} samples on http://{host}:{port}", flush=True)
    serve(sock, gzip_level=args.gzip_level, log_level=args.log_level)


if __name__ == "__main__":
    main()
