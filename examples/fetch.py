"""Fetch responses over HTTP with ``httpx.AsyncClient`` and parse them with tokenwire.

Against ``examples/serve_samples.py`` (or any server with the same routes)::

    python examples/fetch.py http://127.0.0.1:8000 --concurrency 64 --gzip

It asks ``GET /samples`` for the names and each sample's ``top_k``, fetches every sample
``--repeat`` times with at most ``--concurrency`` requests in flight, parses each body with
``tokenwire.parse_generate_response`` and prints one line per sample.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass

import httpx

import tokenwire


@dataclass
class Fetched:
    name: str
    content: bytes  # the body after any Content-Encoding is undone
    wire_bytes: int  # bytes read off the connection (compressed when gzip was used)
    headers: httpx.Headers
    http_seconds: float  # request sent to last body byte decoded
    parse_seconds: float
    response: tokenwire.GenerateResponse


async def listing(client: httpx.AsyncClient) -> dict[str, int | None]:
    """``{name: top_k}`` as the server lists them."""
    reply = await client.get("/samples")
    reply.raise_for_status()
    return {name: info["top_k"] for name, info in reply.json().items()}


async def fetch(
    client: httpx.AsyncClient, name: str, top_k: int | None, *, gzip: bool = False, chunked: bool = False
) -> Fetched:
    """One request and its parse. ``gzip`` asks for ``Accept-Encoding: gzip`` (else
    ``identity``); ``chunked`` takes the streamed route and reads the body piece by piece."""
    path = f"/{'chunked' if chunked else 'samples'}/{name}"
    headers = {"Accept-Encoding": "gzip" if gzip else "identity"}
    start = time.perf_counter()
    if chunked:
        async with client.stream("GET", path, headers=headers) as reply:
            reply.raise_for_status()
            content = b"".join([piece async for piece in reply.aiter_bytes()])
    else:
        reply = await client.get(path, headers=headers)
        reply.raise_for_status()
        content = reply.content
    http_seconds = time.perf_counter() - start
    start = time.perf_counter()
    parsed = tokenwire.parse_generate_response(content, top_k=top_k)
    parse_seconds = time.perf_counter() - start
    return Fetched(name, content, reply.num_bytes_downloaded, reply.headers, http_seconds, parse_seconds, parsed)


def client(base_url: str, *, concurrency: int = 64, timeout: float = 60.0) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout)


async def fetch_many(
    base_url: str, jobs: list[tuple[str, bool, bool]], *, concurrency: int = 64
) -> list[Fetched]:
    """Run ``(name, gzip, chunked)`` jobs with at most ``concurrency`` in flight, in order."""
    async with client(base_url, concurrency=concurrency) as http:
        top_k = await listing(http)
        gate = asyncio.Semaphore(concurrency)

        async def one(name: str, gzip: bool, chunked: bool) -> Fetched:
            async with gate:
                return await fetch(http, name, top_k[name], gzip=gzip, chunked=chunked)

        return await asyncio.gather(*(one(*job) for job in jobs))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base_url", nargs="?", default="http://127.0.0.1:8000")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--gzip", action="store_true", help="send Accept-Encoding: gzip")
    parser.add_argument("--chunked", action="store_true", help="use the streamed routes")
    args = parser.parse_args(argv)

    async def run() -> None:
        async with client(args.base_url) as http:
            names = list(await listing(http))
        jobs = [(name, args.gzip, args.chunked) for _ in range(args.repeat) for name in names]
        start = time.perf_counter()
        results = await fetch_many(args.base_url, jobs, concurrency=args.concurrency)
        wall = time.perf_counter() - start
        print(f"{len(results)} responses in {wall:.2f} s (tokenwire {tokenwire.implementation})")
        for name in names:
            mine = [r for r in results if r.name == name]
            tokens = sum(len(c.completion_ids) for c in mine[0].response.choices)
            print(
                f"{name:18} {tokens:6d} tokens  {len(mine[0].content) / 1e6:6.2f} MB body  "
                f"{mine[0].wire_bytes / 1e6:6.2f} MB wire  "
                f"http {statistics.median(r.http_seconds for r in mine) * 1e3:8.1f} ms  "
                f"parse {statistics.median(r.parse_seconds for r in mine) * 1e3:7.1f} ms"
            )

    asyncio.run(run())


if __name__ == "__main__":
    main()
