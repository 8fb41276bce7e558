"""The batch path, from response bodies to torch tensors: a fresh process per contender and
repeat, distinct responses (``tokenwire.samples.WORKLOADS``), the contenders taking turns.

    python benchmarks/batch_path.py                      # 256 compact top-20 8k responses
    python benchmarks/batch_path.py -n 64 --repeats 2    # fewer responses, fewer turns
    python benchmarks/batch_path.py --small              # 512 packed 128-token responses: ids, logprobs, mask
    python benchmarks/batch_path.py --bandwidth          # collate's GB/s beside numpy.copyto and memcpy
    python benchmarks/batch_path.py --floor              # memcpy's bandwidth and each workload's floor

Contenders (each makes the padded tensors of the whole batch, then ``torch.from_numpy``):

- ``batch``: ``tokenwire.collate(tokenwire.parse_many(raws, top_k=20, threads=1), threads=1).to_torch()``;
  ``batch-2t`` the same with ``threads=2`` (both calls); ``batch-out`` with ``out=`` the previous round's
  batch and fixed widths, as a training loop can (its arrays written again: no new memory);
- ``loop``: the loop a trainer writes today: parse each response, pad each choice's arrays
  (``np.pad``, ``Ragged.to_padded`` for the heads), ``np.stack`` them;
- ``orjson``: ``orjson.loads`` + ``pybase64.b64decode`` + numpy: the compact rows' sampled
  logprobs and the ids padded as the loop pads them. It cannot select heads (that needs the
  rules), so it makes the non-head tensors only, and is compared with
- ``batch-nohead``: ``parse_many`` without ``top_k`` and ``collate``: the same non-head tensors;
- ``direct``, ``direct-nohead``, ``direct-2t``: ``tokenwire.parse_batch`` (bodies straight into the
  batch: with ``top_k`` it parses and collates; without, the plain bodies' rows are written from
  the scan), one thread (two for ``-2t``, without ``top_k``).

``--small``: 512 distinct ``packed_128`` responses (128 tokens of packed float32 logprobs, 64
prompt ids) to padded ``[B, T]`` ids, logprobs and mask (and lengths): ``batch-nohead``,
``direct``, ``direct-2t``, and ``orjson`` (``orjson.loads``, ``pybase64.b64decode``, ``np.array``
of the ids, each row assigned into preallocated blocks: its fastest form, no ``np.pad``).

``--floor``: this machine's ``memcpy`` bandwidth (a 256 MiB copy between mapped buffers, median
of 9) and, for each workload, the bytes a contender must touch at the least (every body's
bytes read once, every output array written once) over that bandwidth, counting a copied byte
as one read and one write: ``floor = (read + written) / (2 * memcpy bytes per second)``.

Every round times the whole batch (wall clock; ``BATCH_BENCH_CLOCK=cpu``: the process's CPU
time, every thread's summed, which a shared machine's load inflates less: compare one-thread
contenders with it); the first round of a process warms it and is not counted;
a process's figure is the median of its rounds, a contender's the median of its processes.
The responses are built once (about a second each) and kept in ``--cache``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import pickle
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

WORKLOAD = "compact_top20_8k"
SMALL = "packed_128"
TOP_K = 20
CONTENDERS = ("batch", "batch-2t", "batch-out", "loop", "batch-nohead", "orjson", "direct", "direct-nohead",
              "direct-2t")
SMALL_CONTENDERS = ("batch-nohead", "direct", "direct-2t", "orjson")


# --- the contenders: bytes in, a dict of torch tensors out ----------------------------------------


def _stacked(torch: Any, rows: dict[str, list[np.ndarray]]) -> dict[str, Any]:
    return {name: torch.from_numpy(np.stack(parts)) for name, parts in rows.items()}


def _padded_1d(array: np.ndarray, width: int, fill: Any = 0) -> np.ndarray:
    return np.pad(array, (0, width - len(array)), constant_values=fill)


def run_batch(raws: list[bytes], threads: int, top_k: int | None) -> dict[str, Any]:
    import tokenwire

    return tokenwire.collate(tokenwire.parse_many(raws, top_k=top_k, threads=threads), threads=threads).to_torch()


class Reusing:
    """The batch path of a training loop: fixed widths and ``out=`` the previous step's batch."""

    def __init__(self) -> None:
        self.previous = None

    def __call__(self, raws: list[bytes]) -> dict[str, Any]:
        import tokenwire

        responses = tokenwire.parse_many(raws, top_k=TOP_K, threads=1)
        self.previous = tokenwire.collate(responses, width=9216, prompt_width=2048, head_width=TOP_K,
                                          out=self.previous, threads=1)
        return self.previous.to_torch()


def run_loop(raws: list[bytes]) -> dict[str, Any]:
    """Parse each, pad each, stack: what a trainer writes with the single-response API."""
    import torch

    import tokenwire

    responses = [tokenwire.parse_generate_response(raw, top_k=TOP_K) for raw in raws]
    width = max(len(c.completion_ids) for r in responses for c in r.choices)
    prompt_width = max(len(r.prompt_token_ids) for r in responses)
    rows: dict[str, list[np.ndarray]] = {name: [] for name in (
        "completion_ids", "completion_logprobs", "mask", "lengths", "completion_top_ids", "completion_top_logprobs",
        "completion_top_lengths", "prompt_token_ids", "prompt_lengths")}
    for r in responses:
        for c in r.choices:
            n = len(c.completion_ids)
            rows["completion_ids"].append(_padded_1d(c.completion_ids, width))
            rows["completion_logprobs"].append(_padded_1d(c.completion_logprobs, width))
            rows["mask"].append(np.arange(width) < n)
            rows["lengths"].append(np.int64(n))
            top_ids, head_lengths = c.completion_top_ids.to_padded(TOP_K, fill=0)
            top_lps, _ = c.completion_top_logprobs.to_padded(TOP_K, fill=-np.inf)
            rows["completion_top_ids"].append(np.pad(top_ids, ((0, width - n), (0, 0))))
            rows["completion_top_logprobs"].append(np.pad(top_lps, ((0, width - n), (0, 0)), constant_values=-np.inf))
            rows["completion_top_lengths"].append(_padded_1d(head_lengths, width))
            rows["prompt_token_ids"].append(_padded_1d(r.prompt_token_ids, prompt_width))
            rows["prompt_lengths"].append(np.int64(len(r.prompt_token_ids)))
    return _stacked(torch, rows)


def run_direct(raws: list[bytes], threads: int, top_k: int | None) -> dict[str, Any]:
    import tokenwire

    return tokenwire.parse_batch(raws, top_k=top_k, threads=threads).to_torch()


def run_orjson_packed(raws: list[bytes]) -> dict[str, Any]:
    """Packed responses to padded ids, logprobs, mask and lengths without tokenwire (nothing
    validated): each row assigned into blocks made once."""
    import orjson
    import pybase64
    import torch

    ids, logprobs = [], []
    for raw in raws:
        document = orjson.loads(raw)
        for choice in document["choices"]:
            ids.append(np.array(choice["token_ids"], dtype=np.int64))
            data = pybase64.b64decode(choice["completion_logprobs"]["data"], validate=True)
            logprobs.append(np.frombuffer(data, dtype="<f4"))
    lengths = np.array([len(a) for a in ids], dtype=np.int64)
    width = int(lengths.max())
    out_ids = np.zeros((len(ids), width), dtype=np.int64)
    out_lps = np.zeros((len(ids), width), dtype=np.float32)
    for b, (i, lp) in enumerate(zip(ids, logprobs)):
        out_ids[b, : len(i)] = i
        out_lps[b, : len(lp)] = lp
    mask = np.arange(width) < lengths[:, None]
    return {name: torch.from_numpy(a) for name, a in (("completion_ids", out_ids), ("completion_logprobs", out_lps),
                                                      ("mask", mask), ("lengths", lengths))}


def run_orjson(raws: list[bytes]) -> dict[str, Any]:
    """The non-head tensors without tokenwire: JSON, base64 and numpy (nothing validated)."""
    import orjson
    import pybase64
    import torch

    ids, logprobs, prompts = [], [], []
    for raw in raws:
        document = orjson.loads(raw)
        prompt = np.array(document["prompt_token_ids"], dtype=np.int64)
        for choice in document["choices"]:
            compact = choice["compact_logprobs"]
            offsets = np.array(compact["offsets"], dtype=np.int64)
            data = pybase64.b64decode(compact["data"], validate=True)
            count = int(offsets[-1])
            values = np.frombuffer(data, dtype="<f4", count=count, offset=4 * count)
            ids.append(np.array(choice["token_ids"], dtype=np.int64))
            logprobs.append(values[offsets[:-1]])  # each row starts with the sampled token
            prompts.append(prompt)
    width = max(map(len, ids))
    prompt_width = max(map(len, prompts))
    rows = {
        "completion_ids": [_padded_1d(a, width) for a in ids],
        "completion_logprobs": [_padded_1d(a, width) for a in logprobs],
        "mask": [np.arange(width) < len(a) for a in ids],
        "lengths": [np.int64(len(a)) for a in ids],
        "prompt_token_ids": [_padded_1d(p, prompt_width) for p in prompts],
        "prompt_lengths": [np.int64(len(p)) for p in prompts],
    }
    return _stacked(torch, rows)


def contender(name: str, small: bool = False) -> Any:
    if small:
        return {
            "batch-nohead": lambda raws: run_batch(raws, 1, None),
            "direct": lambda raws: run_direct(raws, 1, None),
            "direct-2t": lambda raws: run_direct(raws, 2, None),
            "orjson": run_orjson_packed,
        }[name]
    return {
        "direct": lambda raws: run_direct(raws, 1, TOP_K),
        "direct-nohead": lambda raws: run_direct(raws, 1, None),
        "direct-2t": lambda raws: run_direct(raws, 2, None),
        "batch": lambda raws: run_batch(raws, 1, TOP_K),
        "batch-2t": lambda raws: run_batch(raws, 2, TOP_K),
        "batch-nohead": lambda raws: run_batch(raws, 1, None),
        "batch-out": Reusing(),
        "loop": run_loop,
        "orjson": run_orjson,
    }[name]


def child(name: str, path: str, rounds: int) -> dict[str, Any]:
    import torch  # noqa: F401  (imported before the clock starts, as a trainer has it)

    clock = time.process_time if os.environ.get("BATCH_BENCH_CLOCK") == "cpu" else time.perf_counter

    with open(path, "rb") as f:
        raws = pickle.load(f)
    run = contender(name, SMALL in os.path.basename(path))
    times, shapes = [], {}
    for r in range(rounds + 1):
        gc.collect()
        start = clock()
        tensors = run(raws)
        spent = clock() - start
        if r:
            times.append(spent)
        shapes = {k: list(v.shape) for k, v in tensors.items() if v is not None}
        del tensors
    return {"contender": name, "median_s": statistics.median(times), "times": times, "shapes": shapes}


# --- collate's bandwidth -------------------------------------------------------------------------


def bandwidth(path: str, rounds: int) -> dict[str, Any]:
    """collate's output bytes per second on parsed responses, beside numpy.copyto and memcpy
    (ctypes.memmove) of the same number of bytes, into fresh and into reused memory."""
    import ctypes

    import tokenwire

    with open(path, "rb") as f:
        raws = pickle.load(f)
    responses = tokenwire.parse_many(raws, top_k=TOP_K, threads=1)
    del raws

    def best(fn: Any) -> float:
        times = []
        for _ in range(rounds):
            gc.collect()
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    batch = tokenwire.collate(responses)
    size = sum(a.nbytes for a in batch.arrays().values())
    source = np.ones(size, dtype=np.uint8)
    reused = np.empty(size, dtype=np.uint8)
    np.copyto(reused, source)  # mapped
    figures = {
        "collate": best(lambda: tokenwire.collate(responses, threads=1)),
        "collate out=": best(lambda: tokenwire.collate(responses, out=batch, threads=1)),
        "collate 2 threads": best(lambda: tokenwire.collate(responses, threads=2)),
        "collate out= 2 threads": best(lambda: tokenwire.collate(responses, out=batch, threads=2)),
        "numpy.copyto fresh": best(lambda: np.copyto(np.empty(size, dtype=np.uint8), source)),
        "numpy.copyto reused": best(lambda: np.copyto(reused, source)),
        "memcpy reused": best(lambda: ctypes.memmove(reused.ctypes.data, source.ctypes.data, size)),
    }
    return {"bytes": size, "seconds": figures, "gb_per_s": {k: size / v / 1e9 for k, v in figures.items()}}


# --- the driver ----------------------------------------------------------------------------------


def _spawn(args: list[str]) -> dict[str, Any]:
    env = {"OPENBLAS_NUM_THREADS": "1", **os.environ}
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{args[:2]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _responses(count: int, cache: str, workload: str = WORKLOAD) -> str:
    from tokenwire import samples

    path = os.path.join(cache, f"{workload}-{count}.pickle")
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        start = time.perf_counter()
        raws = samples.WORKLOADS[workload].responses(count)
        with open(path + ".tmp", "wb") as f:
            pickle.dump(raws, f, protocol=5)
        os.replace(path + ".tmp", path)
        print(f"built {count} responses ({sum(map(len, raws)) / 2**20:.0f} MiB) in {time.perf_counter() - start:.0f} s",
              file=sys.stderr)
    return path


def floor(path: str, rounds: int) -> dict[str, Any]:
    """memcpy's bandwidth between mapped buffers, and the least bytes the batch of ``path``
    touches: its bodies read, the tensors of ``parse_batch`` (without heads) written."""
    import tokenwire
    from tokenwire.cli.bench import floor_seconds, memcpy_rate

    copy_rate = memcpy_rate(256 << 20, rounds)  # bytes copied per second (each read once and written once)
    with open(path, "rb") as f:
        raws = pickle.load(f)
    read = sum(map(len, raws))
    batch = tokenwire.parse_batch(raws, threads=1)
    arrays = {k: v.nbytes for k, v in batch.to_torch().items() if v is not None}
    written = sum(arrays.values())
    return {"memcpy_gb_per_s": copy_rate / 1e9, "read": read, "written": written, "arrays": arrays,
            "floor_s": floor_seconds(read, written, copy_rate)}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--responses", type=int, help="default: 256 (512 with --small)")
    parser.add_argument("-r", "--rounds", type=int, default=3, help="timed rounds per process (after one warm-up)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per contender")
    parser.add_argument("-c", "--contender", action="append", choices=CONTENDERS)
    parser.add_argument("--cache", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tokenwire-batch-bench"))
    parser.add_argument("--bandwidth", action="store_true")
    parser.add_argument("--small", action="store_true", help=f"{SMALL}: 512 responses to ids, logprobs and mask")
    parser.add_argument("--floor", action="store_true", help="memcpy's bandwidth and the workload's floor")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, path, rounds = args.child
        result = (bandwidth(path, int(rounds)) if name == "bandwidth" else floor(path, int(rounds)) if name == "floor"
                  else child(name, path, int(rounds)))
        print(json.dumps(result))
        return 0
    workload = SMALL if args.small else WORKLOAD
    args.responses = args.responses or (512 if args.small else 256)
    path = _responses(args.responses, args.cache, workload)
    results: dict[str, Any] = {"responses": args.responses, "workload": workload, "runs": []}
    if args.floor:
        for repeat in range(args.repeats):
            before = _load()
            row = _spawn(["--child", "floor", path, "9"])
            row["load"] = [before, _load()]
            results["runs"].append(row)
            print(f"[{repeat + 1}] memcpy {row['memcpy_gb_per_s']:.2f} GB/s, read {row['read'] / 1e6:.1f} MB, "
                  f"written {row['written'] / 1e6:.1f} MB: floor {row['floor_s'] * 1e3:.2f} ms  "
                  f"(load {before} -> {_load()})", file=sys.stderr)
        results["floor_s"] = statistics.median(r["floor_s"] for r in results["runs"])
        print(f"floor {results['floor_s'] * 1e3:.2f} ms")
    elif args.bandwidth:
        for repeat in range(args.repeats):
            before = _load()
            row = _spawn(["--child", "bandwidth", path, str(max(args.rounds, 3))])
            row["load"] = [before, _load()]
            results["runs"].append(row)
            print(f"[{repeat + 1}] {row['bytes'] / 1e6:.0f} MB  " + "  ".join(
                f"{k} {v:.2f} GB/s" for k, v in row["gb_per_s"].items()) + f"  (load {before} -> {_load()})",
                file=sys.stderr)
    else:
        chosen = args.contender or list(SMALL_CONTENDERS if args.small else CONTENDERS)
        for repeat in range(args.repeats):
            order = chosen if repeat % 2 == 0 else chosen[::-1]
            for name in order:
                before = _load()
                row = _spawn(["--child", name, path, str(args.rounds)])
                row["load"] = [before, _load()]
                row["repeat"] = repeat
                results["runs"].append(row)
                print(f"[{repeat + 1}] {name:13} {row['median_s'] * 1e3:9.1f} ms  (load {before} -> {_load()})",
                      file=sys.stderr)
        medians = {name: statistics.median(r["median_s"] for r in results["runs"] if r["contender"] == name)
                   for name in chosen}
        results["medians_s"] = medians
        for name, seconds in medians.items():
            print(f"{name:13} {seconds * 1e3:9.1f} ms")
        pairs = (("loop", "batch"), ("loop", "batch-out"), ("loop", "direct"), ("orjson", "batch-nohead"),
                 ("orjson", "direct-nohead"), ("orjson", "direct"), ("orjson", "direct-2t"), ("orjson", "batch"),
                 ("batch", "batch-2t"), ("batch-nohead", "direct-nohead"), ("batch-nohead", "direct"))
        for slow, fast in pairs:
            if slow in medians and fast in medians:
                print(f"{slow} / {fast}: {medians[slow] / medians[fast]:.2f}x")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
