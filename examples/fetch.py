"""Fetch responses over HTTP with ``httpx.AsyncClient`` and parse them with tokenwire.

Against ``examples/serve_samples.py`` (or any server with the same routes)::

    python examples/fetch.py http://127.0.0.1:8000 --concurrency 64 --gzip

It asks ``GET /samples`` for the names and each sample's ``top_k``, fetches every sample
``--repeat`` times with at most ``--concurrency`` requests in flight, then takes the batch
path a trainer takes: the bodies of each sample parsed together on threads off the event loop
(``await tokenwire.aparse_many``), their choices collated into padded tensors
(``tokenwire.collate(...).to_torch()``, when torch is installed), and prints one line per sample.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
    response: tokenwire.GenerateResponse | None = None  # the parse (parse_all)


async def listing(client: httpx.AsyncClient) -> dict[str, int | None]:
    """``{name: top_k}`` as the server lists them."""
    reply = await client.get("/samples")
    reply.raise_for_status()
    return {name: info["top_k"] for name, info in reply.json().items()}


async def fetch(
    client: httpx.AsyncClient, name: str, top_k: int | None, *, gzip: bool = False, chunked: bool = False
) -> Fetched:
    """One request. ``gzip`` asks for ``Accept-Encoding: gzip`` (else ``identity``);
    ``chunked`` takes the streamed route and reads the body piece by piece."""
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
    return Fetched(name, content, reply.num_bytes_downloaded, reply.headers, http_seconds)


async def parse_all(fetched: list[Fetched], top_k: dict[str, int | None]) -> dict[str, float]:
    """Parse the bodies, those of each sample in one batch with its ``top_k``, on threads off
    the event loop; sets each ``response``. Returns each sample's batch parse time."""
    seconds = {}
    for name in dict.fromkeys(f.name for f in fetched):
        mine = [f for f in fetched if f.name == name]
        start = time.perf_counter()
        parsed = await tokenwire.aparse_many([f.content for f in mine], top_k=top_k[name])
        seconds[name] = time.perf_counter() - start
        for f, response in zip(mine, parsed):
            f.response = response
    return seconds


def client(base_url: str, *, concurrency: int = 64, timeout: float = 60.0) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout)


async def fetch_all(
    base_url: str, jobs: list[tuple[str, bool, bool]], *, concurrency: int = 64
) -> tuple[list[Fetched], dict[str, int | None]]:
    """Run ``(name, gzip, chunked)`` jobs with at most ``concurrency`` in flight, in order;
    the bodies and each sample's ``top_k``."""
    async with client(base_url, concurrency=concurrency) as http:
        top_k = await listing(http)
        gate = asyncio.Semaphore(concurrency)

        async def one(name: str, gzip: bool, chunked: bool) -> Fetched:
            async with gate:
                return await fetch(http, name, top_k[name], gzip=gzip, chunked=chunked)

        return list(await asyncio.gather(*(one(*job) for job in jobs))), top_k


async def fetch_many(
    base_url: str, jobs: list[tuple[str, bool, bool]], *, concurrency: int = 64
) -> list[Fetched]:
    """:func:`fetch_all`, then every body parsed (:func:`parse_all`)."""
    fetched, top_k = await fetch_all(base_url, jobs, concurrency=concurrency)
    await parse_all(fetched, top_k)
    return fetched


def tensors(fetched: list[Fetched]) -> dict[str, object]:
    """The parsed choices as one padded batch: torch tensors when torch is installed (no
    copy), else the numpy arrays."""
    batch = tokenwire.collate([f.response for f in fetched])
    try:
        return batch.to_torch()
    except ImportError:
        return batch.arrays()


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
        results, top_k = await fetch_all(args.base_url, jobs, concurrency=args.concurrency)
        http_wall = time.perf_counter() - start
        parse_seconds = await parse_all(results, top_k)
        print(f"{len(results)} responses in {http_wall:.2f} s, parsed in {sum(parse_seconds.values()):.2f} s "
              f"(tokenwire {tokenwire.implementation})")
        with contextlib.suppress(ImportError):
            import torch  # noqa: F401  (loaded before the first batch is timed)
        for name in names:
            mine = [r for r in results if r.name == name]
            start = time.perf_counter()
            batch = tensors(mine)
            collate_seconds = time.perf_counter() - start
            tokens = sum(len(c.completion_ids) for c in mine[0].response.choices)
            shapes = " ".join(f"{key}{list(batch[key].shape)}" for key in ("completion_ids", "completion_top_ids",
                                                                            "routed_experts")
                              if batch.get(key) is not None)  # to_torch keys every field, None if absent
            print(
                f"{name:18} {tokens:6d} tokens  {len(mine[0].content) / 1e6:6.2f} MB body  "
                f"{mine[0].wire_bytes / 1e6:6.2f} MB wire  "
                f"http {statistics.median(r.http_seconds for r in mine) * 1e3:8.1f} ms  "
                f"parse {parse_seconds[name] / len(mine) * 1e3:7.1f} ms  "
                f"collate {collate_seconds * 1e3:6.1f} ms  {shapes}"
            )

    asyncio.run(run())


if __name__ == "__main__":
    main()
