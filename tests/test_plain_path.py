"""The compiled core's plain path (a generate response whose choices carry only token ids
and packed logprobs, built straight from the scan) against the rules: it takes exactly the
plain responses that are valid, and gives what the rules give; anything else goes to the
rules, which decide as they do without it."""

from __future__ import annotations

import gc
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire import samples

from . import strategies
from .conftest import PYTHON, _core
from .test_differential import outcome

pytestmark = pytest.mark.skipif(_core is None, reason="the compiled core is not built")
EXAMPLES = int(os.environ.get("TOKENWIRE_DIFF_EXAMPLES", "5000")) // 8

# What turns a plain choice into one the plain path must hand over (or a malformed one).
_CHOICE_CHANGES = (
    "logprobs_dict", "logprobs_str", "compact_too", "mask_list", "kept", "routed", "packed_null",
    "packed_not_object", "data_missing", "data_not_str", "data_bad", "shape_float", "shape_bool",
    "shape_str", "dtype_unknown", "dtype_not_str", "odd_bytes", "ids_null",
)
_DOCUMENT_CHANGES = ("prompt_null", "prompt_bad", "prompt_str", "prompt_missing", "choices_empty",
                     "choice_list", "request_id_missing", "usage_missing")
# Changes that leave a valid plain response: the plain path must still take it.
_STILL_PLAIN = ("prompt_null", "prompt_missing", "request_id_missing", "usage_missing")


def _change_choice(choice: dict[str, Any], name: str, draw) -> None:
    packed = choice["completion_logprobs"]
    n = len(choice["token_ids"])
    if name == "logprobs_dict":
        choice["logprobs"] = {"content": [{"token": "token_id:1", "logprob": -1.0}] * n}
    elif name == "logprobs_str":
        choice["logprobs"] = "x"
    elif name == "compact_too":
        choice["compact_logprobs"] = {"format": "u32-f32-le-v1", "offsets": list(range(n + 1)),
                                      "data": samples.b64(b"\0" * 8 * n), "num_top_logprobs": 0}
    elif name == "mask_list":
        choice["sampling_mask"] = [[int(t)] for t in choice["token_ids"]]
    elif name == "kept":
        choice["kept_tokens"] = {"ids": samples.b64(np.array(choice["token_ids"], "<i4").tobytes()),
                                 "counts": samples.b64(np.ones(n, "<i4").tobytes())}
    elif name == "routed":
        choice["routed_experts"] = {"data": samples.b64(b"\1" * max(n, 1) * 4), "shape": [max(n, 1), 2, 2],
                                    "dtype": "uint8"}
    elif name == "packed_null":
        choice["completion_logprobs"] = None
    elif name == "packed_not_object":
        choice["completion_logprobs"] = [packed]
    elif name == "data_missing":
        del packed["data"]
    elif name == "data_not_str":
        packed["data"] = [packed["data"]]
    elif name == "data_bad":
        packed["data"] = draw(st.sampled_from(["@" + packed["data"][1:], packed["data"] + "=", "A"]))
    elif name == "shape_float":
        packed["shape"] = [float(n)]
    elif name == "shape_bool":
        packed["shape"] = [True]
    elif name == "shape_str":
        packed["shape"] = str(n)
    elif name == "dtype_unknown":
        packed["dtype"] = draw(st.sampled_from(["float16", "Float32", "float32 "]))
    elif name == "dtype_not_str":
        packed["dtype"] = draw(st.sampled_from([None, 4, ["float32"]]))
    elif name == "odd_bytes":
        packed["data"] = samples.b64(samples.base64.b64decode(packed["data"]) + b"\0")
        packed.pop("shape", None)
    elif name == "ids_null":
        choice["token_ids"] = None


@st.composite
def plain_choice(draw, index: int) -> dict[str, Any]:
    # Long ones too: base64 the scan decodes itself (over 4 KiB) and checks without the GIL.
    n = draw(st.one_of(st.integers(0, 8), st.integers(100, 300), st.sampled_from([1100, 4200])))
    ev = samples.evidence(n, 0, seed=draw(st.integers(0, 2**16)))
    choice = samples.build_choice(ev, transport="packed", index=index)
    packed = choice["completion_logprobs"]
    if draw(st.booleans()):
        packed["dtype"] = "float64"
        packed["data"] = samples.b64(ev.logprobs.astype("<f8").tobytes())
    if draw(st.integers(0, 3)) == 0:
        del packed["shape"]
    for key in draw(st.lists(st.sampled_from(["text", "stop_reason", "logprobs", "index"]), unique=True, max_size=2)):
        del choice[key]
    if draw(st.integers(0, 4)) == 0:
        choice["extra"] = {"token_ids": [1], "completion_logprobs": {"data": "!!"}}
    return choice


@st.composite
def plain_cases(draw) -> tuple[strategies.Case, bool]:
    """A generate response of plain packed choices, maybe changed; and whether it is left as
    made (then valid, and plain)."""
    count = draw(st.integers(1, 3))
    chosen = [draw(plain_choice(i)) for i in range(count)]
    document: Any = samples.response(chosen, prompt_tokens=draw(st.integers(0, 6)), seed=draw(st.integers(0, 99)))
    change = draw(st.sampled_from([None, None, "mutation", "choice", "document"]))
    target = draw(st.integers(0, count - 1))
    if change == "mutation":  # the generator's own packed and token id mutations
        strategies._apply(chosen[target], draw(st.sampled_from(strategies._mutations(chosen[target]))), draw)
    elif change == "choice":
        _change_choice(chosen[target], draw(st.sampled_from(_CHOICE_CHANGES)), draw)
    name = None
    if change == "document":
        name = draw(st.sampled_from(_DOCUMENT_CHANGES))
        if name == "prompt_null":
            document["prompt_token_ids"] = None
        elif name == "prompt_bad":
            document["prompt_token_ids"] = draw(st.sampled_from([[-1], [2**32], [1.0], [True]]))
        elif name == "prompt_str":
            document["prompt_token_ids"] = "1,2"
        elif name == "choices_empty":
            document["choices"] = []
        elif name == "choice_list":
            document["choices"][target] = [chosen[target]]
        else:
            document.pop(name[: -len("_missing")], None)
    spelling = draw(st.sampled_from(strategies.SPELLINGS))
    raw: Any = strategies.spell(document, spelling, seed=draw(st.integers(0, 99)))
    # Every input type: bytes without a view, and the views (a bytearray is copied first).
    raw = draw(st.sampled_from([raw, raw, bytearray(raw), memoryview(raw), raw.decode()]))
    plain = change is None or (change == "document" and name in _STILL_PLAIN)
    return strategies.Case(raw, None, change, spelling), plain


@settings(max_examples=EXAMPLES, deadline=None)
@given(plain_cases())
def test_plain_path_is_the_rules(drawn):
    case, plain = drawn
    expected = outcome(PYTHON, case)
    for path in _core.simd_paths():
        with _core.simd_path_forced(path):
            assert outcome(_core, case) == expected, path
            taken = _core._plain_generate_response(case.raw)
            if plain:
                assert taken is not None, "a plain valid response went to the rules"
            if taken is not None:
                assert expected[0] == "ok"
                assert outcome(_Given(taken), case) == expected, path
                assert _orders(taken) == _orders(PYTHON.parse_generate_response(case.raw))


def _orders(response: Any) -> tuple:
    """The key orders ``outcome`` does not see (dicts compare equal in any order)."""
    return [list(c.raw) for c in response.choices], list(response.payload)


class _Given:
    """An implementation that returns a parse made already (for ``outcome``)."""

    def __init__(self, response: Any) -> None:
        self.response = response

    def parse_generate_response(self, raw: Any, top_k: Any = None) -> Any:
        return self.response


def test_plain_path_keeps_the_choice_fields_the_rules_keep():
    """raw keeps every field but the consumed ones, in order; payload every top-level field
    but choices and prompt ids; the logprobs keep their dtype; the arrays own their memory."""
    ev = samples.evidence(5, 0, seed=3)
    choice = samples.build_choice(ev, transport="packed", index=0)
    choice["zeta"] = {"a": [1, 2]}
    raw = samples.dumps(samples.response([choice], prompt_tokens=3) | {"kv_transfer_params": None})
    got = _core._plain_generate_response(raw)
    assert got is not None
    c = got.choices[0]
    assert list(c.raw) == ["text", "logprobs", "stop_reason", "zeta"]
    assert c.raw["zeta"] == {"a": [1, 2]}
    assert c.completion_logprobs.dtype == np.dtype("<f4")
    assert c.completion_logprobs.tolist() == ev.logprobs.astype("<f4").tolist()
    assert c.completion_ids.tolist() == ev.ids.tolist()
    # The arrays keep their memory: the values outlive the response and a collection.
    ids, logprobs = c.completion_ids, c.completion_logprobs
    del got, c
    gc.collect()
    assert ids.tolist() == ev.ids.tolist()
    assert logprobs.tolist() == ev.logprobs.astype("<f4").tolist()
    got = _core._plain_generate_response(raw)
    assert list(got.payload) == ["request_id", "usage", "kv_transfer_params"]
    assert got.prompt_token_ids.dtype == np.int64 and len(got.prompt_token_ids) == 3
