"""Every exception a caller can trigger is MalformedResponseError (a bad response) or
TypeError/ValueError with a clear message (a bad argument), the same in both implementations."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from tokenwire import MalformedResponseError
from tokenwire.base import _json
from tokenwire.compat import renderers

from .openai_strategies import evidence, vllm_completions, with_head

PARSERS = ("parse_generate_response", "parse_completions_response",
           "parse_chat_completions_response", "parse_sglang_generate_response")


def parser(impl, name):
    """``name`` of the implementation under test."""
    return getattr(impl, name)


def generate(**choice):
    values = np.array([-0.5], np.float32).tobytes()
    base = {"token_ids": [1], "completion_logprobs": {"data": base64.b64encode(values).decode(),
                                                      "shape": [1], "dtype": "float32"}}
    return _json.dumps({"choices": [{**base, **choice}]})


def rejects(impl, raw, match, **kw):
    with pytest.raises(MalformedResponseError, match=match) as info:
        parser(impl, "parse_generate_response")(raw, **kw)
    return info.value


def test_top_k_beyond_int64_is_a_verdict_not_an_overflow(impl):
    native = _json.dumps({"choices": [{"token_ids": [1], "logprobs": {"content": [
        {"token": "token_id:1", "logprob": -0.1, "top_logprobs": [{"token": "token_id:1", "logprob": -0.1}]}]}}]})
    for k in (2**63, 2**64 + 1):
        rejects(impl, native, "fewer top logprobs than requested", top_k=k)
    ev = with_head(evidence([10, 20], [-1.0] * 2), 2, [[5, 4, 3, 2]] * 2)
    with pytest.raises(MalformedResponseError, match="fewer top logprobs"):
        parser(impl, "parse_completions_response")(json.dumps(vllm_completions([ev], True)), top_k=2**63)


@pytest.mark.parametrize("name", PARSERS)
def test_str_with_a_lone_surrogate_is_invalid_json(impl, name):
    with pytest.raises(MalformedResponseError, match="invalid JSON"):
        parser(impl, name)('{"choices": [], "x": "\ud800"}')


def _npy(descr: str) -> str:
    header = f"{{'descr': {descr}, 'fortran_order': False, 'shape': (0, 2, 2), }}".encode()
    header += b" " * (-(len(header) + 11) % 64) + b"\n"
    return base64.b64encode(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header).decode()


@pytest.mark.parametrize("name", ["list", "object"])
def test_a_dtype_that_is_an_array_or_object_names_no_dtype(impl, name):
    value = ["float32"] if name == "list" else {"float32": 1}
    rejects(impl, generate(completion_logprobs={"data": "AAAAvw==", "dtype": value}), "Unsupported packed logprob dtype")
    rejects(impl, generate(routed_experts={"data": "", "shape": [0, 2, 2], "dtype": value}), "Unsupported routed_experts dtype")
    descr = "['<u2']" if name == "list" else "{'<u2': 1}"
    rejects(impl, generate(routed_experts=_npy(descr)), ".npy header is invalid")
    assert parser(impl, "parse_generate_response")(generate(routed_experts=_npy("'<u2'"))).choices[0].routed_experts.array.shape == (0, 2, 2)


def test_the_renderers_drop_in_refuses_such_a_dtype_too():
    with pytest.raises(renderers.MalformedGenerateResponseError, match="Unsupported packed logprob dtype"):
        renderers._parse_packed_completion_logprobs({"data": "AAAAvw==", "dtype": [1]}, [1])


def test_routed_shapes_no_array_can_have(impl):
    for shape, dtype in (([0, 2**31 - 1, 2**31 - 1], "int32"), ([2**63, 2**31 - 1, 2**31 - 1], "uint8")):
        info = rejects(impl, generate(routed_experts={"data": "", "shape": shape, "dtype": dtype}),
                       "too big for an array" if shape[0] == 0 else "does not match")
        assert (info.choice, info.field) == (0, "routed_experts.shape")
    for shape in ([1] * 65, [1] * 64, [0, 2**40, 2**40], [0, 2**63]):
        info = rejects(impl, generate(routed_experts={"data": "AA==", "shape": shape, "dtype": "uint8"}),
                       r"must be \[rows, layers, topk\]")
        assert (info.choice, info.field) == (0, "routed_experts.shape")
    routed = parser(impl, "parse_generate_response")(generate(routed_experts={"data": "", "shape": [0, 2**31 - 1, 2**31 - 1],
                                                                               "dtype": "uint16"})).choices[0].routed_experts
    assert routed.array.shape == (0, 2**31 - 1, 2**31 - 1)


def test_keyed_heads_of_a_deep_document_with_huge_ints(impl):
    """The re-read that keeps repeated keys copes with every depth orjson accepts and gives
    integers as orjson does, so both implementations return one document."""
    ev = with_head(evidence([10, 20, 30], [-1.0] * 3), 2, [[5, 4, 3, 2]] * 3)
    doc = vllm_completions([ev], True)
    doc["big"] = 2**64 + 5
    raw = json.dumps(doc)[:-1] + ',"deep":' + "[" * 1020 + "]" * 1020 + "}"
    escaped = raw.replace('"token_id:5"', '"token_id:\\u0035"', 1)  # read again by the stdlib
    for text in (raw, escaped):
        parsed = parser(impl, "parse_completions_response")(text, top_k=2)
        assert parsed.payload["big"] == float(2**64 + 5) and type(parsed.payload["big"]) is float
        assert parsed.choices[0].completion_top_ids.to_lists() == [[10, 11], [20, 21], [30, 31]]


@pytest.mark.parametrize("name", PARSERS)
def test_orjson_out_of_memory_is_memory_error(impl, name, monkeypatch):
    def exhausted(raw):
        raise _json.JSONDecodeError("Not enough memory to allocate buffer for parsing", "", 0)

    monkeypatch.setattr(_json, "loads", exhausted)
    with pytest.raises(MemoryError):
        parser(impl, name)(b'{"choices": []}')


@pytest.mark.parametrize("name", PARSERS)
def test_an_array_left_open_deep_down_is_invalid_json_not_out_of_memory(impl, name):
    # orjson says "failed to allocate memory" of this document; it is simply not JSON.
    with pytest.raises(MalformedResponseError, match="invalid JSON"):
        parser(impl, name)(b"[" * 199 + b"60")
    with pytest.raises(renderers.MalformedGenerateResponseError, match="invalid JSON"):
        renderers.parse_generate_response(b"[" * 199 + b"60")


def test_the_renderers_drop_in_reads_a_str_or_runs_out_of_memory_as_the_parsers_do(monkeypatch):
    with pytest.raises(renderers.MalformedGenerateResponseError, match="invalid JSON"):
        renderers.parse_generate_response('{"choices": [], "x": "\ud800"}')

    def exhausted(raw):
        raise _json.JSONDecodeError("Not enough memory to allocate buffer for parsing", "", 0)

    monkeypatch.setattr(_json, "loads", exhausted)
    with pytest.raises(MemoryError):
        renderers.parse_generate_response(b'{"choices": []}')


def test_numpy_integers_are_ints_for_the_parsers_too(impl):
    native = _json.dumps({"choices": [{"token_ids": [1], "logprobs": {"content": [
        {"token": "token_id:1", "logprob": -0.1, "top_logprobs": [{"token": "token_id:1", "logprob": -0.1}]}]}}]})
    rejects(impl, native, "fewer top logprobs than requested", top_k=np.int64(1))
    for bad in (True, 1.0, np.float64(1.0), 0, np.int64(0)):
        with pytest.raises((TypeError, ValueError), match="top_k"):
            parser(impl, "parse_generate_response")(native, top_k=bad)
