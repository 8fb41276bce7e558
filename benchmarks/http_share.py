"""How much of an HTTP round trip tokenwire's parse takes, per sample.

    python benchmarks/http_share.py [--repeat 15] [--gzip-level 9]

Serves the embedded samples with ``examples/serve_samples.py`` (uvicorn, Starlette
``JSONResponse``, ``GZipMiddleware``) in a child process on 127.0.0.1 and fetches each
sample with ``httpx.AsyncClient``, one request in flight, plain and with
``Accept-Encoding: gzip``. Medians over ``--repeat`` requests after two warm-ups:

- ``render``: the server's ``JSONResponse`` serialization (its ``Server-Timing`` header),
- ``http``: request sent to the whole body in hand (render, gzip, loopback transfer, gunzip),
- ``parse``: ``tokenwire.parse_generate_response(body, top_k=sample.top_k)``,
- ``parse share``: parse / (http + parse), the part of the end-to-end time spent parsing.

Needs starlette, uvicorn and httpx (``pip install -e '.[http]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import httpx

import tokenwire
from tokenwire import samples

ROOT = Path(__file__).resolve().parents[1]


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"tokenwire_examples_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def measure(base_url: str, repeat: int) -> list[dict]:
    rows = []
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        for name, sample in samples.SAMPLES.items():
            for encoding in ("identity", "gzip"):
                http, parse, render, wire = [], [], [], 0
                for i in range(repeat + 2):
                    start = time.perf_counter()
                    reply = await client.get(f"/samples/{name}", headers={"Accept-Encoding": encoding})
                    body = reply.content
                    middle = time.perf_counter()
                    tokenwire.parse_generate_response(body, top_k=sample.top_k)
                    end = time.perf_counter()
                    if i >= 2:
                        http.append(middle - start)
                        parse.append(end - middle)
                        render.append(float(reply.headers["server-timing"].split("dur=")[1]) / 1e3)
                        wire = reply.num_bytes_downloaded
                h, p = statistics.median(http), statistics.median(parse)
                rows.append({
                    "sample": name, "encoding": encoding, "body_bytes": len(body), "wire_bytes": wire,
                    "render_s": statistics.median(render), "http_s": h, "parse_s": p, "parse_share": p / (h + p),
                })
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| sample | encoding | body | on the wire | render | http | parse | parse share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['sample']} | {r['encoding']} | {r['body_bytes'] / 1e6:.2f} MB | {r['wire_bytes'] / 1e6:.2f} MB "
            f"| {r['render_s'] * 1e3:.2f} ms | {r['http_s'] * 1e3:.2f} ms | {r['parse_s'] * 1e3:.2f} ms "
            f"| {r['parse_share']:.1%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--gzip-level", type=int, default=9, help="GZipMiddleware compresslevel (Starlette's default: 9)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    serve_samples = _example("serve_samples")
    with serve_samples.serve_in_subprocess(gzip_level=args.gzip_level) as base_url:
        rows = asyncio.run(measure(base_url, args.repeat))
    if args.json:
        print(json.dumps({"implementation": tokenwire.implementation, "gzip_level": args.gzip_level, "rows": rows}, indent=1))
        return
    print(
        f"tokenwire {tokenwire.__version__} ({tokenwire.implementation}), Python {platform.python_version()}, "
        f"uvicorn + Starlette on 127.0.0.1, httpx, gzip level {args.gzip_level}, median of {args.repeat}"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
