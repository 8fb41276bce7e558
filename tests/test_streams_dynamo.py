"""NVIDIA Dynamo's chat streams: ``nvext`` on each chunk, read by
``parse_chat_completions_stream`` into the response Dynamo's own aggregator makes of them, and
held to the whole-body parse of that response, on both implementations and every path.

The chunks are laid out as Dynamo's frontend writes them (``lib/llm/src/protocols/openai/
chat_completions/delta.rs``, ``DeltaGenerator``: ``id``, ``choices``, ``created``, ``model``,
``system_fingerprint``, ``object``, ``usage``, then ``nvext``; a choice ``{index, delta,
finish_reason, logprobs}`` and no ``token_ids``; the delta's ``role`` on the first chunk only),
with ``nvext`` built per chunk by ``build_response_nvext`` (``common/extensions.rs``) for the
request's ``extra_fields: ["engine_data", "completion_token_ids"]``: the chunk's engine ids as
``completion_token_ids`` on every chunk, ``engine_data`` (and ``routed_experts``, the frontend's
copy of its routing, with ``"routed_experts"`` asked) on the chunk that finishes the choice;
the usage-only chunk carries no ``nvext``. The whole body is what ``merge_response_nvext``
makes of them: the ids concatenated, every other member the last chunk's.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError
from tokenwire.read import _select
from tokenwire.read._stream import StreamReader

from .test_dynamo import PROMPT, choice_value, engine_value, routing
from .test_streams import _outcome, assert_same_outcome, dumps, incremental, sse, use  # noqa: F401 (a fixture)
from .test_streams import refused as _refused


def _case(n: int, seed: int) -> tuple[list[int], list[float]]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 151_000, size=n).tolist(), (-np.abs(rng.standard_normal(n)) * 2).tolist()


def _record(token: int, value: float, as_ids: bool, t: int) -> dict[str, Any]:
    text = f"token_id:{token}" if as_ids else f"w{t}"
    return {"token": text, "logprob": choice_value(value), "bytes": list(text.encode()), "top_logprobs": []}


class Dynamo:
    """One chat response of Dynamo's vLLM worker: ``n`` engine ids and logprobs."""

    def __init__(self, n: int = 12, seed: int = 0, *, as_ids: bool = True, routed: bool = False,
                 copy_routed: bool = False, choice_logprobs: bool = True):
        self.ids, self.values = _case(n, seed)
        self.as_ids = as_ids
        self.choice_logprobs = choice_logprobs
        self.routed = routing(len(PROMPT) + n - 1)[0] if routed else None
        self.copy_routed = copy_routed

    def engine_data(self) -> dict[str, Any]:
        data = {"completion_logprobs": [engine_value(v) for v in self.values],
                "completion_token_ids": list(self.ids), "finished": True, "prompt_token_ids": list(PROMPT)}
        if self.routed is not None:
            data["routed_experts"] = self.routed
        return data

    def usage(self) -> dict[str, Any]:
        n = len(self.ids)
        return {"prompt_tokens": len(PROMPT), "completion_tokens": n, "total_tokens": len(PROMPT) + n}

    def records(self, a: int, b: int) -> list[dict[str, Any]]:
        return [_record(self.ids[t], self.values[t], self.as_ids, t) for t in range(a, b)]

    def text(self, a: int, b: int) -> str:
        return "".join(f"w{t} " for t in range(a, b))

    def chunks(self, per: int = 1, *, usage: bool = True) -> list[dict[str, Any]]:
        """The frontend's stream: one chunk per engine output of ``per`` tokens."""
        chunks = []
        n = len(self.ids)
        for a in range(0, n, per):
            b = min(a + per, n)
            last = b == n
            delta: dict[str, Any] = {"content": self.text(a, b)}
            if a == 0:
                delta["role"] = "assistant"
            choice = {"index": 0, "delta": delta, "finish_reason": "stop" if last else None,
                      "logprobs": {"content": self.records(a, b), "refusal": None} if self.choice_logprobs else None}
            nvext: dict[str, Any] = {}
            if last and self.copy_routed and self.routed is not None:
                nvext["routed_experts"] = self.routed
            if last:
                nvext["engine_data"] = self.engine_data()
            nvext["completion_token_ids"] = self.ids[a:b]
            chunks.append({"id": "chatcmpl-1", "choices": [choice], "created": 1, "model": "m",
                           "system_fingerprint": None, "object": "chat.completion.chunk", "usage": None,
                           "nvext": nvext})
        if usage:
            chunks.append({"id": "chatcmpl-1", "choices": [], "created": 1, "model": "m", "system_fingerprint": None,
                           "object": "chat.completion.chunk", "usage": self.usage()})
        return chunks

    def whole(self, *, usage: bool = True) -> bytes:
        """The same response unstreamed, as Dynamo's aggregator writes it."""
        n = len(self.ids)
        choice = {"index": 0, "message": {"content": self.text(0, n), "role": "assistant"}, "finish_reason": "stop",
                  "logprobs": {"content": self.records(0, n), "refusal": None} if self.choice_logprobs else None}
        nvext: dict[str, Any] = {}
        if self.copy_routed and self.routed is not None:
            nvext["routed_experts"] = self.routed
        nvext["engine_data"] = self.engine_data()
        nvext["completion_token_ids"] = list(self.ids)
        return dumps({"id": "chatcmpl-1", "choices": [choice], "created": 1, "model": "m",
                      "system_fingerprint": None, "object": "chat.completion",
                      "usage": self.usage() if usage else None, "nvext": nvext}).encode()


def refused(body: bytes, **options: Any) -> MalformedResponseError:
    return _refused(body, "chat", **options)


def assert_same(got: Any, want: Any) -> None:
    assert got.usage == want.usage
    np.testing.assert_array_equal(got.prompt_token_ids, want.prompt_token_ids, strict=True)
    assert len(got.choices) == len(want.choices) == 1
    g, w = got.choices[0], want.choices[0]
    assert (g.index, g.finish_reason) == (w.index, w.finish_reason)
    np.testing.assert_array_equal(g.completion_ids, w.completion_ids, strict=True)
    np.testing.assert_array_equal(g.completion_logprobs, w.completion_logprobs, strict=True)
    assert (g.routed_experts is None) == (w.routed_experts is None)
    if w.routed_experts is not None:
        np.testing.assert_array_equal(g.routed_experts.array, w.routed_experts.array, strict=True)
    assert got.payload["nvext"] == want.payload["nvext"]




CASES = {
    "token_id records": dict(),
    "text records": dict(as_ids=False),
    "no choice logprobs": dict(choice_logprobs=False),
    "routing": dict(routed=True),
    "routing and its copy": dict(routed=True, copy_routed=True),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("per", [1, 4, 64])
def test_dynamo_chat_stream_is_the_whole_body(use, case, per):
    d = Dynamo(n=13, seed=per, **CASES[case])
    want = use.parse_chat_completions_response(d.whole())
    got = tokenwire.parse_chat_completions_stream(sse(d.chunks(per)))
    assert_same(got, want)
    assert got.choices[0].completion_ids.tolist() == d.ids
    assert got.choices[0].completion_logprobs.tolist() == [engine_value(v) for v in d.values]
    assert_same(incremental("chat", sse(d.chunks(per)), list(range(0, 4000, 37))), want)


def test_dynamo_chat_stream_with_a_head(use):
    # A head pairs the choice's candidates with the engine's tokens through the ids they name.
    d = Dynamo(n=9, seed=3)
    chunks = d.chunks(2)
    for chunk in chunks[:-1]:
        for rec in chunk["choices"][0]["logprobs"]["content"]:
            with_head(rec)
    want = use.parse_chat_completions_response(dumps(_whole_of(chunks)).encode(), top_k=1)
    assert_same(tokenwire.parse_chat_completions_stream(sse(chunks), top_k=1), want)


def with_head(rec: dict[str, Any]) -> None:
    """Three candidates (a head of one needs k + 2): the sampled token and two below it."""
    token = int(rec["token"].split(":")[1])
    rec["top_logprobs"] = [{"token": f"token_id:{token + j}", "logprob": rec["logprob"] - 2 * j, "bytes": None}
                           for j in range(3)]


def _whole_of(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Dynamo's aggregator over ``chunks``: text, records and nvext ids concatenated, nvext's
    other members the last chunk's."""
    content, records, nvext, usage = "", [], {}, None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            content += choice["delta"].get("content") or ""
            records += (choice.get("logprobs") or {}).get("content") or []
        for key, value in (chunk.get("nvext") or {}).items():
            if key == "completion_token_ids":
                nvext.setdefault(key, []).extend(value)
            else:
                nvext[key] = value
    choice = {"index": 0, "message": {"content": content, "role": "assistant"}, "finish_reason": "stop",
              "logprobs": {"content": records}}
    return {"id": "chatcmpl-1", "choices": [choice], "created": 1, "model": "m", "object": "chat.completion",
            "usage": usage, "nvext": nvext}


def test_a_hidden_stop_token_as_in_the_whole_body(use):
    # Dynamo's post-processing hides the stop token from the choice: 566 engine ids against 565
    # choice records (NeMo-Gym PR #1963). The engine's logprobs are the evidence, as in a body.
    d = Dynamo(n=10, seed=4, as_ids=False)  # records of text: the choice names no ids to cross-check
    chunks = d.chunks(3)
    chunks[-2]["choices"][0]["logprobs"]["content"].pop()
    want = use.parse_chat_completions_response(dumps(_whole_of(chunks)).encode())
    got = tokenwire.parse_chat_completions_stream(sse(chunks))
    assert_same(got, want)
    assert len(got.choices[0].completion_ids) == 10


def test_other_nvext_members_are_the_last_chunks(use):
    d = Dynamo(n=6, seed=5)
    chunks = d.chunks(2)
    for i, chunk in enumerate(chunks[:-1]):
        chunk["nvext"] = {"worker_id": {"decode_worker_id": 7, "prefill_worker_id": i}, **chunk["nvext"]}
    r = tokenwire.parse_chat_completions_stream(sse(chunks))
    assert r.payload["nvext"]["worker_id"] == {"decode_worker_id": 7, "prefill_worker_id": 2}
    assert r.payload["nvext"]["engine_data"] == {"finished": True}


# --- refused, each at its event, choice and field ----------------------------------------------------


def test_nvext_not_an_object(use):
    chunks = Dynamo(n=6, seed=1).chunks(2)
    chunks[1]["nvext"] = ["x"]
    err = refused(sse(chunks))
    assert (err.choice, err.field) == (None, "nvext") and err.reason.startswith("event 1: must be an object")


def test_nvext_ids_not_a_list(use):
    chunks = Dynamo(n=6, seed=1).chunks(2)
    chunks[0]["nvext"]["completion_token_ids"] = "1,2"
    err = refused(sse(chunks))
    assert err.field == "nvext.completion_token_ids" and err.reason.startswith("event 0: must be an array")


def test_engine_data_sent_twice(use):
    chunks = Dynamo(n=6, seed=1).chunks(2)
    chunks[1]["nvext"]["engine_data"] = chunks[2]["nvext"]["engine_data"]
    err = refused(sse(chunks))
    assert err.field == "nvext.engine_data" and err.reason.startswith("event 2: comes once")
    assert "event 1 had it" in str(err)


@pytest.mark.parametrize("key", ["engine_data", "routed_experts"])
def test_engine_data_before_the_choices_last_chunk(use, key):
    d = Dynamo(n=6, seed=1, routed=True, copy_routed=True)
    chunks = d.chunks(2)
    value = chunks[2]["nvext"].pop(key)
    chunks[1]["nvext"][key] = value
    err = refused(sse(chunks))
    assert (err.choice, err.field) == (0, f"nvext.{key}")
    assert err.reason.startswith("event 1: comes on the choice's last chunk only (event 2)")


def test_a_changed_engine_id_delta(use):
    chunks = Dynamo(n=9, seed=2).chunks(3)
    chunks[1]["nvext"]["completion_token_ids"][2] += 1  # token 5
    err = refused(sse(chunks))
    assert err.field == "nvext.completion_token_ids" and err.token == 5 and "differ at token 5" in str(err)


def test_a_lost_engine_id_delta(use):
    chunks = Dynamo(n=9, seed=2).chunks(3)
    del chunks[1]["nvext"]["completion_token_ids"][0]
    err = refused(sse(chunks))
    assert err.field == "nvext.completion_token_ids" and "differ in length" in str(err)


def test_records_with_and_without_token_ids(use):
    chunks = Dynamo(n=6, seed=1).chunks(2)
    chunks[2]["choices"][0]["token_ids"] = chunks[2]["nvext"]["completion_token_ids"]
    err = refused(sse(chunks))
    assert (err.choice, err.field) == (0, "token_ids") and err.reason.startswith("event 2: this chunk's records")


def test_a_record_naming_another_token_is_placed_in_its_event(use):
    d = Dynamo(n=9, seed=2)
    chunks = d.chunks(3)
    rec = chunks[2]["choices"][0]["logprobs"]["content"][1]  # token 7
    rec["token"] = f"token_id:{d.ids[7] + 1}"
    for chunk in chunks[:-1]:
        for r in chunk["choices"][0]["logprobs"]["content"]:
            with_head(r)
    err = refused(sse(chunks), top_k=1)
    assert err.choice == 0 and err.token == 7 and "(event 2)" in str(err)


def test_several_choices_with_nvext(use):
    d = Dynamo(n=4, seed=1)
    chunks = d.chunks(2)
    second = copy.deepcopy(chunks[0])
    second["choices"][0]["index"] = 1
    del second["nvext"]
    chunks.insert(1, second)
    err = refused(sse(chunks))
    assert "one per response" in str(err) and "`n: 1`" in str(err)


# --- both implementations, every path, any split -----------------------------------------------------


def _streams(seed: int) -> list[bytes]:
    out = []
    for i, case in enumerate(CASES.values()):
        d = Dynamo(n=5 + seed % 7, seed=seed + i, **case)
        out.append(sse(d.chunks(1 + (seed + i) % 3)))
    return out


def test_both_implementations_agree_on_dynamo_streams(simd, monkeypatch):
    from tokenwire import _core, _pycore
    for seed in range(3):
        for body in _streams(seed):
            bodies = [body]
            chunks = [json.loads(e[6:]) for e in body.split(b"\n\n") if e.startswith(b"data: {")]
            for edit in (lambda c: c[0]["nvext"].pop("completion_token_ids"),
                         lambda c: c[-2]["nvext"].update(completion_token_ids=None),
                         lambda c: c[0].update(nvext=None),
                         lambda c: c[0]["choices"][0].update(logprobs=None)):
                edited = copy.deepcopy(chunks)
                edit(edited)
                bodies.append(sse(edited))
            for b in bodies:
                outcomes = []
                for impl in (_core, _pycore):
                    monkeypatch.setattr(_select, "impl", impl)
                    outcomes += [_outcome("chat", b, [], True), _outcome("chat", b, list(range(0, len(b), 11)), True),
                                 _outcome("chat", b, [], False)]
                for o in outcomes[1:]:
                    assert_same_outcome(o, outcomes[0])


@st.composite
def split_dynamo_streams(draw):
    case = draw(st.sampled_from(sorted(CASES)))
    d = Dynamo(n=draw(st.integers(1, 20)), seed=draw(st.integers(0, 1000)), **CASES[case])
    usage = draw(st.booleans())
    body = sse(d.chunks(draw(st.integers(1, 6)), usage=usage))
    cuts = draw(st.lists(st.integers(0, len(body)), max_size=20))
    return d, body, cuts, usage


@settings(max_examples=40, deadline=None)
@given(split_dynamo_streams())
def test_random_splits_give_the_whole_body_result(stream):
    d, body, cuts, usage = stream
    want = _select.impl.parse_chat_completions_response(d.whole(usage=usage))
    assert_same(incremental("chat", body, cuts), want)
