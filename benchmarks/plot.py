"""Throughput against payload size on MoE responses: tokenwire, orjson.loads and the reference.

    pip install matplotlib && python benchmarks/plot.py [--max-tokens 131072] [--output benchmarks/throughput.png]

Each response is a vLLM ``/inference/v1/generate`` answer made with ``tokenwire.samples``:
a quarter of the tokens are completion (packed float32 logprobs), the rest prompt, and every
token but the last carries routing replay (48 layers x top-8 uint8 experts). Throughput is the
response size over the fastest of repeated calls (~0.5 s of them, at least 3): the least
disturbed by whatever else the machine runs.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import orjson

import tokenwire
from tokenwire import samples
from tokenwire.rules import generate as python_rules

HERE = Path(__file__).resolve().parent


def moe_response(tokens: int) -> bytes:
    return samples.moe_response(tokens, max(tokens // 4, 1), seed=7)


def best_seconds(fn, budget: float = 0.5) -> float:
    times: list[float] = []
    while len(times) < 3 or (sum(times) < budget and len(times) < 200):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(max_tokens: int) -> list[dict[str, float]]:
    contenders = {
        "tokenwire": tokenwire.parse_generate_response,
        "orjson.loads": orjson.loads,
        "reference (pure Python)": python_rules.parse_generate_response,
    }
    rows = []
    tokens = 1024
    while tokens <= max_tokens:
        raw = moe_response(tokens)
        row = {"tokens": tokens, "bytes": len(raw)}
        for name, fn in contenders.items():
            row[name] = len(raw) / best_seconds(lambda: fn(raw)) / 1e6
        rows.append(row)
        print(f"{tokens:>7} tokens {len(raw) / 1e6:>8.2f} MB  "
              + "  ".join(f"{name} {row[name]:>8.0f} MB/s" for name in contenders), flush=True)
        del raw
        tokens *= 2
    return rows


def plot(rows: list[dict[str, float]], output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    sizes = [r["bytes"] / 1e6 for r in rows]
    for name, style in (("tokenwire", "o-"), ("orjson.loads", "s--"), ("reference (pure Python)", "^:")):
        ax.plot(sizes, [r[name] for r in rows], style, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("response size (MB)")
    ax.set_ylabel("throughput (MB/s, higher is better)")
    simd = tokenwire.simd_path() or "none"
    ax.set_title(
        "Parsing MoE generate responses (48 layers x top-8 routing, packed logprobs)\n"
        f"tokenwire {tokenwire.__version__}, implementation {tokenwire.implementation}, simd {simd}, "
        f"{platform.machine()}",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(output)
    print(f"wrote {output}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=131072, help="largest response, in tokens (default 131072)")
    parser.add_argument("--output", type=Path, default=HERE / "throughput.png")
    args = parser.parse_args()
    plot(measure(args.max_tokens), args.output)


if __name__ == "__main__":
    main()
