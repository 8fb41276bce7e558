"""``num_experts=`` on the parsers that read MoE routing replay: an expert id at or above a
model's expert count is no expert, on both implementations and every SIMD path."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np
import pytest

from tokenwire import MalformedResponseError


def npy(array: np.ndarray) -> str:
    """A routing array as vLLM's server sends it: a whole .npy file, base64."""
    buffer = io.BytesIO()
    np.save(buffer, array)
    return base64.b64encode(buffer.getvalue()).decode()


def routing(rows: int, dtype: Any = np.uint8, layers: int = 3, topk: int = 2) -> np.ndarray:
    return (np.arange(rows * layers * topk) % 63).astype(dtype).reshape(rows, layers, topk)


def _generate(routed: Any) -> bytes:
    return json.dumps({"choices": [{"token_ids": [1], "logprobs": None, "routed_experts": routed}]}).encode()


@pytest.mark.parametrize("form", ["npy", "prime-rl"])
def test_generate_bounds_expert_ids_too(impl, form):
    sent = routing(4, np.uint16)
    sent[2, 0, 0] = 300

    def field(array):
        if form == "npy":
            return npy(array)
        return {"data": base64.b64encode(array.tobytes()).decode(), "shape": list(array.shape), "dtype": "uint16"}

    assert impl.parse_generate_response(_generate(field(sent)), require_logprobs=False, num_experts=301)
    with pytest.raises(MalformedResponseError, match="expert id 300 at layer 0, not below num_experts=300$") as err:
        impl.parse_generate_response(_generate(field(sent)), require_logprobs=False, num_experts=300)
    assert (err.value.choice, err.value.field, err.value.token) == (0, "routed_experts", 2)


@pytest.mark.parametrize(("value", "error"), [(0, ValueError), (2**31 + 1, ValueError), (True, TypeError),
                                              ("8", TypeError), (8.0, TypeError)])
def test_num_experts_is_checked_before_the_response(impl, value, error):
    with pytest.raises(error, match="num_experts"):
        impl.parse_generate_response(b"not json", num_experts=value)
    assert impl.parse_generate_response(_generate(npy(routing(2))), require_logprobs=False,
                                        num_experts=np.int64(2**31))
