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


# --- inputs that used to raise something else, and lose a parse_many(errors="collect") batch -----


def _npy_header_only(shape: str, descr: str = "<f4") -> str:
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}".encode()
    header += b" " * (-(len(header) + 11) % 64) + b"\n"
    return base64.b64encode(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header).decode()


def _sglang_empty_routing(prompt_tokens: int) -> bytes:
    ids = [300, 301]
    meta = {"id": "s", "finish_reason": {"type": "stop"}, "prompt_tokens": prompt_tokens, "completion_tokens": 2,
            "output_token_logprobs": [[-0.5, i, None] for i in ids], "routed_experts": ""}
    return json.dumps({"text": "x", "output_ids": ids, "meta_info": meta}).encode()


COLLECTED = {
    # kept_tokens has no list form: a list used to reach the sampling_mask list's reader (TypeError)
    "kept_tokens_list": ("generate", generate(kept_tokens=[0]), "choices[0].kept_tokens"),
    # numpy cannot shape 2**62 rows even of no column (its ValueError)
    "teacher_rows_of_nothing": ("generate", _json.dumps({"choices": [{"token_ids": [1], "logprobs": None}],
                                                         "prompt_token_id_logprobs": _npy_header_only("(4611686018427387904, 0)")}),
                                "prompt_token_id_logprobs"),
    # 2**62 + 1 rows of no routing id (numpy's ValueError reshaping them)
    "sglang_rows_of_nothing": ("sglang", _sglang_empty_routing(2**62), "choices[0].meta_info.routed_experts"),
}


@pytest.mark.parametrize("name", sorted(COLLECTED))
def test_a_malformed_response_in_a_collected_batch(impl, monkeypatch, name):
    """Each is a MalformedResponseError at its field, in its place in the batch; the valid
    body beside it still parses."""
    from tokenwire import parse_many
    from tokenwire.read import _select

    monkeypatch.setattr(_select, "impl", impl)
    monkeypatch.setattr(_select, "kernels", impl)
    fmt, raw, where = COLLECTED[name]
    good = generate() if fmt == "generate" else json.dumps(
        {"text": "x", "output_ids": [1], "meta_info": {"id": "s", "finish_reason": {"type": "stop"},
                                                       "output_token_logprobs": [[-0.5, 1, None]]}})
    results = parse_many([good, raw, good], format=fmt, errors="collect", threads=2)
    assert not isinstance(results[0], Exception) and not isinstance(results[2], Exception)
    assert isinstance(results[1], MalformedResponseError), repr(results[1])
    assert str(results[1]).startswith(where + ":"), str(results[1])


def test_a_directory_swapped_while_a_name_resolves(impl, monkeypatch, tmp_path):
    """A link under payload_root replaced by a directory between its lookup and the read of
    its target (readlink then fails with EINVAL): a malformed response at the segment's file,
    not an OSError out of the batch."""
    import errno
    import os

    from tokenwire import parse_many
    from tokenwire.read import _select

    monkeypatch.setattr(_select, "impl", impl)
    monkeypatch.setattr(_select, "kernels", impl)
    (tmp_path / "d").mkdir()
    os.symlink("d", tmp_path / "link")
    body = _json.dumps({"prompt_token_ids": [5], "choices": [{"token_ids": [1], "logprobs": None, "payload": [
        ["routed_experts", "link/rows.bin", 0, 0, 1, "uint8", [2, 3]]]}]})

    def swapped(*args, **kwargs):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    monkeypatch.setattr(os, "readlink", swapped)
    # The walk by directory descriptors runs where os.readlink takes dir_fd (else the name goes to
    # os.path.realpath, which from Python 3.13 on keeps a name readlink failed on as written).
    monkeypatch.setattr(os, "supports_dir_fd", os.supports_dir_fd | {swapped})
    results = parse_many([body], errors="collect", require_logprobs=False, payload_root=tmp_path)
    assert isinstance(results[0], MalformedResponseError), repr(results[0])
    assert str(results[0]).startswith("choices[0].payload[0].file:") and "cannot be resolved" in str(results[0])


def test_npy_headers_read_on_many_threads(impl, monkeypatch):
    """The .npy header is read by a strict reader of its grammar, not ``ast.literal_eval``
    (whose parser raised SystemError on Python 3.11 when several parse_many threads ran it):
    valid routing on eight threads parses every time, and the reader takes what numpy writes
    and nothing else."""
    import io

    from tokenwire import parse_many
    from tokenwire.read import _select
    from tokenwire.rules import arrays

    assert not hasattr(arrays, "ast")
    monkeypatch.setattr(_select, "impl", impl)
    monkeypatch.setattr(_select, "kernels", impl)
    buffer = io.BytesIO()
    np.save(buffer, np.arange(2 * 3 * 2, dtype=np.uint8).reshape(2, 3, 2))
    body = _json.dumps({"prompt_token_ids": [4, 5], "choices": [{"token_ids": [1], "logprobs": None,
                                                                  "routed_experts": base64.b64encode(buffer.getvalue()).decode()}]})
    results = parse_many([body] * 400, errors="collect", require_logprobs=False, threads=8)
    assert all(not isinstance(r, Exception) for r in results), next(r for r in results if isinstance(r, Exception))
    for text in ["{'descr': '<u2', 'fortran_order': False, 'shape': (3, 2, 4), }", '{"descr": "|u1", "shape": (0,)}',
                 "{'shape': (), 'shape': (1,), }", "{}"]:
        import ast
        assert arrays.npy_header(text) == ast.literal_eval(text), text
    for text in ["{'shape': [1]}", "{'shape': (1)}", "{'a': 1.5}", "{'a': {}}", "{'a': 'x\\\\'}", "{1: 2}", "{'a': 1} b",
                 "{'a': (1 2)}", "{'a': (True,)}", "{'a': 1,, }", "{'a': __import__('os')}"]:
        assert arrays.npy_header(text) is None, text
