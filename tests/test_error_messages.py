"""Every error a user met on the generate endpoint, the wrong parser, the writers and the inputs
says what to do or where the fault is: the counts and their difference, the request flag to
set, the id or position at fault, the parser that reads the body. On both implementations."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tokenwire
from tokenwire import MalformedResponseError

from .test_writer import writer  # noqa: F401 (the writers on each implementation)


def body(choice, **top):
    return json.dumps({"choices": [choice], **top}).encode()


def compact(rows, num_top):
    """``compact_logprobs`` of ``rows``, each ``[(id, logprob), ...]`` with the sampled token first."""
    ids = [i for row in rows for i, _ in row]
    values = [v for row in rows for _, v in row]
    offsets = np.cumsum([0] + [len(row) for row in rows]).tolist()
    return tokenwire.encode_compact_logprobs(ids, values, offsets, num_top)


def rejected(parse, raw, **options):
    with pytest.raises(MalformedResponseError) as info:
        parse(raw, **options)
    return str(info.value)


def test_compact_rows_one_more_than_the_ids_give_both_counts(impl):
    rows = [[(5, -0.5)], [(6, -0.25)], [(7, -1.0)]]
    message = rejected(impl.parse_generate_response, body({"token_ids": [5, 6], "compact_logprobs": compact(rows, 0)}))
    assert "completion has 2 token ids but 3 compact logprob rows (+1)" in message
    assert message.startswith("choices[0].compact_logprobs.offsets: Invalid compact logprob offsets")


def test_generate_without_logprobs_names_the_request_flag(impl):
    message = rejected(impl.parse_generate_response, body({"token_ids": [5, 6]}))
    assert "sampling_params.logprobs" in message and "prl_compact_logprobs" in message
    assert "tokenwire.generate_request_params()" in message and "require_logprobs=False" in message


def test_generate_without_token_ids_says_missing(impl):
    message = rejected(impl.parse_generate_response, body({"logprobs": None}))
    assert "token_ids is missing" in message and message.startswith("choices[0].token_ids:")


@pytest.mark.parametrize("candidates", [5, 6])
def test_too_few_candidates_name_the_k_plus_2_rule(impl, candidates):
    rows = [[(10 + t, -1.0)] + [(10 + t if j == 0 else 100 + j, -1.0 - j) for j in range(candidates)]
            for t in range(2)]
    message = rejected(impl.parse_generate_response,
                       body({"token_ids": [10, 11], "compact_logprobs": compact(rows, candidates)}), top_k=5)
    assert "Engine returned fewer top logprobs than requested" in message
    assert "k + 2 = 7" in message and "top_k=5" in message and "sampling_params.logprobs: 7" in message


def test_a_kept_id_without_a_candidate_is_named(impl):
    rows = [[(10, -0.5), (10, -0.5)] + [(100 + j, -2.0 - j) for j in range(4)]]
    choice = {"token_ids": [10], "compact_logprobs": compact(rows, 5), "sampling_mask": [[10, 555]]}
    message = rejected(impl.parse_generate_response, body(choice), top_k=3)
    assert "Missing sampling-support probabilities" in message
    assert "kept id 555" in message and "sampling_mask[0]" in message


def test_the_sampling_mask_writer_names_the_missing_sampled_id(writer):
    with pytest.raises(MalformedResponseError) as info:
        tokenwire.encode_sampling_mask([1, 2], [1, 1], completion_ids=[1, 3])
    assert "row 1 [2] does not hold the sampled id 3" in str(info.value)
    assert str(info.value).startswith("the values given would write sampling_mask that the reader refuses at row 1")


def test_the_compact_writer_names_the_positive_value(writer):
    with pytest.raises(MalformedResponseError) as info:
        tokenwire.encode_compact_logprobs([1, 2], [-0.1, 0.5], [0, 2], 1)
    message = str(info.value)
    assert message.startswith("the values given would write compact_logprobs")
    assert "value 1 of row 0 (entry 1) is 0.5: positive" in message


@pytest.mark.parametrize("routing, field", [
    ("AAA-", "routed_experts"),
    ({"data": "AQ-D", "shape": [1, 1, 3], "dtype": "uint8", "start": 0}, "routed_experts.data"),
])
def test_routing_base64_names_the_character_and_its_position(impl, routing, field):
    choice = {"token_ids": [1], "logprobs": {"content": [{"token_id": 1, "logprob": -0.1}]}, "routed_experts": routing}
    message = rejected(impl.parse_generate_response, body(choice))
    assert message.startswith(f"choices[0].{field}: Invalid routed_experts base64")
    assert "character '-' at position" in message and "URL-safe" in message


CHAT = json.dumps({"id": "x", "object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "a"}, "token_ids": [5],
     "logprobs": {"content": [{"token": "a", "logprob": -0.1}]}}]}).encode()
GENERATE = body({"token_ids": [1], "compact_logprobs": {
    "data": "AQAAAM3MzL0=", "format": "u32-f32-le-v1", "offsets": [0, 1], "num_top_logprobs": 0}})
SGLANG = json.dumps({"output_ids": [5], "meta_info": {"output_token_logprobs": [[-0.1, 5, None]]}}).encode()
COMPLETIONS = json.dumps({"object": "text_completion", "choices": [
    {"index": 0, "text": "a", "token_ids": [5], "logprobs": {"tokens": ["a"], "token_logprobs": [-0.1]}}]}).encode()


@pytest.mark.parametrize("parser, raw, reader", [
    ("parse_generate_response", CHAT, "parse_chat_completions_response"),
    ("parse_completions_response", CHAT, "parse_chat_completions_response"),
    ("parse_sglang_generate_response", CHAT, "parse_chat_completions_response"),
    ("parse_chat_completions_response", GENERATE, "parse_generate_response"),
    ("parse_chat_completions_response", SGLANG, "parse_sglang_generate_response"),
    ("parse_generate_response", COMPLETIONS, "parse_completions_response"),
    ("parse_sglang_generate_response", GENERATE, "parse_generate_response"),
])
def test_each_parser_refuses_another_format_naming_the_parser_that_reads_it(parser, raw, reader):
    message = rejected(getattr(tokenwire, parser), raw)
    assert message.startswith("the body is ")
    assert f"which tokenwire.{reader}() reads, not tokenwire.{parser}()" in message
    getattr(tokenwire, reader)(raw)  # and that parser reads it


def test_the_right_parser_keeps_its_own_message():
    broken = CHAT.replace(b'"token_ids": [5]', b'"token_ids": [5, 6]')
    message = rejected(tokenwire.parse_chat_completions_response, broken)
    assert "the body is" not in message and "1 logprobs" in message


def test_a_response_object_is_read_through_its_content():
    httpx = pytest.importorskip("httpx")
    response = httpx.Response(200, content=CHAT)
    assert tokenwire.parse_chat_completions_response(response).choices[0].completion_ids.tolist() == [5]
    assert [r.choices[0].completion_ids.tolist() for r in tokenwire.parse_many([response], format="chat")] == [[5]]


@pytest.mark.parametrize("given, hint", [
    (json.loads(CHAT), "response.content"),
    ([1], "already decoded"),
    (3.5, "response.content"),
])
def test_what_is_not_a_body_says_what_to_pass(given, hint):
    with pytest.raises(TypeError) as info:
        tokenwire.parse_chat_completions_response(given)
    assert hint in str(info.value) and type(given).__name__ in str(info.value)


def test_an_sdk_object_says_to_ask_for_the_raw_response():
    class ChatCompletion:  # what the OpenAI SDK returns: a pydantic model
        def model_dump_json(self):
            return "{}"

    with pytest.raises(TypeError, match=r"with_raw_response\.create"):
        tokenwire.parse_chat_completions_response(ChatCompletion())


TRUNCATED = GENERATE[:-7]


def test_a_truncated_body_reads_alike_everywhere(impl, tmp_path, capsys):
    from tokenwire import cli

    message = rejected(impl.parse_generate_response, TRUNCATED)
    assert message == (f"invalid JSON: unexpected end of data at byte {len(TRUNCATED)}: the body is truncated "
                       "(a partial read, a size limit or a dropped connection)")
    assert rejected(impl.parse_chat_completions_response, TRUNCATED) == message
    assert rejected(impl.parse_sglang_generate_response, TRUNCATED) == message
    path = tmp_path / "cut.jsonl"
    path.write_bytes(TRUNCATED + b"\n")
    assert cli.main(["check", str(path)]) == 1
    assert f"(top level): {message}" in capsys.readouterr().out
    assert tokenwire.audit(TRUNCATED).message == message


@pytest.mark.parametrize("wrapped, args, path", [
    ({"id": 1, "response": json.loads(GENERATE)}, [], "response"),
    ({"id": 1, "response": json.loads(GENERATE)}, ["--field", "respons"], "response"),
    ({"id": 1, "data": {"body": GENERATE.decode()}}, [], "data.body"),
])
def test_check_suggests_the_field_that_wraps_every_response(tmp_path, capsys, wrapped, args, path):
    from tokenwire import cli

    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({**wrapped, "id": i}) + "\n" for i in range(3)))
    assert cli.main(["check", str(log), *args]) == 1
    out = capsys.readouterr().out
    assert f"hint: every record holds a response under {path!r}: check them with --field {path}" in out
    assert cli.main(["check", str(log), "--field", path]) == 0
    assert "hint:" not in capsys.readouterr().out


def test_no_field_hint_when_records_differ(tmp_path, capsys):
    from tokenwire import cli

    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"response": json.loads(GENERATE)}) + "\n" + json.dumps({"other": 1}) + "\n")
    assert cli.main(["check", str(log)]) == 1
    assert "hint:" not in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, argument", [
    ({"field": "a..b"}, "field='a..b': empty path component"),
    ({"columns": ["x="]}, "columns='x=': empty path"),
])
def test_ray_check_names_its_own_argument(kwargs, argument):
    import tokenwire.ray

    with pytest.raises(ValueError) as info:
        tokenwire.ray.check(["captures.jsonl"], **kwargs)
    assert str(info.value) == argument and "--" not in str(info.value)
