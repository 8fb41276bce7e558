"""Evidence handed over in process: ``tokenwire.validate_vllm_output`` on a vLLM-shaped
``CompletionOutput`` against the loop OpenRLHF runs on it today, a fresh process per
contender and turn, distinct outputs, medians.

    python benchmarks/in_process.py                    # 32k tokens, logprobs=0 and logprobs=5
    python benchmarks/in_process.py --tokens 8192 --turns 2

The output objects are ``tokenwire.samples.vllm_output``'s, built as vLLM's classes declare
them (``vllm/outputs.py``, ``vllm/logprobs.py``): ``token_ids`` a list, ``logprobs`` a list of
one ``{token_id: Logprob(logprob, rank, decoded_token)}`` dict per position (the sampled
token first, then the top ``logprobs``), or a ``FlatLogprobs`` of flat lists, float32 values.

Contenders (each ends with the sampled logprobs of every token as one float32 array):

- ``loop``: OpenRLHF's reading (``openrlhf/utils/agent.py``): per position
  ``logprobs[i].get(token_id)``, ``.logprob`` or ``0.0`` when missing, into a list, then
  ``np.array(..., float32)``; nothing is checked;
- ``validate-dicts``: ``tokenwire.validate_vllm_output(output)`` on the dicts;
- ``validate-flat``: the same on a ``FlatLogprobs``;
- ``validate-arrays``: ``tokenwire.validate(completion_ids=ids, completion_logprobs=lps)`` on
  numpy arrays (what a trainer holding tensors calls).

Each process builds ``--outputs`` distinct outputs, times one call on each (the first, a
warm-up, not counted) and reports the median; a contender's figure is the median over its
processes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

CONTENDERS = ("loop", "validate-dicts", "validate-flat", "validate-arrays")


def build(seed: int, tokens: int, num_logprobs: int, flat: bool) -> Any:
    from tokenwire import samples

    return samples.vllm_output(tokens, num_logprobs, flat=flat, seed=seed)


def openrlhf_loop(output: Any) -> np.ndarray:
    values = []
    for i, token_id in enumerate(output.token_ids):
        token_logprob = output.logprobs[i].get(token_id)
        values.append(token_logprob.logprob if token_logprob is not None else 0.0)
    return np.array(values, dtype=np.float32)


def child(contender: str, tokens: int, num_logprobs: int, outputs: int, seed: int) -> float:
    import tokenwire

    flat = contender == "validate-flat"
    built = [build(seed + i, tokens, num_logprobs, flat) for i in range(outputs)]
    if contender == "loop":
        call = openrlhf_loop
    elif contender == "validate-arrays":
        built = [(np.array(o.token_ids), openrlhf_loop(o)) for o in built]

        def call(pair):
            return tokenwire.validate(completion_ids=pair[0], completion_logprobs=pair[1]).completion_logprobs
    else:
        def call(output):
            return tokenwire.validate_vllm_output(output).completion_logprobs
    times = []
    for output in built:
        start = time.perf_counter()
        result = call(output)
        times.append(time.perf_counter() - start)
        assert len(result) == tokens
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--logprobs", type=int, nargs="*", default=[0, 5])
    parser.add_argument("--outputs", type=int, default=6)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--child", nargs=4, metavar=("CONTENDER", "TOKENS", "LOGPROBS", "SEED"))
    args = parser.parse_args()
    if args.child:
        contender, tokens, num_logprobs, seed = args.child
        print(json.dumps(child(contender, int(tokens), int(num_logprobs), args.outputs, int(seed))))
        return
    results: dict[tuple[str, int], list[float]] = {}
    for turn in range(args.turns):
        for num_logprobs in args.logprobs:
            for contender in CONTENDERS:
                out = subprocess.run([sys.executable, __file__, "--outputs", str(args.outputs), "--child", contender,
                                      str(args.tokens), str(num_logprobs), str(1000 * turn)],
                                     check=True, capture_output=True, text=True)
                results.setdefault((contender, num_logprobs), []).append(json.loads(out.stdout))
    print(f"{args.tokens} tokens, {args.outputs - 1} timed outputs a process, {args.turns} processes a contender")
    print("| logprobs | contender | ms (median of processes) | processes |")
    print("|---|---|---|---|")
    for (contender, num_logprobs), times in results.items():
        print(f"| {num_logprobs} | {contender} | {1e3 * statistics.median(times):.2f} | "
              f"{', '.join(f'{1e3 * t:.2f}' for t in times)} |")


if __name__ == "__main__":
    main()
