"""A 16k-token vLLM /inference/v1/generate stream read whole and piece by piece, against the
loop a user writes (split the events, orjson.loads each, concatenate the lists).

    python benchmarks/streams.py [--tokens 16384] [--processes 3] [--streams 5]

Contenders: the user loop; ``parse_generate_stream`` and ``StreamReader`` fed 4 KiB pieces
(with the compiled core: the events read by its scan, csrc/wire/tw_sse.c); the same reader
with the scan turned off, its events read by read/_stream.py (how every stream was read
before the scan).

Each (contender, events-per-token) pair runs in fresh processes; each process builds
``--streams`` distinct streams (the layout of vLLM's serve_tokens_stream_generator: one chunk
per step with its delta token ids and logprobs.content records, the prompt ids on the first
chunk, a usage-only chunk, data: [DONE]), times each once after a warm-up, and prints its
median in ms. The table gives the median of the processes' medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONTENDERS = ("user loop", "parse_generate_stream", "StreamReader, 4 KiB pieces",
              "parse_generate_stream, Python reassembly")


def build(tokens: int, per: int, seed: int, k: int) -> bytes:
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 151_000, size=tokens).tolist()
    lps = (-np.abs(rng.standard_normal(tokens)) * 2).tolist()
    prompt = rng.integers(0, 151_000, size=512).tolist()
    out = []
    for a in range(0, tokens, per):
        b = min(a + per, tokens)
        content = [{"token": f"token_id:{ids[t]}", "logprob": lps[t], "bytes": None,
                    "top_logprobs": [{"token": f"token_id:{ids[t]}", "logprob": lps[t], "bytes": None}
                                     for _ in range(max(k, 1))]} for t in range(a, b)]
        choice = {"index": 0, "logprobs": {"content": content}, "finish_reason": "stop" if b == tokens else None,
                  "token_ids": ids[a:b], "routed_experts": None}
        chunk = {"request_id": f"gen-{seed}", "choices": [choice]}
        if a == 0:
            chunk["prompt_token_ids"] = prompt
        chunk["usage"] = None
        out.append(f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n")
    usage = {"prompt_tokens": 512, "total_tokens": 512 + tokens, "completion_tokens": tokens}
    out.append(f"data: {json.dumps({'request_id': f'gen-{seed}', 'choices': [], 'usage': usage}, separators=(',', ':'))}\n\n")
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def user_loop(body: bytes) -> tuple[list[int], list[float]]:
    import orjson

    ids: list[int] = []
    records: list = []
    for event in body.split(b"\n\n"):
        if not event.startswith(b"data: ") or event == b"data: [DONE]":
            continue
        chunk = orjson.loads(event[6:])
        for choice in chunk["choices"]:
            ids += choice["token_ids"]
            records += choice["logprobs"]["content"]
    return ids, [r["logprob"] for r in records]


def one_process(contender: str, tokens: int, per: int, streams: int, k: int) -> float:
    import tokenwire

    bodies = [build(tokens, per, seed, k) for seed in range(streams + 1)]
    if contender == "user loop":
        run = user_loop
    elif contender == "parse_generate_stream":
        run = tokenwire.parse_generate_stream
    elif contender == "StreamReader, 4 KiB pieces":
        def run(body: bytes):
            reader = tokenwire.StreamReader("generate")
            for i in range(0, len(body), 4096):
                reader.feed(body[i:i + 4096])
            return reader.result()
    else:  # the reader without the compiled scan: the events read by read/_stream.py (as before the scan)
        def run(body: bytes):
            reader = tokenwire.StreamReader("generate")
            reader._scan = None
            reader.feed(body)
            return reader.result()
    run(bodies[0])  # warm-up
    times = []
    for body in bodies[1:]:
        t = time.perf_counter()
        run(body)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--streams", type=int, default=5)
    p.add_argument("--k", type=int, default=0, help="the request's logprobs (head candidates per record)")
    p.add_argument("--child", nargs=2)
    p.add_argument("--per", type=int, nargs="*", default=[1, 16])
    a = p.parse_args()
    if a.child:
        print(one_process(a.child[0], a.tokens, int(a.child[1]), a.streams, a.k))
        return
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"| events | contender | ms | processes | / user loop |\n|---|---|---|---|---|")
    for per in a.per:
        base = None
        for contender in CONTENDERS:
            runs = [float(subprocess.run([sys.executable, __file__, "--child", contender, str(per), "--tokens",
                                          str(a.tokens), "--streams", str(a.streams), "--k", str(a.k)],
                                         check=True, capture_output=True, text=True).stdout)
                    for _ in range(a.processes)]
            median = statistics.median(runs)
            base = median if base is None else base
            label = "1 per token" if per == 1 else f"1 per {per} tokens"
            print(f"| {label} | {contender} | {median:.2f} | {', '.join(f'{r:.2f}' for r in runs)} | "
                  f"{median / base:.2f} |", flush=True)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
