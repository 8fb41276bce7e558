"""``tokenwire bench``: the loop a trainer writes, timed as it runs.

Headline, per workload of :data:`tokenwire.samples.WORKLOADS`: every contender
(tokenwire, ``orjson.loads``) in a new interpreter, over the same distinct responses
(lengths, flat and peaked distributions, filtered tails, ties, masks, several choices),
each parsed, used (its arrays read) and dropped, round after round, the contenders taking
turns. Reported: the median time per parse, its ratio to ``orjson.loads`` of the same bytes
(the median of the ratios of the turns), and minor page faults per parse once the loop is
warm (``getrusage``: a count that does not jitter with load). The floor: the least time any
reader could take, the response's bytes read once and its result's arrays written once at this
machine's ``memcpy`` bandwidth (:func:`memcpy_rate`), and tokenwire's time as a multiple of it.
Beside it, the warm figure: one response parsed again and again in this process, the best
case a benchmark of one sample shows.
"""

from __future__ import annotations

import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

CONTENDERS = ("tokenwire", "orjson.loads")
# Each fresh process parses at least this many bytes: small responses take more rounds, so
# that their median is over a loop long enough (tens of milliseconds) for a hiccup of the
# host not to move it.
MIN_BYTES_PER_PROCESS = 128 * 2**20


def _minor_faults() -> int:
    import resource  # POSIX only: imported by the loop that counts, not with the package

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _contender(name: str, workload: str) -> tuple[Callable[[Any], Any], Callable[[Any], int]]:
    """What a contender calls per response of ``workload``, and how its result is used."""
    from tokenwire import samples

    spec = samples.WORKLOADS[workload]
    if name == "orjson.loads":  # the standard library, held to orjson's rules, without orjson
        from tokenwire.base import _json
        from tokenwire.base._table import KEY

        choices, ids, output_ids = KEY.choices, KEY.token_ids, KEY.output_ids  # named once, not in the timed loop
        if spec.parser == "parse_sglang_generate_response":  # an SGLang item: its ids at the top
            return _json.loads, lambda doc: len(doc[output_ids])
        return _json.loads, lambda doc: len(doc[choices][-1][ids])
    import tokenwire

    def parse(raw: Any) -> Any:
        return spec.parse(tokenwire, raw)

    def use(response: Any) -> int:
        n = 0
        for c in response.choices:
            n += len(c.completion_ids)
            if c.completion_logprobs is not None and len(c.completion_logprobs):
                n += int(c.completion_logprobs[-1] < 0)
            if c.completion_top_ids is not None:
                n += len(c.completion_top_ids.values)
            if c.sampling_mask is not None:
                n += len(c.sampling_mask.values)
            if c.routed_experts is not None:
                n += c.routed_experts.array.size
        return n

    return parse, use


def run_loop(responses: list[bytes], contender: str, workload: str, rounds: int) -> dict[str, float]:
    """Parse-use-drop every response of ``workload``, ``rounds`` times (at least 2); the first
    round warms the process and is not counted."""
    rounds = max(rounds, 2)
    parse, use = _contender(contender, workload)
    times: list[float] = []
    faults = parses = 0
    for r in range(rounds):
        before = _minor_faults()
        spent = []
        for raw in responses:
            start = time.perf_counter()
            result = parse(raw)
            use(result)
            del result
            spent.append(time.perf_counter() - start)
        if r:  # the first round warms the process: neither its times nor its faults count
            times += spent
            faults += _minor_faults() - before
            parses += len(responses)
    return {"median_s": statistics.median(times), "faults_per_parse": faults / max(parses, 1)}


def _fresh_process(path: str, contender: str, workload: str, rounds: int) -> dict[str, float]:
    # One BLAS thread: numpy's OpenBLAS otherwise starts a thread per core that busy-waits
    # after the process starts, taking a core of a small machine from the loop being timed
    # (neither contender calls BLAS).
    env = {"OPENBLAS_NUM_THREADS": "1", **os.environ}
    out = subprocess.run(
        [sys.executable, "-m", "tokenwire.cli.bench", path, contender, workload, str(rounds)],
        capture_output=True, text=True, env=env,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the {contender} process failed (status {out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def memcpy_rate(size: int = 256 << 20, rounds: int = 9) -> float:
    """Bytes per second ``memcpy`` copies between two mapped buffers of ``size`` bytes (the
    median of ``rounds`` copies), each byte read once and written once."""
    import ctypes

    import numpy as np

    source = np.ones(size, dtype=np.uint8)
    target = np.ones(size, dtype=np.uint8)  # both mapped before the first copy is timed
    times = []
    for _ in range(max(rounds, 1)):
        start = time.perf_counter()
        ctypes.memmove(target.ctypes.data, source.ctypes.data, size)
        times.append(time.perf_counter() - start)
    return size / statistics.median(times)


def floor_seconds(read: int, written: int, rate: float) -> float:
    """The least time to read ``read`` bytes and write ``written`` at ``memcpy``'s ``rate``
    (a copied byte is one read and one write)."""
    return (read + written) / (2 * rate)


def written_bytes(response: Any) -> int:
    """The bytes of the arrays a parse made: each choice's and the response's (an array held
    twice counted once)."""
    import numpy as np

    seen: set[int] = set()
    total = 0

    def add(value: Any) -> None:
        nonlocal total
        for part in (value, getattr(value, "values", None), getattr(value, "offsets", None),
                     getattr(value, "array", None)):
            if isinstance(part, np.ndarray) and id(part) not in seen:
                seen.add(id(part))
                total += part.nbytes

    for holder in (response, *response.choices):
        for value in vars(holder).values():
            add(value)
    return total


def median_seconds(fn: Callable[[], Any], budget: float) -> float:
    """Median of repeated calls until ``budget`` seconds are spent (at least 3 calls)."""
    times: list[float] = []
    spent = 0.0
    while len(times) < 3 or (spent < budget and len(times) < 2000):
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        spent += elapsed
    return statistics.median(times)


def plain_loop(
    names: list[str] | None = None,
    *,
    responses: int = 8,
    rounds: int = 5,
    repeats: int = 3,
    warm_budget: float = 0.5,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per workload (see the module docstring); ``repeats`` fresh processes per
    contender, their medians' median reported. Each process passes ``rounds`` times over
    the responses, or more for small ones (:data:`MIN_BYTES_PER_PROCESS`)."""
    import tokenwire
    from tokenwire.base import _json
    from tokenwire import samples

    rows = []
    chosen = names or list(samples.WORKLOADS)
    rate = memcpy_rate()
    with tempfile.TemporaryDirectory(prefix="tokenwire-bench-") as tmp:
        for i, name in enumerate(chosen):
            if progress:
                progress(f"  [{i + 1}/{len(chosen)}] {name} ...")
            workload = samples.WORKLOADS[name]
            raws = workload.responses(max(responses, 1))
            path = os.path.join(tmp, f"{name}.pickle")
            with open(path, "wb") as f:
                pickle.dump(raws, f)
            row: dict[str, Any] = {
                "workload": name,
                "description": workload.description,
                "responses": len(raws),
                "bytes": sum(map(len, raws)) // len(raws),
                "top_k": workload.top_k,
            }
            first = workload.parse(tokenwire, raws[0])
            row["tokens"] = sum(len(c.completion_ids) for c in first.choices)
            # the floor of each response, their median (as the time is the median of theirs)
            written = [written_bytes(workload.parse(tokenwire, raw)) for raw in raws]
            row["memcpy_bytes_per_s"] = rate
            row["written_bytes"] = statistics.median(written)
            row["floor_s"] = statistics.median(floor_seconds(len(raw), w, rate) for raw, w in zip(raws, written))
            # The contenders take turns, one fresh process each per repeat (the order swapped
            # every other repeat), and the ratio is the median of each repeat's own ratio: a
            # shared host that slows down for a while slows both sides of a pair.
            runs: dict[str, list[dict[str, float]]] = {contender: [] for contender in CONTENDERS}
            row["rounds"] = max(rounds, -(-MIN_BYTES_PER_PROCESS // max(sum(map(len, raws)), 1)))
            for repeat in range(max(repeats, 1)):
                for contender in CONTENDERS[:: 1 if repeat % 2 == 0 else -1]:
                    runs[contender].append(_fresh_process(path, contender, name, row["rounds"]))
            for contender, done in runs.items():
                key = contender.replace(".", "_")
                row[f"{key}_s"] = statistics.median(r["median_s"] for r in done)
                row[f"{key}_faults_per_parse"] = statistics.median(r["faults_per_parse"] for r in done)
            row["ratio_to_orjson_loads"] = statistics.median(
                t["median_s"] / o["median_s"] for t, o in zip(runs["tokenwire"], runs["orjson.loads"])
            )
            raw = raws[0]
            row["warm_tokenwire_s"] = median_seconds(lambda: workload.parse(tokenwire, raw), warm_budget)
            row["warm_orjson_loads_s"] = median_seconds(lambda: _json.loads(raw), warm_budget)
            row["warm_ratio_to_orjson_loads"] = row["warm_tokenwire_s"] / row["warm_orjson_loads_s"]
            row["tokenwire_floors"] = row["tokenwire_s"] / row["floor_s"]
            rows.append(row)
    return rows


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds < 0.01 else f"{seconds * 1e3:.2f}"


def print_table(rows: list[dict[str, Any]], out: Any = None) -> None:
    import tokenwire
    from tokenwire.base import _json

    out = out or sys.stdout
    print(f"tokenwire {tokenwire.__version__}: implementation={tokenwire.implementation}, "
          f"simd={tokenwire.simd_path()}, load average {os.getloadavg()[0]:.2f}", file=out)
    if _json.backend != "orjson":
        print("orjson is not installed: the 'orjson' column is json.loads under orjson's rules", file=out)
    print("plain loop: a new process per contender, distinct responses, parse-use-drop "
          "(median ms per parse)", file=out)
    header = (f"{'workload':<22} {'size':>8} {'tokens':>6} {'tokenwire':>10} {'orjson':>9} "
              f"{'ratio':>7} {'faults':>7}   {'warm':>8} {'ratio':>7}   {'floor us':>8} {'x floor':>7}")
    print(header, file=out)
    print("-" * len(header), file=out)
    for r in rows:
        print(f"{r['workload']:<22} {r['bytes'] / 2**20:>6.2f}MB {r['tokens']:>6} "
              f"{_ms(r['tokenwire_s']):>10} {_ms(r['orjson_loads_s']):>9} "
              f"{r['ratio_to_orjson_loads']:>6.2f}x {r['tokenwire_faults_per_parse']:>7.1f}   "
              f"{_ms(r['warm_tokenwire_s']):>8} {r['warm_ratio_to_orjson_loads']:>6.2f}x   "
              f"{r['floor_s'] * 1e6:>8.1f} {r['tokenwire_floors']:>6.1f}x", file=out)
    print("ratio: tokenwire's time over orjson.loads(raw) of the same bytes, run in turns (the median "
          "of the turns' ratios); faults: minor page "
          "faults per parse once warm;\nwarm: one response parsed repeatedly in one process "
          "(the best case); floor: microseconds to read the response and write its arrays once at memcpy's "
          f"{rows[0]['memcpy_bytes_per_s'] / 1e9 if rows else 0:.1f} GB/s, x floor: tokenwire's time over it",
          file=out)


def _child(argv: list[str]) -> None:
    path, contender, workload, rounds = argv
    with open(path, "rb") as f:
        responses = pickle.load(f)
    print(json.dumps(run_loop(responses, contender, workload, int(rounds))))


if __name__ == "__main__":
    _child(sys.argv[1:])
