"""tokenwire.compat.verifiers.check_generate_result on generate() results made here: what the
verifiers drop-in refuses before verifiers' response_from_generate sees a result (no verifiers
needed; renderers' error class joins in when renderers is installed)."""

from __future__ import annotations

import base64
import math

import numpy as np
import pytest

from tokenwire import MalformedResponseError
from tokenwire.compat import verifiers as compat

PROMPT = [1, 2, 3]


def result(n: int = 6, *, start: int = 0) -> dict:
    ids = list(range(10, 10 + n))
    rows = len(PROMPT) + n - 1 - start
    routing = (np.arange(rows * 2 * 2) % 7).astype(np.uint8)
    return {
        "prompt_ids": list(PROMPT), "completion_ids": ids, "completion_logprobs": [-0.5] * n,
        "sampling_mask": [[i, 99] for i in ids],
        "routed_experts": {"data": memoryview(base64.b64encode(routing.tobytes())), "shape": [rows, 2, 2],
                           "start": start},
    }


def test_valid_results_pass_and_give_the_mask_rows():
    for r in (result(), result(1), result(6, start=2), {**result(), "sampling_mask": None, "routed_experts": None}):
        rows = compat.check_generate_result(r)
        if r["sampling_mask"]:
            assert rows.to_lists() == r["sampling_mask"]
            assert rows.values.dtype == np.int32
        else:
            assert rows is None
    as_array = {**result(), "completion_logprobs": np.full(6, -0.5, np.float32)}  # renderers 0.1.13.dev17
    compat.check_generate_result(as_array)


def _bad(**changes):
    r = result()
    for key, edit in changes.items():
        r[key] = edit(r[key])
    return r


@pytest.mark.parametrize("r,message", [
    (_bad(completion_logprobs=lambda v: v + [-0.1]), r"completion token count \(6\) does not match logprob count \(7\)"),
    (_bad(completion_logprobs=lambda v: v[:3] + [None] + v[4:]), r"content\[3\]\.logprob must be a number"),
    (_bad(completion_logprobs=lambda v: v[:3] + [-9999.0] + v[4:]), r"content\[3\]\.logprob does not contain sampling"),
    (_bad(completion_logprobs=lambda v: v[:3] + [math.nan] + v[4:]), r"content\[3\]\.logprob must be finite"),
    (_bad(completion_logprobs=lambda v: np.array(v[:3] + [math.inf] + v[4:], np.float32)), r"content\[3\]\.logprob must be finite"),
    (_bad(completion_logprobs=lambda v: None), r"logprobs must be an object"),
    (_bad(sampling_mask=lambda m: m[:2] + [[99]] + m[3:]), r"Invalid recorded sampling support"),
    (_bad(sampling_mask=lambda m: m[:-1]), r"Sampling mask token count mismatch"),
])
def test_each_misalignment_is_refused(r, message):
    with pytest.raises(MalformedResponseError, match=message) as info:
        compat.check_generate_result(r)
    try:
        from renderers import MalformedGenerateResponseError
    except Exception:  # renderers not installed: tokenwire's class alone
        return
    assert isinstance(info.value, MalformedGenerateResponseError)


def test_routing_rows_are_counted_from_start():
    r = result()
    rows, layers, topk = r["routed_experts"]["shape"]
    data = base64.b64decode(bytes(r["routed_experts"]["data"]))[: (rows - 1) * layers * topk]
    short = {**r, "routed_experts": {"data": base64.b64encode(data).decode(), "shape": [rows - 1, layers, topk],
                                     "start": 0}}
    with pytest.raises(MalformedResponseError, match=r"routed_experts has 7 rows, not 8: one per token of the "
                                                     r"prompt \(3\) and of the completion \(6\) but the last"):
        compat.check_generate_result(short)
    # The same rows from position 1 on are the right count.
    compat.check_generate_result({**short, "routed_experts": {**short["routed_experts"], "start": 1}})
    with pytest.raises(MalformedResponseError, match="Invalid routed_experts base64"):
        compat.check_generate_result({**r, "routed_experts": {**r["routed_experts"], "data": memoryview(b"@@@@")}})


def test_bad_arguments():
    with pytest.raises(TypeError, match="a generate\\(\\) result is a dict"):
        compat.check_generate_result([1])
