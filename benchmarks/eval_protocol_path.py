#!/usr/bin/env python3
"""eval-protocol's ``FireworksV1CompletionsClient.create_completion_from_prompt_ids`` per
response, unpatched and with ``tokenwire.compat.eval_protocol`` (and, for the OpenAI SDK path,
``client.chat.completions.create(...).model_dump()`` then the ids and logprobs, against
``tokenwire.compat.openai.achat_completions``).

A server process on 127.0.0.1 answers each request with a distinct Fireworks-shaped
``/v1/completions`` body of ``max_tokens`` tokens (``logprobs.content[]`` entries with
``token``, ``logprob``, ``sampling_logprob``, ``token_id``, ``bytes``, ``text_offset``,
``top_logprobs``) for eval-protocol's requests, a distinct vLLM chat completion (``token_ids``,
``logprobs.content[]``) for the OpenAI SDK's, chosen by the request's seed; every body is
made before the timing starts. Each (size, contender) runs in a fresh process: one warm-up call, then ``--responses``
distinct responses, each timed twice:

- ``call``: the whole awaited call (request, the loopback HTTP exchange, the parse path);
- ``parse``: the same call with the body already fetched, i.e. what the SDK and eval-protocol
  (or the drop-in) do once the bytes are in: measured by serving the call from an
  ``httpx.MockTransport`` holding the same bytes, which leaves only the SDK's request building
  and the parse path.

Medians are printed as a Markdown table. Run in an environment with eval-protocol installed:

    /work/venvs/eval-protocol/bin/python benchmarks/eval_protocol_path.py --sizes 2048,8192,32768

eval-protocol decodes the ids with a Hugging Face tokenizer; both contenders get the same
stand-in (an empty decode, so the choice's ``text`` is used), which takes no time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from canned_http import fireworks_completion, json_handler, vllm_completion  # noqa: E402 - the tests' helpers

CONTENDERS = ("eval-protocol", "eval-protocol+tokenwire", "openai-sdk", "openai-sdk+tokenwire")


class _Bodies:
    """The distinct bodies of one size: Fireworks completions (eval-protocol's requests) and
    vLLM chat completions with ``return_token_ids`` (the OpenAI SDK's), by the request's seed
    (the prompt's first id; the chat message's text)."""

    def __init__(self, n: int, count: int, kinds: tuple[str, ...] = ("fireworks", "chat")) -> None:
        seeds = range(count + 1)
        self.fireworks = ({s: fireworks_completion(n, seed=s + 1000 * n, prompt_tokens=512) for s in seeds}
                          if "fireworks" in kinds else {})
        self.chat = ({s: vllm_completion(n, seed=s + 1000 * n, chat=True, prompt_tokens=512) for s in seeds}
                     if "chat" in kinds else {})

    def __call__(self, path: str, request: dict) -> bytes:
        if path.endswith("/chat/completions"):
            return self.chat[int(request["messages"][0]["content"])]
        return self.fireworks[request["prompt"][0]]


def serve(n: int, count: int, port_file: str) -> None:
    """The server process: answers each POST with the body of the prompt's first id."""
    from http.server import ThreadingHTTPServer

    bodies = _Bodies(n, count)
    served = [0]
    limit = 4 * (count + 1) * len(CONTENDERS) + 16

    def answer(path: str, sent: bytes) -> tuple[int, bytes]:
        served[0] += 1
        return (200, bodies(path, json.loads(sent))) if served[0] <= limit else (503, b"{}")

    server = ThreadingHTTPServer(("127.0.0.1", 0), json_handler(answer))
    Path(port_file).write_text(str(server.server_address[1]))
    deadline = time.monotonic() + 3600
    server.timeout = 1.0
    while served[0] <= limit and time.monotonic() < deadline:  # bounded: requests and time
        server.handle_request()


def measure(contender: str, n: int, count: int, port: int) -> dict[str, float]:
    """One contender in this (fresh) process: medians in ms of ``call`` and ``parse``."""
    import httpx

    bodies = _Bodies(n, count, ("fireworks",) if contender.startswith("eval-protocol") else ("chat",))

    def transport_for(bodies: _Bodies) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            body = bodies(request.url.path, json.loads(request.content))
            return httpx.Response(200, content=body, headers={"Content-Type": "application/json"})

        return httpx.MockTransport(handler)

    if contender.startswith("eval-protocol"):
        from eval_protocol.integrations.fireworks_v1_completions_client import FireworksV1CompletionsClient

        from tokenwire.compat import eval_protocol as compat

        method = (compat.create_completion_from_prompt_ids if contender.endswith("tokenwire")
                  else compat.original())

        def make(mock: bool):
            client = FireworksV1CompletionsClient(model_id="accounts/fireworks/models/qwen3-8b", api_key="k",
                                                  base_url=f"http://127.0.0.1:{port}/inference/v1",
                                                  max_tokens=n)
            client.decode_token_ids = lambda token_ids: ""
            if mock:
                from fireworks import AsyncFireworks

                client._client = AsyncFireworks(api_key="k", base_url=f"http://127.0.0.1:{port}/inference/v1",
                                                http_client=httpx.AsyncClient(transport=transport_for(bodies)))
            return client

        async def call(client, seed: int) -> int:
            result = await method(client, prompt_token_ids=[seed, 1, 2, 3])
            return len(result["completion_ids"])
    else:
        from openai import AsyncOpenAI

        from tokenwire.compat import openai as tw_openai

        def make(mock: bool):
            http = httpx.AsyncClient(transport=transport_for(bodies)) if mock else None
            return AsyncOpenAI(api_key="k", base_url=f"http://127.0.0.1:{port}/v1", http_client=http)

        async def call(client, seed: int) -> int:
            params = {"model": "m", "messages": [{"role": "user", "content": str(seed)}], "max_tokens": n,
                      "logprobs": True, "extra_body": {"return_token_ids": True}}
            if contender.endswith("tokenwire"):
                response = await tw_openai.achat_completions(client, params)
                return len(response.choices[0].completion_ids)
            # What an SDK user does: the object, then its dump, then the ids and logprobs.
            choice = (await client.chat.completions.create(**params)).model_dump()["choices"][0]
            ids = [int(i) for i in choice["token_ids"]]
            logprobs = [float(e["logprob"]) for e in choice["logprobs"]["content"]]
            assert len(ids) == len(logprobs)
            return len(ids)

    async def run(mock: bool) -> list[float]:
        client = make(mock)
        times = []
        try:
            assert await call(client, count) == n  # warm-up, the one body not timed
            for seed in range(count):
                start = time.perf_counter()
                got = await call(client, seed)
                times.append(time.perf_counter() - start)
                assert got == n
        finally:
            await (client.close() if hasattr(client, "close") else asyncio.sleep(0))
        return times

    call_times = asyncio.run(run(False))
    parse_times = asyncio.run(run(True))
    return {"call": statistics.median(call_times) * 1e3, "parse": statistics.median(parse_times) * 1e3}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2048,8192,32768")
    parser.add_argument("--responses", type=int, default=15)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--serve", nargs=3, metavar=("N", "COUNT", "PORT_FILE"), help=argparse.SUPPRESS)
    parser.add_argument("--measure", nargs=4, metavar=("CONTENDER", "N", "COUNT", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(int(args.serve[0]), int(args.serve[1]), args.serve[2])
        return 0
    if args.measure:
        contender, n, count, port = args.measure
        print(json.dumps(measure(contender, int(n), int(count), int(port))))
        return 0
    import tokenwire

    print(f"tokenwire {tokenwire.__version__} ({tokenwire.implementation}), Python {sys.version.split()[0]}, "
          f"load {os.getloadavg()[0]:.2f}, {time.strftime('%H:%M UTC', time.gmtime())}")
    contenders = args.contenders.split(",")
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        port_file = Path(f"/tmp/tokenwire-ep-bench-{os.getpid()}-{n}.port")
        port_file.unlink(missing_ok=True)
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(n), str(args.responses), str(port_file)])
        try:
            for _ in range(600):
                if port_file.exists() and port_file.read_text():
                    break
                time.sleep(0.1)
            port = port_file.read_text()
            result = {}
            for contender in contenders:
                done = subprocess.run([sys.executable, __file__, "--measure", contender, str(n), str(args.responses),
                                       port], capture_output=True, text=True, timeout=1800)
                if done.returncode:
                    print(done.stderr[-2000:], file=sys.stderr)
                    return 1
                result[contender] = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append((n, result))
            print(n, json.dumps(result), flush=True)
        finally:
            server.terminate()
            server.wait(timeout=10)
            port_file.unlink(missing_ok=True)
    print(f"load {os.getloadavg()[0]:.2f}")
    print("\n| tokens | " + " | ".join(f"{c} call / parse ms" for c in contenders) + " | parse speedup (ep, sdk) |")
    print("|---" * (len(contenders) + 2) + "|")
    for n, result in rows:
        cells = [f"{result[c]['call']:.2f} / {result[c]['parse']:.2f}" for c in contenders]
        ratios = []
        for base in ("eval-protocol", "openai-sdk"):
            if base in result and f"{base}+tokenwire" in result:
                ratios.append(f"{result[base]['parse'] / result[base + '+tokenwire']['parse']:.1f}x")
        print(f"| {n:,} | " + " | ".join(cells) + f" | {', '.join(ratios)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
