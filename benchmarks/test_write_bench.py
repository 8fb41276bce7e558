"""Writing a response: 16k-token MoE routing and an 8k-token compact top-20 block, from arrays."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

import tokenwire
from tokenwire import samples


@pytest.fixture(scope="module")
def arrays():
    ev = samples.evidence(8192, 22, seed=1)
    row_ids = np.concatenate([ev.ids[:, None], ev.cand_ids], axis=1).reshape(-1).astype(np.uint32)
    row_lps = np.concatenate([ev.logprobs[:, None], ev.cand_logprobs], axis=1).reshape(-1)
    offsets = np.arange(0, 8192 * 23 + 1, 23)
    return ev.ids, row_ids, row_lps, offsets, samples.routing(16383)


def head(ids):
    return {"request_id": "bench", "usage": {"prompt_tokens": 8192, "completion_tokens": len(ids)}}


def test_tokenwire_write(benchmark, arrays):
    ids, row_ids, row_lps, offsets, routing = arrays
    benchmark.group = "write moe16k+compact8k"

    def write():
        choice = {
            "index": 0,
            "token_ids": ids.tolist(),
            "compact_logprobs": tokenwire.encode_compact_logprobs(row_ids, row_lps, offsets, 22),
            "routed_experts": tokenwire.encode_routed_experts(routing, start=0),
        }
        return tokenwire.dumps_generate_response({**head(ids), "choices": [choice]})

    assert tokenwire.parse_generate_response(benchmark(write)).choices[0].routed_experts is not None


def test_stdlib_write(benchmark, arrays):
    ids, row_ids, row_lps, offsets, routing = arrays
    benchmark.group = "write moe16k+compact8k"

    def write():
        data = base64.b64encode(row_ids.astype("<u4").tobytes() + row_lps.astype("<f4").tobytes()).decode("ascii")
        choice = {
            "index": 0,
            "token_ids": ids.tolist(),
            "compact_logprobs": {"data": data, "format": "u32-f32-le-v1", "offsets": offsets.tolist(), "num_top_logprobs": 22},
            "routed_experts": {"data": base64.b64encode(routing.tobytes()).decode("ascii"), "shape": list(routing.shape), "start": 0, "dtype": "uint8"},
        }
        return json.dumps({**head(ids), "choices": [choice]}, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()

    benchmark(write)
