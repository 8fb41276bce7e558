#!/usr/bin/env python3
"""The parse path of verifiers' train client and of TRL's vLLM client, unpatched and patched
with their tokenwire drop-ins, on 2k-32k-token responses: per response, the median of distinct
responses, each (framework, mode, size) in a fresh process.

    python benchmarks/compat_frameworks.py --python-verifiers V/bin/python --python-trl T/bin/python

What is timed, from the response's bytes to what the framework hands its caller:

- verifiers 0.4.0 (renderers 0.1.12): ``renderers.client.generate`` (looked up per call, as
  verifiers' train client does) with prompt ids given and a client whose ``post`` answers the
  body (no socket), then ``verifiers.v1.clients.train.response_from_generate``; the renderer's
  own decoding of the completion (``parse_response``) is a stub. vLLM's native records
  (``"token_id:N"`` tokens), a sampling mask of 4 ids per token, and MoE routing of 48 layers
  x top-8 (uint8, one row per prompt and completion token but the last, 512 prompt tokens).
  ``verifiers-records``: the same without the mask and the routing (vLLM's records alone).
- TRL 1.16.0: ``VLLMClient.generate(prompts, logprobs=0)`` with the session's ``post``
  answering a ``requests.Response`` holding the body (no socket; ``response.json()``, TRL's
  indexing and ``parse_logprobs`` all run), one prompt, one completion: vLLM's
  ``/v1/completions`` body with ``return_token_ids`` and ``return_tokens_as_token_ids``.

Each process builds its responses first (distinct seeds), then times one call per response, and
counts the minor page faults of each call (``getrusage``'s ``ru_minflt``); the table gives the
median time, and the faults of the process's first call with the median of the others.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

SIZES = (2048, 4096, 8192, 16384, 32768)
PROMPT = 512


def _ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(3, 150_000) for _ in range(n)]


def verifiers_body(n: int, seed: int, extras: bool = True) -> bytes:
    rng = random.Random(seed)
    ids = _ids(rng, n)
    rows = PROMPT + n - 1
    routing = bytes(rng.randrange(64) for _ in range(min(rows * 48 * 8, 1 << 16)))
    routing = (routing * (rows * 48 * 8 // len(routing) + 1))[: rows * 48 * 8]
    choice = {
        "index": 0, "token_ids": ids,
        "logprobs": {"content": [{"token": f"token_id:{i}", "logprob": -rng.random() * 5} for i in ids]},
        "finish_reason": "length",
        "sampling_mask": [sorted({i, *(rng.randrange(3, 150_000) for _ in range(3))}) for i in ids],
        "routed_experts": {"data": base64.b64encode(routing).decode(), "shape": [rows, 48, 8], "start": 0},
    }
    if not extras:
        del choice["sampling_mask"], choice["routed_experts"]
    return json.dumps({"request_id": f"gen-{seed}", "choices": [choice]}, separators=(",", ":")).encode()


def trl_body(n: int, seed: int) -> bytes:
    rng = random.Random(seed)
    ids = _ids(rng, n)
    lps = [-rng.random() * 5 for _ in ids]
    choice = {
        "index": 0, "text": "", "prompt_token_ids": _ids(rng, PROMPT), "token_ids": ids,
        "logprobs": {"text_offset": list(range(n)), "token_logprobs": lps, "tokens": [f"token_id:{i}" for i in ids],
                     "top_logprobs": [{f"token_id:{i}": lp} for i, lp in zip(ids, lps)]},
        "finish_reason": "length", "stop_reason": None,
    }
    document = {"id": f"cmpl-{seed}", "object": "text_completion", "created": 0, "model": "m", "choices": [choice],
                "usage": {"prompt_tokens": PROMPT, "completion_tokens": n, "total_tokens": PROMPT + n}}
    return json.dumps(document, separators=(",", ":")).encode()


def verifiers_call() -> Any:
    import asyncio

    import renderers.client as client
    from renderers.base import ParsedResponse
    from verifiers.v1.clients import train

    prompt = list(range(PROMPT))

    class Renderer:  # what generate() asks of a renderer once the prompt ids are given
        def get_stop_token_ids(self) -> list[int]:
            return [2]

        def parse_response(self, completion_ids: list[int], **_: Any) -> Any:
            return ParsedResponse(content="", reasoning_content=None, tool_calls=[])

    class Client:  # the AsyncOpenAI client's post, answering the body (no socket)
        base_url = "http://127.0.0.1:1/v1"
        body = b""

        async def post(self, endpoint: str, **_: Any) -> Any:
            return type("Raw", (), {"content": self.body})()

    fake, renderer = Client(), Renderer()
    loop = asyncio.new_event_loop()

    def call(raw: bytes) -> Any:
        fake.body = raw
        result = loop.run_until_complete(client.generate(  # looked up per call, as verifiers does
            client=fake, renderer=renderer, messages=[], model="m", prompt_ids=prompt, max_prompt_len=1 << 30))
        return train.response_from_generate(result, "m")

    return call


def trl_call() -> Any:
    import requests
    from trl.generation import vllm_client

    class Session:
        body = b""

        def post(self, url: str, **kwargs: Any) -> requests.Response:
            response = requests.Response()
            response.status_code, response._content = 200, self.body
            response.encoding = "utf-8"
            return response

    client = object.__new__(vllm_client.VLLMClient)
    client.session, client.base_url, client.model = Session(), "http://127.0.0.1:1", "m"

    def call(raw: bytes) -> Any:
        client.session.body = raw
        return client.generate([[1, 2, 3]], n=1, logprobs=0)

    return call


def measure(framework: str, mode: str, n: int, runs: int) -> dict[str, Any]:
    module = framework.split("-")[0]  # verifiers-records: the records alone, no mask or routing
    if module == "verifiers":
        bodies = [verifiers_body(n, seed, framework == "verifiers") for seed in range(runs)]
    else:
        bodies = [trl_body(n, seed) for seed in range(runs)]
    call = (verifiers_call if module == "verifiers" else trl_call)()
    if mode == "patched":
        import importlib

        importlib.import_module(f"tokenwire.compat.{module}").patch()
    times, faults = [], []
    for raw in bodies:
        gc.collect()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        result = call(raw)
        times.append(time.perf_counter() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        del result
    return {"framework": framework, "mode": mode, "tokens": n, "bytes": len(bodies[0]),
            "median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3, "runs": runs,
            "minflt": statistics.median(faults[1:]), "minflt_first": faults[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python-verifiers", help="interpreter with verifiers 0.4.0 and tokenwire")
    parser.add_argument("--python-trl", help="interpreter with TRL 1.16.0 and tokenwire")
    parser.add_argument("--runs", type=int, default=15, help="distinct responses per process")
    parser.add_argument("--only", help="one of verifiers, verifiers-records, trl")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="token counts, comma-separated")
    parser.add_argument("--one", nargs=3, metavar=("FRAMEWORK", "MODE", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        framework, mode, tokens = args.one
        print(json.dumps(measure(framework, mode, int(tokens), args.runs)))
        return 0
    print(f"# {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}; {args.runs} distinct responses per process, medians")
    print("| framework | tokens | body | unpatched | patched | speedup | minor faults, first (median): unpatched "
          "| patched |")
    print("|---|---|---|---|---|---|---|---|")
    for framework, python in (("verifiers", args.python_verifiers), ("verifiers-records", args.python_verifiers),
                              ("trl", args.python_trl)):
        if not python or (args.only and framework != args.only):
            continue
        for n in map(int, args.sizes.split(",")):
            got = {}
            for mode in ("unpatched", "patched"):
                done = subprocess.run([python, __file__, "--one", framework, mode, str(n), "--runs", str(args.runs)],
                                      capture_output=True, text=True, check=True, timeout=1800)
                got[mode] = json.loads(done.stdout.strip().splitlines()[-1])
            u, p = got["unpatched"]["median_ms"], got["patched"]["median_ms"]
            print(f"| {framework} | {n} | {got['patched']['bytes'] / 1e6:.2f} MB | {u:.1f} ms | {p:.1f} ms | "
                  f"{u / p:.1f}x | {got['unpatched']['minflt_first']} ({got['unpatched']['minflt']:.0f}) | "
                  f"{got['patched']['minflt_first']} ({got['patched']['minflt']:.0f}) |", flush=True)
    print(f"# load after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
