"""What the framework parse benchmarks (areal_parse.py, nemo_gym_parse.py, skyrl_parse.py)
share: a server on 127.0.0.1 answering ``POST /<n>`` with the n-th body (a bounded loop, one
request per body), the timed rounds over aiohttp (:func:`time_rounds`) with the minor page
faults of each timed span (:func:`faults`), and the ``--all`` table of fresh processes per
(workload, tokens, mode)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


SIZES = (2048, 8192, 16384, 32768)  # the completion lengths of the framework benchmarks' tables


def faults() -> int:
    """The process's minor page faults so far (``getrusage``'s ``ru_minflt``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def clock(variable: str) -> Callable[[], float]:
    """The clock of a benchmark's rounds: the wall clock, or the thread's CPU time when the
    environment variable ``variable`` is ``cpu``."""
    return time.thread_time if os.environ.get(variable) == "cpu" else time.perf_counter


def serve(bodies: list[bytes]) -> tuple[ThreadingHTTPServer, str]:
    """A server handing out ``bodies`` (one request each), and its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            n = int(self.path.rsplit("/", 1)[-1])
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(bodies[n])))
            self.end_headers()
            self.wfile.write(bodies[n])

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=lambda: [httpd.handle_request() for _ in bodies], daemon=True)
    thread.start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


class Preread:
    """An aiohttp session whose ``post`` gives back a response already read, so that the timed
    span holds no transfer: what a framework's request helper enters and reads."""

    closed = False

    def __init__(self, response: Any) -> None:
        self.response = response

    def post(self, *args: Any, **kwargs: Any) -> Any:
        response = self.response

        class Request:
            async def __aenter__(self) -> Any:
                return response

            async def __aexit__(self, *exc: Any) -> None:
                return None

        return Request()


def time_rounds(server: tuple[ThreadingHTTPServer, str], rounds: int, parse: Callable[[Any], Awaitable[object]],
                clock: Callable[[], float] = time.perf_counter) -> list[tuple[float, int]]:
    """(seconds, minor faults) of ``await parse(resp)`` for each of ``rounds`` responses of the
    ``server`` that :func:`serve` made (``POST <url>/<n>``; closed at the end), the body read
    before the clock starts and a collection run before it. What ``parse`` returns is held
    until the clock stops, so that freeing it is not timed. ``clock``: the wall clock, or a
    thread's CPU time."""
    import aiohttp

    httpd, url = server

    async def go() -> list[tuple[float, int]]:
        times = []
        async with aiohttp.ClientSession() as session:
            for n in range(rounds):
                async with session.post(f"{url}/{n}", json={}) as resp:
                    await resp.read()  # the body arrives before the clock starts
                    gc.collect()
                    before = faults()
                    start = clock()
                    out = await parse(resp)
                    times.append((clock() - start, faults() - before))
                    del out
        return times

    try:
        return asyncio.run(go())
    finally:
        httpd.server_close()


def table(script: str, framework: str, sizes: dict[str, Iterable[int]], rounds: int) -> None:
    """Print the table: ``script --tokens T --mode M --workload W --rounds R`` in a new process
    per cell, modes unpatched, patched and native (tokenwire's reader alone)."""
    print(f"| workload | tokens | {framework}: median (min) ms | patched: median (min) ms | speedup, median (min) "
          "| tokenwire's reader: median (min) ms | minor faults per parse, first (median): unpatched / patched / "
          "reader |")
    print("|---|---|---|---|---|---|---|")
    for workload, tokens_list in sizes.items():
        for tokens in tokens_list:
            row = {}
            for mode in ("unpatched", "patched", "native"):
                out = subprocess.run([sys.executable, script, "--tokens", str(tokens), "--mode", mode,
                                      "--workload", workload, "--rounds", str(rounds)],
                                     capture_output=True, text=True, check=True)
                row[mode] = json.loads(out.stdout.strip().splitlines()[-1])
            u, p, n = row["unpatched"], row["patched"], row["native"]
            faults = " / ".join(f"{r['minflt_first']} ({r['minflt']:.0f})" for r in (u, p, n))
            print(f"| {workload} | {tokens} | {u['median_ms']:.1f} ({u['min_ms']:.1f}) | "
                  f"{p['median_ms']:.1f} ({p['min_ms']:.1f}) | {u['median_ms'] / p['median_ms']:.1f}x "
                  f"({u['min_ms'] / p['min_ms']:.1f}x) | {n['median_ms']:.1f} ({n['min_ms']:.1f}) | {faults} |", flush=True)


def main(doc: str, script: str, framework: str, measure: Callable[[int, str, str, int], list[tuple[float, int]]],
         sizes: dict[str, Iterable[int]]) -> int:
    """The benchmark's command line: one cell (``--tokens``, ``--mode``, ``--workload``; the
    median, minimum and maximum in ms and the median minor page faults as JSON, the first two
    rounds left out as warm-up, and the faults of the first round, the process's first parse;
    ``measure`` gives (seconds, faults) per round) or,
    with ``--all``, the table of every cell in fresh processes."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--mode", choices=("unpatched", "patched", "native"), default="patched")
    parser.add_argument("--workload", choices=tuple(sizes), default=next(iter(sizes)))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--all", action="store_true", help="every size, mode and workload, fresh processes")
    args = parser.parse_args()
    if args.all:
        table(script, framework, sizes, args.rounds)
        return 0
    every = measure(args.tokens, args.mode, args.workload, args.rounds)  # (seconds, minor faults)
    samples = every[2:]
    times = [t for t, _ in samples]
    print(json.dumps({"median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3,
                      "max_ms": max(times) * 1e3, "n": len(times),
                      "minflt": statistics.median(f for _, f in samples), "minflt_first": every[0][1]}))
    return 0
