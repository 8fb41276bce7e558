"""SGLang /generate items carrying everything a replaying trainer asks for, against
``orjson.loads`` of the same bytes: 16k completion tokens after a 1k-token prompt, the
``[logprob, id, text]`` triples, a sampling mask of about 20 ids per token with its sampling
logprobs, and routing replay of 48 layers x top-8 (int32, base64, one row per position but
the last), laid out as SGLang's tokenizer manager writes them.

    python benchmarks/sglang_replay.py                 # 4 distinct items, 5 processes each way
    python benchmarks/sglang_replay.py --repeats 9

Each contender runs in a fresh process per repeat, the order alternating; a process parses
every item once to warm up, then times 5 rounds over the items (ms per item, median); the
figure is the median of the processes. tokenwire parses with ``routed_experts_shape=(48, 8)``
and ``num_experts=128``: every row checked, every expert id bounded.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pickle
import statistics
import subprocess
import sys
import time

import numpy as np

TOKENS, PROMPT, LAYERS, TOPK, WIDTH, EXPERTS = 16384, 1024, 48, 8, 20, 128


def item(seed: int) -> bytes:
    """One item: distinct ids, masks (the sampled id in each, no repeats), logprobs and routing."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 150_000, TOKENS)
    masks = []
    for t in range(TOKENS):
        row = rng.choice(150_000, WIDTH, replace=False)
        row[rng.integers(0, WIDTH)] = ids[t]
        masks.append(np.unique(row).tolist())
    routing = rng.integers(0, EXPERTS, (PROMPT + TOKENS - 1, LAYERS, TOPK)).astype("<i4")
    meta = {"id": f"r{seed}", "finish_reason": {"type": "length", "length": TOKENS}, "prompt_tokens": PROMPT,
            "completion_tokens": TOKENS, "cached_tokens": 0,
            "output_token_logprobs": [[lp, int(i), None] for lp, i in zip((-rng.exponential(1.0, TOKENS)).tolist(), ids)],
            "output_token_sampling_mask": masks,
            "output_token_sampling_logprobs": (-rng.exponential(0.5, TOKENS)).tolist(),
            "output_token_sampling_mask_length": TOKENS,
            "routed_experts": base64.b64encode(routing.tobytes()).decode()}
    return json.dumps({"text": "x" * 100, "output_ids": ids.tolist(), "meta_info": meta},
                      separators=(",", ":")).encode()


def child(who: str, path: str) -> None:
    with open(path, "rb") as f:
        raws = pickle.load(f)
    if who == "orjson":
        import orjson

        parse = orjson.loads
    else:
        import tokenwire

        def parse(raw: bytes):
            return tokenwire.parse_sglang_generate_response(raw, routed_experts_shape=(LAYERS, TOPK),
                                                            num_experts=EXPERTS)
    for raw in raws:
        parse(raw)
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for raw in raws:
            parse(raw)
        rounds.append((time.perf_counter() - start) / len(raws) * 1000)
    print(json.dumps({"who": who, "ms": statistics.median(rounds)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cache", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tokenwire-sglang-bench"))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    path = os.path.join(args.cache, f"items-{args.items}.pickle")
    if not os.path.exists(path):
        os.makedirs(args.cache, exist_ok=True)
        with open(path + ".tmp", "wb") as f:
            pickle.dump([item(seed) for seed in range(args.items)], f, protocol=5)
        os.replace(path + ".tmp", path)
    with open(path, "rb") as f:
        sizes = [len(raw) for raw in pickle.load(f)]
    figures: dict[str, list[float]] = {"tokenwire": [], "orjson": []}
    for repeat in range(args.repeats):
        for who in (("tokenwire", "orjson") if repeat % 2 == 0 else ("orjson", "tokenwire")):
            done = subprocess.run([sys.executable, __file__, "--child", who, path], capture_output=True, text=True,
                                  check=True)
            figures[who].append(json.loads(done.stdout.strip().splitlines()[-1])["ms"])
    ours, theirs = (statistics.median(figures[w]) for w in ("tokenwire", "orjson"))
    print(f"{len(sizes)} items of {statistics.mean(sizes) / 2**20:.1f} MiB, {args.repeats} processes each; "
          f"load {os.getloadavg()[0]:.2f}")
    for who in figures:
        print(f"  {who:9s} {statistics.median(figures[who]):7.1f} ms per item  ({', '.join(f'{x:.1f}' for x in figures[who])})")
    print(f"  tokenwire / orjson.loads = {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
