"""``tokenwire`` command line: ``tokenwire bench`` times the embedded sample workload."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

import tokenwire
from tokenwire import _reference, samples


def _median_seconds(fn: Callable[[], Any], budget: float) -> float:
    """Median of repeated runs, repeating until ``budget`` seconds are spent (at least 3 runs)."""
    times: list[float] = []
    spent = 0.0
    while len(times) < 3 or (spent < budget and len(times) < 1000):
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        spent += elapsed
    return statistics.median(times)


def _tokens(response: tokenwire.GenerateResponse) -> int:
    return sum(len(c.completion_ids) for c in response.choices)


def bench(quick: bool = False, as_json: bool = False, names: list[str] | None = None) -> list[dict[str, Any]]:
    budget = 0.2 if quick else 1.0
    rows = []
    chosen = names or list(samples.SAMPLES)
    started = time.perf_counter()
    for i, name in enumerate(chosen):
        spec = samples.SAMPLES[name]
        if not as_json and time.perf_counter() - started > 2:
            print(f"  [{i + 1}/{len(chosen)}] {name} ...", file=sys.stderr, flush=True)
        raw = spec.raw
        k = spec.top_k
        parsed = tokenwire.parse_generate_response(raw, top_k=k)
        t_tw = _median_seconds(lambda: tokenwire.parse_generate_response(raw, top_k=k), budget)
        t_ref = _median_seconds(lambda: _reference.parse_generate_response(raw, top_k=k), budget)
        t_orjson = _median_seconds(lambda: orjson.loads(raw), budget)
        tokens = _tokens(parsed)
        rows.append(
            {
                "workload": name,
                "description": spec.description,
                "bytes": len(raw),
                "tokens": tokens,
                "top_k": k,
                "tokenwire_s": t_tw,
                "reference_s": t_ref,
                "orjson_loads_s": t_orjson,
                "speedup_vs_reference": t_ref / t_tw,
                "ratio_to_orjson_loads": t_tw / t_orjson,
                "tokens_per_s": tokens / t_tw,
            }
        )
    return rows


def _print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"tokenwire {tokenwire.__version__}: implementation={tokenwire.implementation}, "
        f"simd={tokenwire.simd_path()}"
    )
    header = (
        f"{'workload':<18} {'size':>9} {'tokens':>7} {'tokenwire':>10} {'reference':>10} "
        f"{'orjson.loads':>12} {'vs ref':>8} {'/orjson':>8} {'tokens/s':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['workload']:<18} {r['bytes'] / 2**20:>7.2f}MB {r['tokens']:>7} "
            f"{r['tokenwire_s'] * 1e3:>8.2f}ms {r['reference_s'] * 1e3:>8.2f}ms "
            f"{r['orjson_loads_s'] * 1e3:>10.2f}ms {r['speedup_vs_reference']:>7.1f}x "
            f"{r['ratio_to_orjson_loads']:>7.2f}x {r['tokens_per_s'] / 1e6:>8.1f}M"
        )
    print("vs ref: speedup over the pure-Python reference; /orjson: time relative to orjson.loads(raw)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tokenwire", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_bench = sub.add_parser("bench", help="time the embedded sample workload")
    p_bench.add_argument("--quick", action="store_true", help="short timing budget (for CI)")
    p_bench.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p_bench.add_argument("--workload", action="append", choices=sorted(samples.SAMPLES), help="only this workload (repeatable)")
    args = parser.parse_args(argv)
    if args.command == "bench":
        rows = bench(quick=args.quick, as_json=args.json, names=args.workload)
        if args.json:
            print(json.dumps({"implementation": tokenwire.implementation, "simd": tokenwire.simd_path(), "results": rows}, indent=2))
        else:
            _print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
