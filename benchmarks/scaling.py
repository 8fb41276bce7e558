"""Peak memory on a large MoE response, and throughput with two threads.

    python benchmarks/scaling.py [--tokens 350000]

Peak memory is the growth of the process's peak RSS (VmHWM, reset through
/proc/self/clear_refs) while one call runs, after the response bytes exist; Linux only.
"""

from __future__ import annotations

import argparse
import gc
import threading
import time

import orjson

import tokenwire
from tokenwire import samples


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def peak_growth(fn) -> tuple[int, object]:
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak RSS to the current RSS
    before = _status("VmRSS")
    result = fn()
    return _status("VmHWM") - before, result


def moe_response(tokens: int) -> bytes:
    return samples.moe_response(tokens, 8192, seed=5)


def threads(raw: bytes, count: int, seconds: float = 2.0) -> float:
    """Parses per second with ``count`` threads parsing the same bytes."""
    done = [0] * count
    stop = time.perf_counter() + seconds

    def work(i: int) -> None:
        while time.perf_counter() < stop:
            tokenwire.parse_generate_response(raw)
            done[i] += 1

    pool = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(done) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=350_000)
    args = parser.parse_args()
    raw = moe_response(args.tokens)
    grown, response = peak_growth(lambda: tokenwire.parse_generate_response(raw))
    choice = response.choices[0]
    decoded = choice.routed_experts.array.nbytes + choice.completion_logprobs.nbytes
    decoded += choice.completion_ids.nbytes + response.prompt_token_ids.nbytes
    del response, choice
    orjson_grown, doc = peak_growth(lambda: orjson.loads(raw))
    del doc
    print(f"response: {len(raw) / 2**20:.1f} MiB, {args.tokens} tokens, implementation={tokenwire.implementation}")
    print(f"tokenwire peak growth: {grown / 2**20:.1f} MiB; decoded arrays {decoded / 2**20:.1f} MiB; "
          f"overhead beyond the arrays {(grown - decoded) / 2**20:.1f} MiB = {(grown - decoded) / len(raw):.1%} of the input")
    print(f"orjson.loads peak growth: {orjson_grown / 2**20:.1f} MiB")
    small = samples.sample("moe_16k")
    one, two = threads(small, 1), threads(small, 2)
    print(f"moe_16k parses/s: 1 thread {one:.0f}, 2 threads {two:.0f}: {two / one:.2f}x")


if __name__ == "__main__":
    main()
