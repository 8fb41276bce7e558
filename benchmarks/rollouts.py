"""Multi-turn rollouts held in memory: ``tokenwire.Trajectory`` (growing numpy arrays)
against the same data held as Python lists of ints and floats, as rollout collectors hold
it today. A fresh process per contender and repeat; each measures its resident memory
(``VmRSS``) before and after building the trajectories, and the time of a full
``gc.collect()`` with them alive (median of 5).

    python benchmarks/rollouts.py                                  # 16 x 32k tokens, 48 x 8 routing
    python benchmarks/rollouts.py --trajectories 64 --contenders arrays

Each trajectory is ``--turns`` turns of ``--tokens / --turns`` tokens: a tool's output (an
eighth of the turn, out of the loss, no logprob) then a completion; per token an id, a
logprob, a loss-mask flag, and the MoE routing row of the position (``--layers`` x
``--topk`` uint8), every position but the last. Contenders:

- ``lists``: per trajectory a list of ids (ints), of logprobs (floats), of loss-mask flags
  (bools) and of routing rows (a list of ``layers * topk`` ints per position, as
  ``array.tolist()`` gives them), each turn appended with ``list.extend``;
- ``arrays``: per trajectory a ``tokenwire.Trajectory``, each turn appended with
  ``append_tokens`` (the tool's output) and ``append`` (the completion as a
  ``GenerateChoice`` with its routing rows from the trajectory's routing end).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time

import numpy as np


def rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def turns_of(rng: np.random.Generator, tokens: int, turns: int, layers: int, topk: int):
    """Per turn: the tool's ids, the completion's ids and logprobs, and the routing rows of
    the turn's positions (its tool tokens and completion, the first turn's routing one row
    short: the last token of the trajectory so far is never routed)."""
    size = tokens // turns
    for _ in range(turns):
        tool = rng.integers(0, 150_000, size // 8)
        ids = rng.integers(0, 150_000, size - len(tool))
        lps = -rng.exponential(1.0, len(ids)).astype(np.float32)
        yield tool, ids, lps, (layers, topk)


def build_lists(args: argparse.Namespace, rng: np.random.Generator) -> list[dict[str, list]]:
    held = []
    for _ in range(args.trajectories):
        t: dict[str, list] = {"ids": [], "logprobs": [], "loss_mask": [], "routed_experts": []}
        for tool, ids, lps, (layers, topk) in turns_of(rng, args.tokens, args.turns, layers=args.layers,
                                                        topk=args.topk):
            t["ids"].extend(tool.tolist())
            t["ids"].extend(ids.tolist())
            t["logprobs"].extend([0.0] * len(tool))
            t["logprobs"].extend(lps.tolist())
            t["loss_mask"].extend([False] * len(tool))
            t["loss_mask"].extend([True] * len(ids))
            routed = rng.integers(0, 256, (len(tool) + len(ids), layers * topk), dtype=np.uint8)
            t["routed_experts"].extend(routed.tolist())
        t["routed_experts"].pop()  # the last position is never routed
        held.append(t)
    return held


def build_arrays(args: argparse.Namespace, rng: np.random.Generator) -> list:
    import tokenwire

    held = []
    for _ in range(args.trajectories):
        t = tokenwire.Trajectory()
        for tool, ids, lps, (layers, topk) in turns_of(rng, args.tokens, args.turns, layers=args.layers,
                                                        topk=args.topk):
            t.append_tokens(tool)
            start = t.routing_end if t.routing_end is not None else 0
            rows = len(t) + len(ids) - 1 - start
            routed = rng.integers(0, 256, (rows, layers, topk), dtype=np.uint8)
            t.append(tokenwire.GenerateChoice(0, ids, lps, routed_experts=tokenwire.RoutedExperts(routed, start)),
                     prompt_token_ids=t.ids)
        held.append(t)
    return held


def child(args: argparse.Namespace) -> dict[str, float]:
    import tokenwire  # noqa: F401 (imported before the baseline, as a trainer has it)

    rng = np.random.default_rng(args.seed)
    gc.collect()
    before = rss()
    start = time.perf_counter()
    held = (build_lists if args.child == "lists" else build_arrays)(args, rng)
    built = time.perf_counter() - start
    gc.collect()
    after = rss()
    pauses = []
    for _ in range(5):
        start = time.perf_counter()
        gc.collect()
        pauses.append(time.perf_counter() - start)
    tokens = args.trajectories * (args.tokens // args.turns) * args.turns
    assert len(held) == args.trajectories
    return {"bytes_per_token": (after - before) / max(tokens, 1), "gc_ms": 1e3 * statistics.median(pauses),
            "build_s": built, "rss_mib": (after - before) / 2**20, "objects": len(gc.get_objects())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--contenders", nargs="*", default=["lists", "arrays"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    print(f"{args.trajectories} trajectories x {args.tokens} tokens in {args.turns} turns, routing {args.layers} x "
          f"{args.topk} uint8; {args.repeats} processes a contender")
    print("| contender | bytes/token | RSS MiB | full gc.collect() ms | build s | gc-tracked objects |")
    print("|---|---|---|---|---|---|")
    for contender in args.contenders:
        runs = []
        for repeat in range(args.repeats):
            command = [sys.executable, __file__, "--child", contender, "--seed", str(repeat)]
            for name in ("trajectories", "tokens", "turns", "layers", "topk"):
                command += [f"--{name}", str(getattr(args, name))]
            runs.append(json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout))

        def med(key: str) -> float:
            return statistics.median(r[key] for r in runs)

        print(f"| {contender} | {med('bytes_per_token'):.0f} | {med('rss_mib'):.0f} | {med('gc_ms'):.1f} | "
              f"{med('build_s'):.2f} | {med('objects'):.0f} |")


if __name__ == "__main__":
    main()
