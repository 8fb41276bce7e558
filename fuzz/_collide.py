"""Responses of ids and keys built to collide under the fixed hashes the compiled core's tables
once slotted with (csrc/base/tw_hash.h replaced them): a table with such a hash lines them all up in
one probe cluster. Shared by fuzz_collide.py, the seeds (_common.py) and
tests/test_hash_flooding.py."""

from __future__ import annotations

import base64
import functools
import json

import numpy as np

GOLDEN32 = 0x9E3779B1  # (id * GOLDEN32) mod 2**32, its top bits the slot (compact rows)
GOLDEN64 = 0x9E3779B97F4A7C15  # (id * GOLDEN64) mod 2**64, its top bits the slot (candidates)
FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3  # FNV-1a, its low bits the slot (keys)


def ids_one_cluster32(n: int) -> list[int]:
    """n distinct ids whose products with GOLDEN32 are 0, 1, ..., n - 1 (mod 2**32): all in
    the first slots of a table slotted by the product's top bits."""
    inverse = pow(GOLDEN32, -1, 2**32)
    return [j * inverse % 2**32 for j in range(n)]


@functools.cache
def ids_top_bits_zero64(n: int) -> tuple[int, ...]:
    """The first n ids below 2**32 whose products with GOLDEN64 have their top 12 bits zero
    (one id in 4096): all in the first 2**(bits - 12) slots of a table of 2**bits."""
    found: list[int] = []
    chunk = 1 << 22
    for start in range(0, 2**32, chunk):
        ids = np.arange(start, start + chunk, dtype=np.uint64)
        with np.errstate(over="ignore"):
            top = (ids * np.uint64(GOLDEN64)) >> np.uint64(52)
        found.extend(ids[top == 0].tolist())
        if len(found) >= n:
            break
    return tuple(found[:n])


def _fnv1a(prefix: bytes, numbers: np.ndarray, digits: int) -> np.ndarray:
    """FNV-1a of prefix + each number's `digits` decimal digits."""
    h = FNV_OFFSET
    for c in prefix:
        h = ((h ^ c) * FNV_PRIME) % 2**64
    state = np.full(len(numbers), h, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for d in range(digits - 1, -1, -1):
            c = (numbers // 10**d % 10 + ord("0")).astype(np.uint64)
            state = (state ^ c) * np.uint64(FNV_PRIME)
    return state


@functools.cache
def keys_low_bits_shared(n: int) -> tuple[int, ...]:
    """The first n ids N of seven digits whose keys "token_id:N" have FNV-1a hashes with their
    low 16 bits below 512 (one in 128): one cluster at the start of a table of up to 2**16
    slots masked to the hash's low bits (and two of a table of 2**17)."""
    found: list[int] = []
    chunk = 1 << 20
    for start in range(10**6, 10**7, chunk):
        numbers = np.arange(start, min(start + chunk, 10**7), dtype=np.int64)
        h = _fnv1a(b"token_id:", numbers, 7)
        found.extend(numbers[(h & np.uint64(0xFFFF)) < 512].tolist())
        if len(found) >= n:
            break
    return tuple(found[:n])


# --- responses: one token, its candidates `ids` (repeats allowed) with `values` -----------------


def compact(ids, values, sampled: int, num_top: int) -> bytes:
    """/inference/v1/generate, compact_logprobs: one row."""
    data = np.asarray(ids, "<u4").tobytes() + np.asarray(values, "<f4").tobytes()
    rows = {"data": base64.b64encode(data).decode(), "format": "u32-f32-le-v1",
            "offsets": [0, len(ids)], "num_top_logprobs": num_top}
    choice = {"index": 0, "token_ids": [sampled], "finish_reason": "stop", "compact_logprobs": rows}
    return json.dumps({"choices": [choice]}).encode()


def _content(ids, values, sampled: int, lp: float) -> list:
    top = [{"token": f"token_id:{i}", "logprob": v} for i, v in zip(ids, values)]
    return [{"token": f"token_id:{sampled}", "logprob": lp, "top_logprobs": top}]


def _usage() -> dict:
    return {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}


def native(ids, values, sampled: int, lp: float) -> bytes:
    """/inference/v1/generate, logprobs.content: one entry and its top_logprobs list."""
    choice = {"index": 0, "token_ids": [sampled], "finish_reason": "stop",
              "logprobs": {"content": _content(ids, values, sampled, lp)}}
    return json.dumps({"choices": [choice]}).encode()


def chat(ids, values, sampled: int, lp: float) -> bytes:
    """/v1/chat/completions with return_token_ids and return_tokens_as_token_ids."""
    choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop",
              "logprobs": {"content": _content(ids, values, sampled, lp)}, "token_ids": [sampled]}
    return json.dumps({"object": "chat.completion", "choices": [choice], "prompt_token_ids": [1],
                       "usage": _usage()}).encode()


def sglang(ids, values, sampled: int, lp: float) -> bytes:
    """SGLang /generate: output_top_logprobs triples."""
    meta = {"completion_tokens": 1, "output_token_logprobs": [[lp, sampled, None]],
            "output_top_logprobs": [[[v, i, None] for i, v in zip(ids, values)]]}
    return json.dumps({"output_ids": [sampled], "meta_info": meta}).encode()


def completions(ids, values, sampled: int, lp: float) -> bytes:
    """/v1/completions with return_tokens_as_token_ids: top_logprobs keyed by "token_id:N" (a
    repeated id is a repeated key, written out as sent: JSON text, not a dict)."""
    row = "{" + ",".join(f'"token_id:{i}":{json.dumps(v)}' for i, v in zip(ids, values)) + "}"
    logprobs = {"tokens": [f"token_id:{sampled}"], "token_logprobs": [lp], "text_offset": [0],
                "top_logprobs": ["ROW"]}
    choice = {"index": 0, "text": "x", "logprobs": logprobs, "finish_reason": "stop",
              "token_ids": [sampled]}
    doc = json.dumps({"object": "text_completion", "choices": [choice], "usage": _usage()})
    return doc.replace('["ROW"]', "[" + row + "]").encode()


def distinct_values(n: int) -> list[float]:
    """-1/n, -2/n, ..., -1: every candidate's logprob distinct, exact in float32."""
    return [float(np.float32(-(j + 1) / n)) for j in range(n)]
