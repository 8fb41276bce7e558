"""The compiled core's plain path (a generate response without a head whose choices carry
only token ids and packed logprobs or compact rows, built straight from the scan) against
the rules: it takes exactly the plain responses that are valid, and gives what the rules
give; anything else goes to the rules, which decide as they do without it."""

from __future__ import annotations

import gc
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire.base import _table
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
    "shape_str", "dtype_unknown", "dtype_not_str", "odd_bytes", "ids_null", "weight_versions",
)
# The same for a choice with compact rows.
_COMPACT_CHANGES = (
    "logprobs_dict", "logprobs_str", "packed_too", "mask_list", "kept", "routed", "compact_null",
    "compact_not_object", "format_missing", "format_not_str", "num_top_missing", "num_top_str",
    "num_top_float", "offsets_str", "offsets_nested", "offsets_empty_rows", "offsets_extra", "offsets_negative",
    "data_missing", "data_not_str", "data_odd", "ids_null", "num_top_huge", "weight_versions",
) + tuple(name for name in strategies._mutations({"compact_logprobs": {}}) if name.startswith("compact."))
# Changes to a compact choice that leave it valid and plain.
_COMPACT_STILL_PLAIN = ("num_top_big", "num_top_minus_one", "packed_null", "ids_empty", "weight_versions_null")
_DOCUMENT_CHANGES = ("prompt_null", "prompt_bad", "prompt_str", "prompt_missing", "choices_empty",
                     "choice_list", "request_id_missing", "usage_missing")
# Changes that leave a valid plain response: the plain path must still take it.
_STILL_PLAIN = ("prompt_null", "prompt_missing", "request_id_missing", "usage_missing")


def _change_object(choice: dict[str, Any], field: str, name: str) -> bool:
    """The changes packed logprobs (``packed_*``) and compact rows (``compact_*``) share;
    whether ``name`` was one."""
    value = choice[field]
    prefix = "compact" if field == "compact_logprobs" else "packed"
    if name == prefix + "_null":
        choice[field] = None
    elif name == prefix + "_not_object":
        choice[field] = [value]
    elif name == "data_missing":
        del value["data"]
    elif name == "data_not_str":
        value["data"] = [value["data"]]
    else:
        return False
    return True


def _change_compact(choice: dict[str, Any], name: str, draw) -> None:
    packed = choice["compact_logprobs"]
    n = len(choice["token_ids"])
    if _change_object(choice, "compact_logprobs", name):
        pass
    elif name.startswith("compact."):  # the generator's own: offsets, values, sampled ids, repeats
        strategies._apply_compact(packed, name[len("compact."):], n, draw)
    elif name == "packed_too":
        choice["completion_logprobs"] = {"data": samples.b64(b"\0" * 4 * n), "shape": [n], "dtype": "float32"}
    elif name in ("logprobs_dict", "logprobs_str", "mask_list", "kept", "routed", "ids_null", "weight_versions",
                  "weight_versions_null"):
        choice["completion_logprobs"] = {}  # a placeholder _change_choice's packed view needs
        _change_choice(choice, name, draw)
        del choice["completion_logprobs"]
    elif name == "format_missing":
        del packed["format"]
    elif name == "format_not_str":
        packed["format"] = draw(st.sampled_from([None, 1, ["u32-f32-le-v1"]]))
    elif name == "num_top_missing":
        del packed["num_top_logprobs"]
    elif name == "num_top_str":
        packed["num_top_logprobs"] = "20"
    elif name == "num_top_float":
        packed["num_top_logprobs"] = 20.0
    elif name == "num_top_big":
        packed["num_top_logprobs"] = 2**40
    elif name == "num_top_huge":  # valid, past what the JSON reader holds in 64 bits
        packed["num_top_logprobs"] = 2**70
    elif name == "num_top_minus_one":
        packed["num_top_logprobs"] = -1
    elif name == "offsets_str":
        packed["offsets"] = ",".join(map(str, packed["offsets"]))
    elif name == "offsets_nested":
        packed["offsets"] = [packed["offsets"]]
    elif name == "offsets_empty_rows":
        packed["offsets"] = [0] * (n + 1)
        packed["data"] = ""
    elif name == "offsets_extra" and n:  # one offset past the ids, the data of the ids' rows
        choice["token_ids"].pop()
        offsets = packed["offsets"]
        raw = samples.base64.b64decode(packed["data"])
        count, kept = offsets[-1], offsets[-2]
        packed["data"] = samples.b64(raw[: 4 * kept] + raw[4 * count : 4 * (count + kept)])
    elif name == "offsets_negative":
        packed["offsets"][-1] = -1
    elif name == "data_odd":
        packed["data"] = samples.b64(samples.base64.b64decode(packed["data"]) + b"\0" * draw(st.sampled_from([1, 4, 8])))
    elif name == "packed_null":
        choice["completion_logprobs"] = None
    elif name == "ids_empty":
        choice["token_ids"] = []
        choice["compact_logprobs"] = {"format": "u32-f32-le-v1", "offsets": [0], "data": "", "num_top_logprobs": 0}


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
    elif name == "weight_versions":  # valid spans: a field the plain path does not read
        choice["weight_versions"] = [{"version": "v", "start": 0, "end": n}] if n else []
    elif name == "weight_versions_null":
        choice["weight_versions"] = None
    elif _change_object(choice, "completion_logprobs", name):
        pass
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
    if draw(st.booleans()):
        # Compact rows as samplers write them: sampled-only or with candidates, tails cut by a
        # filter, ties; the sampled id repeated among the candidates or not.
        ev = samples.evidence(n, draw(st.integers(0, 6)), seed=draw(st.integers(0, 2**16)),
                              filtered=draw(st.sampled_from([0.0, 0.1, 0.5])), ties=draw(st.sampled_from([0.0, 0.2])),
                              scale=draw(st.sampled_from([(0.3, 2.0), (2.0, 8.0)])))
        choice = samples.build_choice(ev, transport="compact", index=index,
                                      num_top=draw(st.sampled_from([None, None, 0, 20, -1])))
    else:
        ev = samples.evidence(n, 0, seed=draw(st.integers(0, 2**16)))
        choice = samples.build_choice(ev, transport="packed", index=index)
    if draw(st.integers(0, 3)) == 0:
        for key in draw(st.lists(st.sampled_from(["text", "stop_reason", "logprobs", "index"]), unique=True, max_size=2)):
            del choice[key]
    if draw(st.integers(0, 4)) == 0:
        choice["extra"] = {"token_ids": [1], "completion_logprobs": {"data": "!!"}, "compact_logprobs": {"data": "!"}}
    if "compact_logprobs" in choice:
        return choice
    packed = choice["completion_logprobs"]
    if draw(st.booleans()):
        packed["dtype"] = "float64"
        packed["data"] = samples.b64(ev.logprobs.astype("<f8").tobytes())
    if draw(st.integers(0, 3)) == 0:
        del packed["shape"]
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
    still_plain = False
    if change == "choice" and "compact_logprobs" in chosen[target]:
        changed = draw(st.sampled_from(_COMPACT_CHANGES + _COMPACT_STILL_PLAIN))
        _change_compact(chosen[target], changed, draw)
        still_plain = changed in _COMPACT_STILL_PLAIN
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
    plain = change is None or still_plain or (change == "document" and name in _STILL_PLAIN)
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

    def parse_generate_response(self, raw: Any, top_k: Any = None, **options: Any) -> Any:
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


# The wire-table fields of a generate choice the plain path does not read.
_NOT_PLAIN = sorted(_table.top_keys(_table.CHOICE, _table.GENERATE) - {"token_ids", "completion_logprobs",
                                                                        "compact_logprobs"})


@pytest.mark.parametrize("key", _NOT_PLAIN)
@pytest.mark.parametrize("transport", ["packed", "compact"])
def test_plain_path_hands_over_every_table_field_it_does_not_read(key, transport):
    """The plain path's allow-list comes from the wire table: a choice holding any other field
    of the table (not null) goes to the rules, which then decide."""
    assert sorted(_core._PLAIN_ABSENT) == _NOT_PLAIN
    ev = samples.evidence(5, 0, seed=3)
    choice = samples.build_choice(ev, transport=transport, index=0)
    raw = samples.dumps(samples.response([choice], prompt_tokens=3))
    assert _core._plain_generate_response(raw) is not None
    choice[key] = 7
    raw = samples.dumps(samples.response([choice], prompt_tokens=3))
    assert _core._plain_generate_response(raw) is None
    case = strategies.Case(raw, None, None, None)
    assert outcome(_core, case) == outcome(PYTHON, case)


@pytest.mark.parametrize("name", ["choices_8x512", "compact_sampled_8k", "packed_128"])
def test_plain_path_takes_the_benchmark_workloads(name):
    """The plain loop's responses without a head are all of the plain form: each is built
    by the plain path, as the rules build it."""
    workload = samples.WORKLOADS[name]
    for raw in workload.responses(2):
        taken = _core._plain_generate_response(raw)
        assert taken is not None
        case = strategies.Case(raw, None, None, None)
        assert outcome(_Given(taken), case) == outcome(PYTHON, case)


@pytest.mark.parametrize("change", _COMPACT_CHANGES + _COMPACT_STILL_PLAIN)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_plain_path_hands_over_each_compact_change(change, data):
    """Each change to a choice of compact rows, on its own: the plain path takes the response
    only when the rules accept it, with the rules' result; the valid plain ones it takes."""
    n = data.draw(st.sampled_from([1, 2, 7, 300]))
    ev = samples.evidence(n, data.draw(st.integers(0, 4)), seed=data.draw(st.integers(0, 99)), filtered=0.2, ties=0.2)
    choice = samples.build_choice(ev, transport="compact")
    document = samples.response([choice], prompt_tokens=3)
    _change_compact(choice, change, data.draw)
    case = strategies.Case(samples.dumps(document), None)
    expected = outcome(PYTHON, case)
    for path in _core.simd_paths():
        with _core.simd_path_forced(path):
            taken = _core._plain_generate_response(case.raw)
            if change in _COMPACT_STILL_PLAIN:
                assert taken is not None, "a plain valid response went to the rules"
            if taken is not None:
                assert outcome(_Given(taken), case) == expected, path
            assert outcome(_core, case) == expected, path
