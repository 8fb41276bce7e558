"""renderers' ``generate()`` in a loop, the way a rollout worker calls it: mean time per call
(the cyclic collector's full passes included) and the median call, with each result freed at
once or the last ``--keep`` results kept alive; renderers unpatched, patched with
``tokenwire.compat.renderers``, with parsers that only make the return values (the bound of any
drop-in), and tokenwire's own array API on the same bytes; in alternating rounds, medians over
them, with the load average (the machine may be shared).

    python benchmarks/renderers_throughput.py [--keep 0 8] [--calls 120] [--rounds 3] [--head 0]

The mean is what a worker's throughput sees: the Python floats, ints and lists that
renderers' return types hold are container work for the collector for as long as they live.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from test_renderers_generate_bench import SPEEDUP_WORKLOAD, generate, return_values_only

import tokenwire
from tokenwire import samples
from tokenwire.compat import renderers as compat


def loop(call: Callable[[], Any], keep: int, calls: int) -> tuple[float, float]:
    """Mean and median seconds per call over ``calls`` calls, keeping the last ``keep``."""
    kept: collections.deque[Any] = collections.deque(maxlen=keep or None)
    for _ in range(3):
        call()
    times = []
    begin = time.perf_counter()
    for _ in range(calls):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
        if keep:
            kept.append(result)
        del result
    mean = (time.perf_counter() - begin) / calls
    kept.clear()
    times.sort()
    return mean, times[calls // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=int, nargs="+", default=[0, 8])
    parser.add_argument("--calls", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians over them")
    parser.add_argument("--head", type=int, default=None,
                        help="the head size asked for (default: the sample's, 20; 0: no head)")
    args = parser.parse_args()
    spec = samples.SAMPLES[SPEEDUP_WORKLOAD]
    raw, k = spec.raw, spec.top_k if args.head is None else (args.head or None)
    print(f"{SPEEDUP_WORKLOAD}, head {k}, renderers {compat.renderers_version()}, tokenwire {tokenwire.implementation}; "
          f"{args.rounds} rounds of {args.calls} calls (renderers: a quarter of them); mean / median per call; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for keep in args.keep:
        rounds = []
        for _ in range(args.rounds):  # alternate, so each sees the same machine
            theirs = loop(lambda: generate(raw, k), keep, max(args.calls // 4, 8))
            with compat.patched():
                ours = loop(lambda: generate(raw, k), keep, args.calls)
            if k is None:  # the bound is timed for heads only
                bound = (float("nan"), float("nan"))
            else:
                with return_values_only(raw, k):
                    bound = loop(lambda: generate(raw, k), keep, args.calls)
            native = loop(lambda: tokenwire.parse_generate_response(raw, top_k=k), keep, args.calls)
            rounds.append((theirs, ours, bound, native))
        theirs, ours, bound, native = (
            tuple(statistics.median(r[i][j] for r in rounds) for j in range(2)) for i in range(4)
        )
        print(f"keep {keep:>2}: renderers {theirs[0] * 1e3:.1f} / {theirs[1] * 1e3:.1f} ms, "
              f"patched {ours[0] * 1e3:.2f} / {ours[1] * 1e3:.2f} ms "
              f"({theirs[0] / ours[0]:.1f}x / {theirs[1] / ours[1]:.1f}x), "
              f"return values only {bound[0] * 1e3:.2f} / {bound[1] * 1e3:.2f} ms "
              f"(at most {theirs[0] / bound[0]:.1f}x / {theirs[1] / bound[1]:.1f}x), "
              f"tokenwire.parse_generate_response {native[0] * 1e3:.2f} / {native[1] * 1e3:.2f} ms "
              f"({theirs[0] / native[0]:.0f}x / {theirs[1] / native[1]:.0f}x); "
              f"per-round patched medians {', '.join(f'{r[1][1] * 1e3:.2f}' for r in rounds)} ms; "
              f"load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
