"""Small bodies in the plain loop, builds side by side: each contender in a fresh process,
the same distinct responses, parse-use-drop, against ``orjson.loads`` of the same bytes.

    python benchmarks/small_bodies.py                                   # this interpreter's build
    python benchmarks/small_bodies.py --build base=/work/wt-base/.venv/bin/python \\
        --build main=/work/main/.venv/bin/python --build new=.venv/bin/python --repeats 5

The responses are made once, here (``tokenwire.samples``: ``packed_128``, 128 tokens of packed
float32 logprobs, lengths within 12%, flat and peaked; ``native_top5_64``, about 64 tokens of
native records with 7 candidates, about 10% of rows with filtered -9999 tails and 5% with a
tie between neighbouring places, a top-5 head, every fourth body two choices) and pickled; a
child process of each build only parses them, so a build without these workloads is measured
on the same bytes. Each repeat runs every build and ``orjson.loads`` in turn (the order
reversed every other repeat); a build's ratio is the median over the repeats of its time
over the ``orjson.loads`` process of the same repeat. Also printed: minor page faults per
parse once warm, and the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOADS = ("packed_128", "native_top5_64")
ORJSON = "orjson.loads"
# Each child parses at least this many bytes (small bodies: many rounds), so that a hiccup of
# a shared host does not move its median much.
MIN_BYTES = 48 * 2**20


def _child(path: str, contender: str, top_k: str, rounds: int) -> None:
    with open(path, "rb") as f:
        bodies = pickle.load(f)
    k = None if top_k == "none" else int(top_k)
    if contender == ORJSON:
        import orjson

        loads = orjson.loads

        def parse(raw: bytes) -> object:
            return loads(raw)

        def use(doc: dict) -> int:
            return len(doc["choices"][-1]["token_ids"])
    else:
        import tokenwire

        generate = tokenwire.parse_generate_response

        def parse(raw: bytes) -> object:
            return generate(raw, top_k=k)

        def use(response: object) -> int:
            n = 0
            for c in response.choices:  # type: ignore[attr-defined]
                n += len(c.completion_ids)
                if c.completion_logprobs is not None and len(c.completion_logprobs):
                    n += int(c.completion_logprobs[-1] < 0)
                if c.completion_top_ids is not None:
                    n += len(c.completion_top_ids.values)
            return n

    times: list[float] = []
    faults = parses = 0
    clock = time.perf_counter
    for r in range(rounds):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        spent = []
        for raw in bodies:
            start = clock()
            result = parse(raw)
            use(result)
            del result
            spent.append(clock() - start)
        if r:  # the first round warms the process
            times += spent
            faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
            parses += len(bodies)
    print(json.dumps({"median_s": statistics.median(times), "faults": faults / max(parses, 1)}))


def _run(python: str, path: str, contender: str, top_k: int | None, rounds: int) -> dict[str, float]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # each interpreter imports its own build
    out = subprocess.run([python, os.path.abspath(__file__), "--child", path, contender,
                          "none" if top_k is None else str(top_k), str(rounds)],
                         capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    if out.returncode:
        raise RuntimeError(f"{contender} ({python}) failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--build", action="append", default=[],
                        help="LABEL=PYTHON: an interpreter whose tokenwire is a contender (default: this one)")
    parser.add_argument("-w", "--workload", action="append", choices=WORKLOADS)
    parser.add_argument("-n", "--responses", type=int, default=32, help="distinct responses per workload")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per contender")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    if args.child:
        path, contender, top_k, rounds = args.child
        _child(path, contender, top_k, int(rounds))
        return 0
    from tokenwire import samples

    builds = {label: os.path.abspath(python) for label, python in (b.split("=", 1) for b in args.build)}
    builds = builds or {"tokenwire": sys.executable}
    rows = []
    with tempfile.TemporaryDirectory(prefix="tokenwire-small-") as tmp:
        for name in args.workload or WORKLOADS:
            workload = samples.WORKLOADS[name]
            bodies = workload.responses(args.responses)
            path = os.path.join(tmp, f"{name}.pickle")
            with open(path, "wb") as f:
                pickle.dump(bodies, f)
            rounds = max(3, -(-MIN_BYTES // sum(map(len, bodies))))
            loads = [time.strftime("%H:%M:%S", time.gmtime()), os.getloadavg()[0]]
            runs: dict[str, list[dict[str, float]]] = {label: [] for label in [*builds, ORJSON]}
            order = [*builds, ORJSON]
            for repeat in range(args.repeats):
                for label in order[:: 1 if repeat % 2 == 0 else -1]:
                    python = sys.executable if label == ORJSON else builds[label]
                    runs[label].append(_run(python, path, label if label == ORJSON else "tokenwire",
                                            workload.top_k, rounds))
                    print(f"  {name} {label} #{repeat}: {runs[label][-1]['median_s'] * 1e6:.2f} us",
                          file=sys.stderr)
            loads += [time.strftime("%H:%M:%S", time.gmtime()), os.getloadavg()[0]]
            for label in builds:
                ratios = [t["median_s"] / o["median_s"] for t, o in zip(runs[label], runs[ORJSON])]
                rows.append({
                    "workload": name, "build": label, "bytes": sum(map(len, bodies)) // len(bodies),
                    "us": statistics.median(r["median_s"] for r in runs[label]) * 1e6,
                    "orjson_us": statistics.median(r["median_s"] for r in runs[ORJSON]) * 1e6,
                    "ratio": statistics.median(ratios), "ratios": ratios,
                    "us_runs": [r["median_s"] * 1e6 for r in runs[label]],
                    "faults": statistics.median(r["faults"] for r in runs[label]),
                    "rounds": rounds, "window": loads,
                })
    print(f"{'workload':<16} {'build':<10} {'bytes':>6} {'us':>8} {'orjson us':>9} {'ratio':>7} "
          f"{'faults':>6}  ratios per repeat; window, load")
    for r in rows:
        print(f"{r['workload']:<16} {r['build']:<10} {r['bytes']:>6} {r['us']:>8.2f} {r['orjson_us']:>9.2f} "
              f"{r['ratio']:>6.2f}x {r['faults']:>6.1f}  {', '.join(f'{x:.2f}' for x in r['ratios'])}; "
              f"{r['window'][0]}-{r['window'][2]}, load {r['window'][1]:.1f}-{r['window'][3]:.1f}")
    if args.json:  # the rows as JSON too
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
