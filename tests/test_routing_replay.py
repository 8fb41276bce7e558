"""MoE routing replay on vLLM's OpenAI-compatible endpoints (``choices[].routed_experts``, vLLM
0.21's top-level ``prompt_routed_experts``) and ``num_experts=`` on every parser that reads
routing: responses laid out as vLLM lays them out (``np.save`` into a buffer, then base64),
on both implementations and every SIMD path."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np
import pytest

import tokenwire
from tokenwire import MalformedResponseError

PROMPT, COMPLETION, LAYERS, TOPK, EXPERTS = 6, 4, 3, 2, 64
ROWS = PROMPT + COMPLETION - 1  # vLLM routes every token it forwards: the last sampled one never
PARSERS = ["parse_chat_completions_response", "parse_completions_response"]


def npy(array: np.ndarray) -> str:
    """A routing array as vLLM's server sends it: a whole .npy file, base64."""
    buffer = io.BytesIO()
    np.save(buffer, array)
    return base64.b64encode(buffer.getvalue()).decode()


def routing(rows: int, dtype: Any = np.uint8, layers: int = LAYERS, topk: int = TOPK) -> np.ndarray:
    return (np.arange(rows * layers * topk) % (EXPERTS - 1)).astype(dtype).reshape(rows, layers, topk)


def response(name: str, routed: Any, prompt_routed: Any = None, *, prompt_ids: bool = True,
             usage: bool = True, choices: int = 1, logprobs: bool = False) -> bytes:
    """A vLLM response of ``name``'s endpoint with ``return_token_ids``: the prompt ids where
    vLLM puts them (chat: top level; completions: each choice), 0.21's prompt routing at the
    top level."""
    chat = name == "parse_chat_completions_response"
    ids = list(range(300, 300 + COMPLETION))
    prompt = list(range(100, 100 + PROMPT))
    body: list[dict[str, Any]] = []
    for index in range(choices):
        records = [{"token": f"token_id:{i}", "logprob": -0.5} for i in ids]
        choice: dict[str, Any] = {"index": index, "logprobs": {"content": records} if logprobs else None,
                                  "finish_reason": "stop", "token_ids": ids}
        if chat:
            choice["message"] = {"role": "assistant", "content": "x"}
        else:
            choice["text"] = "x"
            if prompt_ids:
                choice["prompt_token_ids"] = prompt
        choice["routed_experts"] = routed
        body.append(choice)
    document: dict[str, Any] = {"id": "r", "object": "chat.completion" if chat else "text_completion",
                                "model": "m", "choices": body}
    if prompt_routed is not None:
        document["prompt_routed_experts"] = prompt_routed
    if usage:
        document["usage"] = {"prompt_tokens": PROMPT, "completion_tokens": COMPLETION * choices,
                             "total_tokens": PROMPT + COMPLETION * choices}
    if chat and prompt_ids:
        document["prompt_token_ids"] = prompt
    return json.dumps(document).encode()


def parse(impl, name: str, raw: bytes, **kw: Any) -> tokenwire.GenerateResponse:
    return getattr(impl, name)(raw, require_logprobs=False, **kw)


def rejected(impl, name: str, raw: bytes, match: str, **kw: Any) -> MalformedResponseError:
    with pytest.raises(MalformedResponseError, match=match) as err:
        parse(impl, name, raw, **kw)
    return err.value


@pytest.mark.parametrize("name", PARSERS)
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int32])
def test_vllm_routing_reads_as_sent(impl, name, dtype):
    sent = routing(ROWS, dtype)
    parsed = parse(impl, name, response(name, npy(sent)))
    routed = parsed.choices[0].routed_experts
    assert isinstance(routed, tokenwire.RoutedExperts) and routed.start is None
    assert routed.array.dtype == sent.dtype and np.array_equal(routed.array, sent)
    assert "routed_experts" not in parsed.choices[0].raw and parsed.prompt_routed_experts is None


@pytest.mark.parametrize("name", PARSERS)
def test_long_routing_is_decoded_on_every_path(impl, name):
    """48 layers of top-8: long enough to be decoded as the scan passes it."""
    sent = routing(ROWS, np.uint16, 48, 8)
    assert np.array_equal(parse(impl, name, response(name, npy(sent))).choices[0].routed_experts.array, sent)


@pytest.mark.parametrize("name", PARSERS)
@pytest.mark.parametrize("rows", [ROWS - 1, ROWS + 1])
def test_a_row_short_or_extra_is_refused(impl, name, rows):
    err = rejected(impl, name, response(name, npy(routing(rows))), f"has {rows} rows, not {ROWS}: one per token")
    assert (err.choice, err.field, err.token) == (0, "routed_experts", None)


@pytest.mark.parametrize("name", PARSERS)
def test_the_prompt_is_counted_by_usage_without_prompt_ids(impl, name):
    raw = response(name, npy(routing(ROWS + 1)), prompt_ids=False)
    rejected(impl, name, raw, f"not {ROWS}")
    # with check_usage=False usage is not read: the rows cannot be counted, the ids still are
    assert parse(impl, name, raw, check_usage=False).choices[0].routed_experts.array.shape[0] == ROWS + 1
    unknown = response(name, npy(routing(ROWS + 1)), prompt_ids=False, usage=False)
    assert parse(impl, name, unknown).choices[0].routed_experts.array.shape[0] == ROWS + 1


@pytest.mark.parametrize("name", PARSERS)
@pytest.mark.parametrize(("sent", "match", "where"), [
    (routing(ROWS)[0], r"shape must be \[rows, layers, topk\]", "routed_experts.shape"),
    (routing(ROWS)[..., None], r"shape must be \[rows, layers, topk\]", "routed_experts.shape"),
    (routing(ROWS, np.float32), r"header is invalid: dtype '<f4' is not uint8, uint16, int16 or int32", "routed_experts"),
])
def test_routing_of_another_rank_or_dtype_is_refused(impl, name, sent, match, where):
    err = rejected(impl, name, response(name, npy(sent)), match)
    assert (err.choice, err.field) == (0, where)


@pytest.mark.parametrize("name", PARSERS)
@pytest.mark.parametrize("routed", [7, {"data": "AA=="}, "not base64!", [[1, 2], [3]], [[["1"]]], [[[0.5]]], [[[True]]], []])
def test_routing_that_is_neither_form_is_refused(impl, name, routed):
    err = rejected(impl, name, response(name, routed), "routed_experts")
    assert (err.choice, err.field) == (0, "routed_experts")


@pytest.mark.parametrize("name", PARSERS)
def test_expert_ids_up_to_num_experts(impl, name):
    sent = routing(ROWS)
    sent[5, 2, 1] = EXPERTS - 1
    raw = response(name, npy(sent))
    assert parse(impl, name, raw, num_experts=EXPERTS).choices[0].routed_experts.array[5, 2, 1] == EXPERTS - 1
    sent[5, 2, 1] = EXPERTS
    err = rejected(impl, name, response(name, npy(sent)), f"expert id {EXPERTS} at layer 2, not below num_experts={EXPERTS}$",
                   num_experts=EXPERTS)
    assert (err.choice, err.field, err.token) == (0, "routed_experts", 5)
    assert parse(impl, name, response(name, npy(sent))).choices[0].routed_experts is not None  # no bound given


@pytest.mark.parametrize("name", PARSERS)
def test_total_router_recall_packing_reads_as_huge_expert_ids(impl, name):
    """Expert ids followed by their float32 weights' bits in one int32 array: 2 * topk
    "experts" a layer, the weights near 1e9."""
    ids = routing(ROWS).astype(np.int32)
    weights = np.full(ids.shape, 0.5, dtype=np.float32).view(np.int32)
    raw = response(name, npy(np.concatenate([ids, weights], axis=2)))
    assert parse(impl, name, raw).choices[0].routed_experts.array.shape == (ROWS, LAYERS, 2 * TOPK)
    err = rejected(impl, name, raw, "expert id 1056964608 at layer 0, not below num_experts=64 .no model has that many",
                   num_experts=EXPERTS)
    assert (err.choice, err.field, err.token) == (0, "routed_experts", 0)


@pytest.mark.parametrize("name", PARSERS)
def test_a_negative_expert_id_is_refused(impl, name):
    sent = routing(ROWS, np.int32)
    sent[3, 1, 0] = -1
    err = rejected(impl, name, response(name, npy(sent)), r"negative expert id \(-1\) at layer 1")
    assert (err.choice, err.field, err.token) == (0, "routed_experts", 3)


# --- vLLM 0.21: the prompt's rows at the top level, the completion's on the choice, as lists --------


@pytest.mark.parametrize("name", PARSERS)
@pytest.mark.parametrize("form", ["lists", "npy"])
def test_the_split_form_reads_as_sent(impl, name, form):
    encode = (lambda a: a.tolist()) if form == "lists" else npy
    prompt, completion = routing(PROMPT, np.int16), routing(COMPLETION - 1, np.int16) + 1
    parsed = parse(impl, name, response(name, encode(completion), encode(prompt), choices=2), num_experts=EXPERTS)
    assert np.array_equal(parsed.prompt_routed_experts.array, prompt)
    assert all(np.array_equal(c.routed_experts.array, completion) for c in parsed.choices)
    assert parsed.prompt_routed_experts.array.dtype == (np.int32 if form == "lists" else np.int16)
    assert "prompt_routed_experts" not in parsed.payload


@pytest.mark.parametrize("name", PARSERS)
def test_the_split_form_counts_rows(impl, name):
    prompt = routing(PROMPT).tolist()
    # the completion's tokens but the last, or every one (speculative decoding's trim)
    for rows in (COMPLETION - 1, COMPLETION):
        parse(impl, name, response(name, routing(rows).tolist(), prompt))
    err = rejected(impl, name, response(name, routing(COMPLETION + 1).tolist(), prompt),
                   f"has {COMPLETION + 1} rows, not {COMPLETION - 1} or {COMPLETION}")
    assert (err.choice, err.field) == (0, "routed_experts")
    err = rejected(impl, name, response(name, routing(COMPLETION - 1).tolist(), routing(PROMPT - 1).tolist()),
                   f"has {PROMPT - 1} rows, not {PROMPT}: one per prompt token")
    assert (err.choice, err.field, err.token) == (None, "prompt_routed_experts", None)


@pytest.mark.parametrize("name", PARSERS)
def test_the_split_forms_ids_are_checked_at_their_rows(impl, name):
    prompt = routing(PROMPT, np.int32)
    prompt[2, 0, 1] = -1
    err = rejected(impl, name, response(name, routing(COMPLETION - 1).tolist(), prompt.tolist()),
                   r"negative expert id \(-1\) at layer 0")
    assert (err.choice, err.field, err.token) == (None, "prompt_routed_experts", 2)
    prompt[2, 0, 1] = EXPERTS
    err = rejected(impl, name, response(name, routing(COMPLETION - 1).tolist(), prompt.tolist()),
                   f"expert id {EXPERTS} at layer 0, not below num_experts={EXPERTS}", num_experts=EXPERTS)
    assert err.token == 2
    wide = routing(COMPLETION - 1, np.int64)
    wide[1, 1, 1] = 2**31
    err = rejected(impl, name, response(name, wide.tolist(), routing(PROMPT).tolist()), r"not below 2\*\*31")
    assert (err.choice, err.field, err.token) == (0, "routed_experts", 1)


@pytest.mark.parametrize("name", PARSERS)
def test_prefix_cached_prompt_rows_as_v0_21_0_sends_them(impl, name):
    """vLLM v0.21.0 zero-fills a request's routing and writes only the positions it computes:
    prompt positions served from the prefix cache arrive as rows of zeros (read as expert 0,
    nothing tells them apart). A row of -1, the sentinel its docs describe, is refused as any
    negative id is (docs/openai.md)."""
    prompt = routing(PROMPT, np.int16)
    prompt[:4] = 0  # four cached positions
    parsed = parse(impl, name, response(name, routing(COMPLETION - 1).tolist(), prompt.tolist()))
    assert np.array_equal(parsed.prompt_routed_experts.array, prompt)
    prompt[:4] = -1
    err = rejected(impl, name, response(name, routing(COMPLETION - 1).tolist(), prompt.tolist()),
                   r"negative expert id \(-1\) at layer 0")
    assert (err.choice, err.field, err.token) == (None, "prompt_routed_experts", 0)


# --- num_experts on the generate endpoint, and the arguments --------------------------------------


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


@pytest.mark.parametrize("name", ["parse_generate_response", *PARSERS])
@pytest.mark.parametrize(("value", "error"), [(0, ValueError), (2**31 + 1, ValueError), (True, TypeError),
                                              ("8", TypeError), (8.0, TypeError)])
def test_num_experts_is_checked_before_the_response(impl, name, value, error):
    with pytest.raises(error, match="num_experts"):
        getattr(impl, name)(b"not json", num_experts=value)
    assert getattr(impl, name)(response(name, npy(routing(ROWS))), require_logprobs=False,
                               num_experts=np.int64(2**31))


def test_the_audit_and_check_forward_num_experts(tmp_path, capsys):
    sent = routing(ROWS)
    sent[1, 0, 0] = 9
    raw = response("parse_chat_completions_response", npy(sent), logprobs=True)
    assert tokenwire.audit(raw).valid
    verdict = tokenwire.audit(raw, num_experts=9)
    assert not verdict.valid and "not below num_experts=9" in verdict.message
    assert (verdict.choice, verdict.field, verdict.token) == (0, "routed_experts", 1)
    with pytest.raises(TypeError, match="num_experts"):
        tokenwire.audit(raw, num_experts="9")
    path = tmp_path / "capture.jsonl"
    path.write_bytes(raw + b"\n")
    from tokenwire.cli import main

    assert main(["check", str(path)]) == 0
    assert main(["check", str(path), "--num-experts", "9"]) == 1
    assert "not below num_experts=9" in capsys.readouterr().out
    assert main(["check", str(path), "--num-experts", "9", "--report", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["num_experts"] == 9
    assert main(["inspect", str(path), "--num-experts", "9"]) == 1


# --- SGLang: meta_info.routed_experts, bare base64 int32 -------------------------------------------


def sglang(routed: Any = None, *, indexer: Any = None, prompt_tokens: Any = PROMPT, start: int = 0) -> bytes:
    """An SGLang /generate item as its TokenizerManager sends routing: base64 of the int32
    array's bytes, for positions [start, prompt + completion - 1)."""
    ids = list(range(300, 300 + COMPLETION))
    meta: dict[str, Any] = {"id": "s", "finish_reason": {"type": "stop"}, "prompt_tokens": prompt_tokens,
                            "completion_tokens": COMPLETION, "output_token_logprobs": [[-0.5, i, None] for i in ids]}
    for key, value in (("routed_experts", routed), ("indexer_topk", indexer)):
        if value is not None:
            encoded = isinstance(value, np.ndarray)
            meta[key] = base64.b64encode(value.astype("<i4").tobytes()).decode() if encoded else value
    return json.dumps({"text": "x", "output_ids": ids, "meta_info": meta}).encode()


SGLANG_SHAPE = (LAYERS, TOPK)


def test_sglang_routing_reads_as_sent(impl):
    sent = routing(ROWS, np.int32)
    parsed = impl.parse_sglang_generate_response(sglang(sent), routed_experts_shape=SGLANG_SHAPE, num_experts=EXPERTS)
    routed = parsed.choices[0].routed_experts
    assert routed.array.dtype == np.int32 and np.array_equal(routed.array, sent) and routed.start == 0
    assert "routed_experts" not in parsed.choices[0].raw["meta_info"]
    flat = impl.parse_sglang_generate_response(sglang(sent)).choices[0].routed_experts.array
    assert flat.shape == (ROWS, LAYERS * TOPK) and np.array_equal(flat.reshape(sent.shape), sent)
    long = routing(ROWS, np.int32, 48, 8)  # decoded as the scan passes it
    parsed = impl.parse_sglang_generate_response(sglang(long), routed_experts_shape=(48, 8))
    assert np.array_equal(parsed.choices[0].routed_experts.array, long)


def test_sglang_routing_from_a_start(impl):
    sent = routing(ROWS - 2, np.int32)
    parsed = impl.parse_sglang_generate_response(sglang(sent, start=2), routed_experts_shape=SGLANG_SHAPE,
                                                 routed_experts_start_len=2)
    assert parsed.choices[0].routed_experts.start == 2
    with pytest.raises(MalformedResponseError, match="routed_experts_start_len=20 is past the 9 positions") as err:
        impl.parse_sglang_generate_response(sglang(routing(0, np.int32)), routed_experts_start_len=20)
    assert (err.value.choice, err.value.field) == (0, "meta_info.routed_experts")


@pytest.mark.parametrize(("routed", "kw", "match"), [
    (routing(ROWS - 1, np.int32), {"routed_experts_shape": SGLANG_SHAPE}, r"holds 48 int32 values, not rows of 3 layers x 2 for 9 rows"),
    (routing(ROWS + 1, np.int32), {}, "holds 60 int32 values, which 9 rows cannot share evenly"),
    ("AAA=", {}, "holds 2 bytes, not whole int32 values"),
    ("not base64!", {}, "Invalid meta_info.routed_experts base64"),
    (7, {}, "must be a base64 string of int32 values"),
])
def test_sglang_routing_that_does_not_fit_is_refused(impl, routed, kw, match):
    with pytest.raises(MalformedResponseError, match=match) as err:
        impl.parse_sglang_generate_response(sglang(routed), **kw)
    assert (err.value.choice, err.value.field) == (0, "meta_info.routed_experts")


def test_sglang_routing_ids(impl):
    sent = routing(ROWS, np.int32)
    sent[4, 1, 1] = -1
    with pytest.raises(MalformedResponseError, match=r"negative expert id \(-1\) at layer 1") as err:
        impl.parse_sglang_generate_response(sglang(sent), routed_experts_shape=SGLANG_SHAPE)
    assert (err.value.field, err.value.token) == ("meta_info.routed_experts", 4)
    sent[4, 1, 1] = EXPERTS
    with pytest.raises(MalformedResponseError, match=f"expert id {EXPERTS}, not below num_experts={EXPERTS}"):
        impl.parse_sglang_generate_response(sglang(sent), num_experts=EXPERTS)


def test_sglang_routing_without_a_row_count(impl):
    sent = routing(ROWS, np.int32)
    raw = sglang(sent, prompt_tokens=None)
    assert impl.parse_sglang_generate_response(raw, routed_experts_shape=SGLANG_SHAPE).choices[0].routed_experts.array.shape == sent.shape
    with pytest.raises(MalformedResponseError, match="has no row count"):
        impl.parse_sglang_generate_response(raw)


def test_sglang_indexer_topk(impl):
    indexer = (np.arange(ROWS * 5) - 1).reshape(ROWS, 5)  # -1: no index there
    choice = impl.parse_sglang_generate_response(sglang(indexer=indexer)).choices[0]
    assert choice.routed_experts is None and np.array_equal(choice.indexer_topk, indexer)
    with pytest.raises(MalformedResponseError, match="which 9 rows cannot share evenly") as err:
        impl.parse_sglang_generate_response(sglang(indexer=indexer[:-1]))
    assert err.value.field == "meta_info.indexer_topk"


@pytest.mark.parametrize(("kw", "error"), [({"routed_experts_shape": (3,)}, TypeError), ({"routed_experts_shape": (0, 2)}, ValueError),
                                            ({"routed_experts_start_len": -1}, ValueError), ({"num_experts": 0}, ValueError)])
def test_sglang_routing_arguments(impl, kw, error):
    with pytest.raises(error, match="routed_experts|num_experts"):
        impl.parse_sglang_generate_response(b"not json", **kw)


# --- SGLang's layout at the scan's length: decoded as the scan passes the string ----------------

LONG = (48, 8)  # 9 rows of 48 layers x top-8: long enough for the scan to decode it


def _long(rows: int) -> np.ndarray:
    return routing(rows, np.int32, *LONG)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("shape", [LONG, None])
def test_sglang_long_routing_a_row_short_is_refused(impl, shape):
    """The response as SGLang sends it when a position's row is lost: prompt + completion - 2
    rows where the count is prompt + completion - 1."""
    sent = _long(ROWS - 1)
    match = (rf"holds {sent.size} int32 values, not rows of 48 layers x 8 for {ROWS} rows: one per position"
             if shape else f"holds {sent.size} int32 values, which {ROWS} rows cannot share evenly")
    with pytest.raises(MalformedResponseError, match=match) as err:
        impl.parse_sglang_generate_response(sglang(sent), routed_experts_shape=shape)
    assert (err.value.choice, err.value.field, err.value.token) == (0, "meta_info.routed_experts", None)
    # from a start, the same string is whole: rows = prompt + completion - 1 - start
    parsed = impl.parse_sglang_generate_response(sglang(sent, start=1), routed_experts_shape=LONG,
                                                 routed_experts_start_len=1)
    assert np.array_equal(parsed.choices[0].routed_experts.array, sent) and parsed.choices[0].routed_experts.start == 1


@pytest.mark.parametrize("cut", [1, 2, 3, 4 * 48 * 8 - 2])
def test_sglang_long_routing_of_partial_int32_values_is_refused(impl, cut):
    """Bytes that are not whole int32 values (the base64 padded or not) fail on the byte count,
    on every path, whether the scan decoded the string or not."""
    data = _long(ROWS).tobytes()[:-cut]
    with pytest.raises(MalformedResponseError, match=f"holds {len(data)} bytes, not whole int32 values") as err:
        impl.parse_sglang_generate_response(sglang(_b64(data)), routed_experts_shape=LONG)
    assert (err.value.choice, err.value.field) == (0, "meta_info.routed_experts")


@pytest.mark.parametrize("where", [0, 5000, -3])
def test_sglang_long_routing_that_is_not_base64_is_refused(impl, where):
    text = list(_b64(_long(ROWS).tobytes()))
    text[where] = "*"
    with pytest.raises(MalformedResponseError, match="Invalid meta_info.routed_experts base64") as err:
        impl.parse_sglang_generate_response(sglang("".join(text)), routed_experts_shape=LONG)
    assert (err.value.choice, err.value.field) == (0, "meta_info.routed_experts")


def test_sglang_long_indexer_topk_a_row_short_is_refused(impl):
    indexer = (np.arange(ROWS * 2048) % 4096 - 1).reshape(ROWS, 2048)  # DeepSeek-V3.2's 2048 a row
    choice = impl.parse_sglang_generate_response(sglang(indexer=indexer)).choices[0]
    assert choice.indexer_topk.shape == (ROWS, 2048) and np.array_equal(choice.indexer_topk, indexer)
    with pytest.raises(MalformedResponseError, match=f"which {ROWS} rows cannot share evenly") as err:
        impl.parse_sglang_generate_response(sglang(indexer=indexer[:-1]))
    assert (err.value.choice, err.value.field) == (0, "meta_info.indexer_topk")


def test_the_audit_and_check_bound_sglang_routing(tmp_path, capsys):
    sent = _long(ROWS)
    sent[2, 7, 3] = 100
    raw = sglang(sent)
    assert tokenwire.audit(raw).valid
    verdict = tokenwire.audit(raw, num_experts=100)
    # the audit has no routed_experts_shape: rows of 384 values, the id at its row without a layer
    assert not verdict.valid and verdict.message.endswith("holds expert id 100, not below num_experts=100")
    assert (verdict.choice, verdict.field, verdict.token) == (0, "meta_info.routed_experts", 2)
    path = tmp_path / "capture.jsonl"
    path.write_bytes(raw + b"\n")
    from tokenwire.cli import main

    assert main(["check", str(path)]) == 0
    assert main(["check", str(path), "--num-experts", "100"]) == 1
    assert "not below num_experts=100" in capsys.readouterr().out


def test_the_audit_and_check_shape_sglang_routing(tmp_path, capsys):
    from tokenwire.cli import main

    sent = _long(ROWS)
    sent[2, 7, 3] = 100
    sglang_raw = sglang(sent)
    # a vLLM chat record with its own .npy routing beside it: the shape is SGLang's only
    chat_raw = response("parse_chat_completions_response", npy(routing(ROWS)), logprobs=True)
    verdict = tokenwire.audit(sglang_raw, num_experts=100, routed_experts_shape=LONG)
    assert not verdict.valid and "expert id 100 at layer 7, not below num_experts=100" in verdict.message
    assert (verdict.field, verdict.token) == ("meta_info.routed_experts", 2)
    assert tokenwire.audit(chat_raw, routed_experts_shape=LONG).valid
    wrong = tokenwire.audit(sglang_raw, routed_experts_shape=(LONG[0] - 1, LONG[1]))
    assert not wrong.valid and f"not rows of {LONG[0] - 1} layers x {LONG[1]}" in wrong.message
    with pytest.raises(TypeError, match="routed_experts_shape"):
        tokenwire.audit(sglang_raw, routed_experts_shape=48)
    with pytest.raises(ValueError, match="routed_experts_shape"):
        tokenwire.audit(sglang_raw, routed_experts_shape=(0, 8))
    path = tmp_path / "capture.jsonl"
    path.write_bytes(sglang_raw + b"\n" + chat_raw + b"\n")
    shape = f"{LONG[0]},{LONG[1]}"
    assert main(["check", str(path), "--routed-experts-shape", shape]) == 0
    assert "clean" in capsys.readouterr().out
    assert main(["check", str(path), "--routed-experts-shape", f"{LONG[0]}x{LONG[1]}", "--num-experts", "100",
                 "--report", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["routed_experts_shape"] == list(LONG) and report["defective"] == 1
    assert main(["check", str(path), "--routed-experts-shape", f"{LONG[0] + 1},{LONG[1]}"]) == 1
    assert f"not rows of {LONG[0] + 1} layers x {LONG[1]}" in capsys.readouterr().out
    assert main(["inspect", str(path), "--routed-experts-shape", shape, "--num-experts", "100"]) == 1
    assert "at layer 7" in capsys.readouterr().out
    for bad in ("48", "48,8,2", "0,8", "a,b", "48,"):
        with pytest.raises(SystemExit) as exit_:
            main(["check", str(path), "--routed-experts-shape", bad])
        assert exit_.value.code == 2
        assert "--routed-experts-shape" in capsys.readouterr().err


def test_sglang_routing_rows_of_no_id_and_a_prompt_count_that_is_no_int(impl):
    """An empty routed_experts string for rows that must be routed is no routing (it was
    taken as rows of width 0), and a prompt_tokens that is not a non-negative int cannot
    switch the row count off."""
    with pytest.raises(MalformedResponseError, match="holds no int32 value for 9 rows") as err:
        impl.parse_sglang_generate_response(sglang(""))
    assert (err.value.choice, err.value.field) == (0, "meta_info.routed_experts")
    for count in (4.0, "4", -1, True):
        with pytest.raises(MalformedResponseError, match="prompt_tokens must be a non-negative int") as err:
            impl.parse_sglang_generate_response(sglang(routing(ROWS, np.int32), prompt_tokens=count))
        assert (err.value.choice, err.value.field) == (0, "meta_info.prompt_tokens")
