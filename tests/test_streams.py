"""Streamed responses: SSE bodies laid out as vLLM's stream generators lay them out, read whole
and piece by piece, against the whole-body parse of the response they stand for."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import samples
from tokenwire import MalformedResponseError
from tokenwire.read import _select
from tokenwire.read._stream import StreamReader

from . import growth


def dumps(value: Any) -> str:
    """Pydantic's model_dump_json: compact separators, fields in declaration order."""
    return json.dumps(value, separators=(",", ":"))


def _dumps(value: Any) -> bytes:
    """JSON as SGLang's server writes it (``orjson.dumps`` with ``OPT_NON_STR_KEYS``): compact,
    UTF-8, integer keys as strings; the standard library's where orjson is not installed."""
    try:
        import orjson
    except ImportError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


def sse(chunks: list[Any], *, done: bool = True) -> bytes:
    events = [f"data: {dumps(c)}\n\n" for c in chunks]
    if done:
        events.append("data: [DONE]\n\n")
    return "".join(events).encode()


def evidence(n: int, k: int, seed: int) -> tuple[list[int], list[float], list[list[tuple[int, float]]]]:
    """Realistic distributions (``samples.evidence``), ``k + 2`` candidates per token (a top-k head needs them)."""
    ev = samples.evidence(n, k + 2, seed=seed)
    heads = [list(zip(ev.cand_ids[t].tolist(), ev.cand_logprobs[t].tolist())) for t in range(n)]
    return ev.ids.tolist(), ev.logprobs.tolist(), heads


def record(token: int, logprob: float, head: list[tuple[int, float]]) -> dict[str, Any]:
    # vLLM's _create_tokens_logprobs: token "token_id:N", logprob, bytes, top_logprobs
    return {"token": f"token_id:{token}", "logprob": logprob, "bytes": None,
            "top_logprobs": [{"token": f"token_id:{i}", "logprob": lp, "bytes": None} for i, lp in head]}


class Case:
    """One response's evidence: choices of ids, sampled logprobs and heads."""

    def __init__(self, choices: int = 1, n: int = 40, k: int = 3, seed: int = 0, prompt: int = 7):
        self.k = k
        self.choices = [evidence(n + c, k, seed * 31 + c) for c in range(choices)]
        self.prompt = np.random.default_rng(seed + 99).integers(0, samples.VOCAB, size=prompt).tolist()

    def usage(self) -> dict[str, Any]:
        completion = sum(len(c[0]) for c in self.choices)
        return {"prompt_tokens": len(self.prompt), "total_tokens": len(self.prompt) + completion,
                "completion_tokens": completion, "prompt_tokens_details": None}

    def records(self, c: int, a: int, b: int) -> list[dict[str, Any]]:
        ids, lps, heads = self.choices[c]
        return [record(ids[t], lps[t], heads[t]) for t in range(a, b)]

    # --- vLLM /inference/v1/generate --------------------------------------------------------------

    def generate_whole(self, *, routed: str | None = None) -> bytes:
        choices = []
        for c, (ids, _, _) in enumerate(self.choices):
            choice = {"index": c, "logprobs": {"content": self.records(c, 0, len(ids))}, "finish_reason": "stop",
                      "token_ids": ids}
            if routed is not None:
                choice["routed_experts"] = routed
            choices.append(choice)
        return dumps({"request_id": "gen-1", "choices": choices, "prompt_token_ids": self.prompt,
                      "usage": self.usage()}).encode()

    def generate_chunks(self, per: int = 1, *, routed: str | None = None, usage: bool = True) -> list[Any]:
        """serve_tokens_stream_generator: one chunk per choice and step, its delta ids and
        records; the prompt on the first chunk, routing on each choice's last one; then the
        usage-only chunk (exclude_none) and [DONE]."""
        chunks: list[Any] = []
        longest = max(len(c[0]) for c in self.choices)
        for a in range(0, longest, per):
            for c, (ids, _, _) in enumerate(self.choices):
                if a >= len(ids):
                    continue
                b = min(a + per, len(ids))
                last = b == len(ids)
                choice = {"index": c, "logprobs": {"content": self.records(c, a, b)},
                          "finish_reason": "stop" if last else None, "token_ids": ids[a:b],
                          "routed_experts": routed if last else None}
                chunk: dict[str, Any] = {"request_id": "gen-1", "choices": [choice]}
                if not chunks:
                    chunk["prompt_token_ids"] = self.prompt
                chunk["usage"] = None
                chunks.append(chunk)
        if usage:
            chunks.append({"request_id": "gen-1", "choices": [], "usage": self.usage()})
        return chunks

    # --- vLLM /v1/completions and /v1/chat/completions with return_token_ids ------------------------

    def completions_whole(self) -> bytes:
        choices = []
        for c, (ids, lps, heads) in enumerate(self.choices):
            choices.append({"index": c, "text": "".join(f"<{i}>" for i in ids), "logprobs": self._lists(c, 0, len(ids)),
                            "finish_reason": "length", "stop_reason": None, "prompt_token_ids": self.prompt,
                            "token_ids": ids})
        return dumps({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": choices,
                      "usage": self.usage()}).encode()

    def _lists(self, c: int, a: int, b: int) -> dict[str, Any]:
        ids, lps, heads = self.choices[c]
        offsets = [sum(len(f"<{i}>") for i in ids[:t]) for t in range(a, b)]
        return {"text_offset": offsets, "token_logprobs": lps[a:b], "tokens": [f"token_id:{i}" for i in ids[a:b]],
                "top_logprobs": [{f"token_id:{i}": lp for i, lp in heads[t]} for t in range(a, b)]}

    def completions_chunks(self, per: int = 1) -> list[Any]:
        """completion_stream_generator: the choice's prompt ids on its first chunk, delta text,
        logprobs lists and token ids; the usage chunk (choices []) last."""
        chunks: list[Any] = []
        for c, (ids, _, _) in enumerate(self.choices):
            for a in range(0, len(ids), per):
                b = min(a + per, len(ids))
                choice = {"index": c, "text": "".join(f"<{i}>" for i in ids[a:b]), "logprobs": self._lists(c, a, b),
                          "finish_reason": "length" if b == len(ids) else None, "stop_reason": None,
                          "prompt_token_ids": self.prompt if a == 0 else None, "token_ids": ids[a:b]}
                chunks.append({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
                               "choices": [choice], "usage": None})
        chunks.append({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [],
                       "usage": self.usage()})
        return chunks

    def chat_whole(self) -> bytes:
        choices = []
        for c, (ids, _, _) in enumerate(self.choices):
            choices.append({"index": c, "message": {"role": "assistant", "content": "".join(f"<{i}>" for i in ids)},
                            "logprobs": {"content": self.records(c, 0, len(ids))}, "finish_reason": "stop",
                            "token_ids": ids})
        return dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                      "choices": choices, "usage": self.usage(), "prompt_token_ids": self.prompt}).encode()

    def chat_chunks(self, per: int = 1) -> list[Any]:
        """chat_completion_stream_generator: a role chunk per choice (the first carrying the
        prompt ids), then delta content with its records and token ids, the usage chunk last."""
        chunks: list[Any] = []

        def chunk(choices: list[Any], **extra: Any) -> dict[str, Any]:
            return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                    "choices": choices, **extra}

        for c in range(len(self.choices)):
            role = {"index": c, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                    "finish_reason": None}
            chunks.append(chunk([role], prompt_token_ids=self.prompt) if c == 0 else chunk([role]))
        for c, (ids, _, _) in enumerate(self.choices):
            for a in range(0, len(ids), per):
                b = min(a + per, len(ids))
                choice = {"index": c, "delta": {"content": "".join(f"<{i}>" for i in ids[a:b])},
                          "logprobs": {"content": self.records(c, a, b)},
                          "finish_reason": "stop" if b == len(ids) else None, "token_ids": ids[a:b]}
                chunks.append(chunk([choice]))
        chunks.append(chunk([], usage=self.usage()))
        return chunks

    # --- SGLang /generate ----------------------------------------------------------------------------

    def _meta(self, c: int, a: int, b: int, total: int, last: bool) -> dict[str, Any]:
        ids, lps, heads = self.choices[c]
        meta: dict[str, Any] = {"id": "req-1", "finish_reason": {"type": "length", "length": total} if last else None,
                                "prompt_tokens": len(self.prompt), "weight_version": "default",
                                "num_retractions": 0,
                                "output_token_logprobs": [[lps[t], ids[t], None] for t in range(a, b)],
                                "output_top_logprobs": [[[lp, i, None] for i, lp in heads[t]] for t in range(a, b)],
                                "reasoning_tokens": 0, "completion_tokens": total, "cached_tokens": 0}
        return meta

    def sglang_whole(self) -> bytes:
        ids = self.choices[0][0]
        return _dumps({"text": "".join(f"<{i}>" for i in ids), "output_ids": ids,
                             "meta_info": self._meta(0, 0, len(ids), len(ids), True)})

    def sglang_chunks(self, per: int = 1, *, incremental: bool = False) -> list[Any]:
        """The tokenizer manager's stream of one request: by default each chunk carries every
        id, text and logprob so far; with --incremental-streaming-output the ids, the text and
        the three logprob lists are the chunk's own (the rest of meta_info is the running one)."""
        ids = self.choices[0][0]
        chunks: list[Any] = []
        for a in range(0, len(ids), per):
            b = min(a + per, len(ids))
            first = a if incremental else 0
            meta = self._meta(0, first, b, b, b == len(ids))
            chunks.append({"text": "".join(f"<{i}>" for i in ids[first:b]), "output_ids": ids[first:b],
                           "meta_info": meta})
        return chunks


def sglang_sse(chunks: list[Any]) -> bytes:
    """SGLang's HTTP server: b"data: " + orjson.dumps(out) + b"\n\n", then data: [DONE]."""
    return b"".join(b"data: " + _dumps(c) + b"\n\n" for c in chunks) + \
        b"data: [DONE]\n\n"


def assert_same(got: Any, want: Any) -> None:
    assert got.usage == want.usage and got.format == want.format
    np.testing.assert_array_equal(got.prompt_token_ids, want.prompt_token_ids, strict=True)
    assert len(got.choices) == len(want.choices)
    for g, w in zip(got.choices, want.choices):
        assert (g.index, g.finish_reason) == (w.index, w.finish_reason)
        np.testing.assert_array_equal(g.completion_ids, w.completion_ids, strict=True)
        np.testing.assert_array_equal(g.completion_logprobs, w.completion_logprobs, strict=True)
        for name in ("completion_top_ids", "completion_top_logprobs"):
            x, y = getattr(g, name), getattr(w, name)
            assert (x is None) == (y is None) and (x is None or x.to_lists() == y.to_lists())
        assert (g.routed_experts is None) == (w.routed_experts is None)
        if w.routed_experts is not None:
            np.testing.assert_array_equal(g.routed_experts.array, w.routed_experts.array, strict=True)


@pytest.fixture
def use(impl, monkeypatch):
    """The stream readers over the implementation under test."""
    monkeypatch.setattr(_select, "impl", impl)
    return impl


def pieces(body: bytes, cuts: list[int]) -> list[bytes]:
    cuts = sorted(set(c for c in cuts if 0 < c < len(body)))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]


def incremental(format: str, body: bytes, cuts: list[int], **options: Any) -> Any:
    reader = StreamReader(format, **options)
    for piece in pieces(body, cuts):
        reader.feed(piece)
    return reader.result()


FORMS = {
    "generate": (tokenwire.parse_generate_stream, "parse_generate_response", Case.generate_chunks, Case.generate_whole),
    "completions": (tokenwire.parse_completions_stream, "parse_completions_response", Case.completions_chunks,
                    Case.completions_whole),
    "chat": (tokenwire.parse_chat_completions_stream, "parse_chat_completions_response", Case.chat_chunks,
             Case.chat_whole),
}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("per", [1, 5, 64])
@pytest.mark.parametrize("choices", [1, 3])
def test_stream_is_the_whole_response(use, form, per, choices):
    parse, whole_parser, chunks, whole = FORMS[form]
    case = Case(choices=choices, n=37, k=3, seed=per)
    body = sse(chunks(case, per))
    want = getattr(use, whole_parser)(whole(case), top_k=3)
    got = parse(body, top_k=3)
    assert_same(got, want)
    assert_same(incremental(form, body, list(range(0, len(body), 7)), top_k=3), want)
    assert [len(c.completion_ids) for c in got.choices] == [37 + c for c in range(choices)]


def test_generate_stream_routing_on_the_last_chunk(use):
    case = Case(n=12, k=2, seed=4)
    rows = np.arange((7 + 12 - 1) * 2 * 2, dtype=np.int32).reshape(-1, 2, 2) % 8
    import base64
    import io
    buf = io.BytesIO()
    np.save(buf, rows)
    routed = base64.b64encode(buf.getvalue()).decode()
    body = sse(case.generate_chunks(4, routed=routed))
    want = use.parse_generate_response(case.generate_whole(routed=routed), top_k=2)
    assert want.choices[0].routed_experts is not None
    assert_same(tokenwire.parse_generate_stream(body, top_k=2), want)


def test_framing_variants(use):
    """Comments, keep-alives, CRLF line ends, multi-line data, event:/id: lines, no usage chunk."""
    case = Case(n=9, k=1, seed=2)
    want = use.parse_generate_response(case.generate_whole(), top_k=1)
    chunks = case.generate_chunks(2, usage=False)
    events = [": keep-alive\n\n"]
    for c in chunks:
        text = dumps(c)
        half = text.index(",") + 1  # data lines join with a newline: JSON whitespace there
        events.append(f"event: message\nid: 1\ndata: {text[:half]}\ndata: {text[half:]}\n\n")
        events.append(":\n\n")
    events.append("data: [DONE]\n\n")
    body = "".join(events).encode()
    got = tokenwire.parse_generate_stream(body, top_k=1)
    np.testing.assert_array_equal(got.choices[0].completion_ids, want.choices[0].completion_ids)
    crlf = body.replace(b"\n", b"\r\n")
    np.testing.assert_array_equal(incremental("generate", crlf, list(range(1, len(crlf), 3)), top_k=1)
                                  .choices[0].completion_ids, want.choices[0].completion_ids)
    assert got.usage is None


# --- broken streams: each refused at its field, naming the event ---------------------------------


def refused(body: bytes, form: str = "generate", **options: Any) -> MalformedResponseError:
    parse = FORMS[form][0]
    with pytest.raises(MalformedResponseError) as whole:
        parse(body, **options)
    with pytest.raises(MalformedResponseError) as pieced:
        incremental(form, body, list(range(0, len(body), 5)), **options)
    assert str(whole.value) == str(pieced.value)
    return whole.value


def test_records_against_their_own_delta(use):
    case = Case(n=10, k=2, seed=5)
    chunks = case.generate_chunks(3)
    chunks[2]["choices"][0]["logprobs"]["content"].pop()
    err = refused(sse(chunks), top_k=2)
    assert err.choice == 0 and err.field == "logprobs.content" and "event 2" in str(err)
    assert "2 records for the chunk's 3 token ids" in str(err)


def test_a_record_naming_another_token_is_placed_in_its_event(use):
    case = Case(n=10, k=2, seed=5)
    chunks = case.generate_chunks(3)
    chunks[2]["choices"][0]["token_ids"][1] += 1  # token 7's id no longer its record's
    err = refused(sse(chunks), top_k=2)
    assert err.choice == 0 and err.token == 7 and "(event 2)" in str(err)


def test_records_on_some_chunks_only(use):
    case = Case(n=10, k=2, seed=5)
    chunks = case.generate_chunks(3)
    chunks[1]["choices"][0]["logprobs"] = None
    err = refused(sse(chunks))
    assert err.choice == 0 and err.field == "logprobs.content" and "event 1" in str(err)


@pytest.mark.parametrize("form", FORMS)
def test_a_stream_without_token_ids_is_refused_as_its_body(use, form):
    # No chunk carries token_ids, none carries records: the document has no ids either, and the
    # parser asks for them as of the whole body (it was read as a completion of no tokens).
    parse, whole_parser, chunks, whole = FORMS[form]
    case = Case(n=6, k=2, seed=3)
    sent = chunks(case, 2)
    for chunk in sent:
        for choice in chunk["choices"]:
            choice.pop("token_ids", None)
            choice["logprobs"] = None
    body = json.loads(whole(case))
    for choice in body["choices"]:
        del choice["token_ids"]
        choice["logprobs"] = None
    with pytest.raises(MalformedResponseError) as want:
        getattr(use, whole_parser)(json.dumps(body).encode(), require_logprobs=False)
    err = refused(sse(sent), form, require_logprobs=False)
    assert (err.choice, err.field, err.reason) == (want.value.choice, want.value.field, want.value.reason)


@pytest.mark.parametrize("form", FORMS)
def test_truncated_and_missing_done(use, form):
    _, _, chunks, _ = FORMS[form]
    body = sse(chunks(Case(n=6, seed=1), 2))
    err = refused(body[: -len(b"data: [DONE]\n\n")], form)
    assert "without data: [DONE]" in str(err)
    err = refused(body[: len(body) // 2], form)
    assert "truncated" in str(err)


def test_not_json_and_not_an_object(use):
    chunks = Case(n=6, seed=1).generate_chunks(2)
    body = sse(chunks[:1])[: -len(b"data: [DONE]\n\n")] + b"data: {\"choices\": [\n\n" + sse(chunks[1:])
    err = refused(body)
    assert "event 1: the data is not JSON" in str(err)
    err = refused(b"data: [1, 2]\n\n" + sse(chunks))
    assert "event 0: the data must be a JSON object" in str(err)
    err = refused(sse(chunks) + b"data: {}\n\n")
    assert "after data: [DONE]" in str(err)


@pytest.mark.parametrize("form", FORMS)
def test_a_choice_index_that_jumps(use, form):
    _, _, chunks, _ = FORMS[form]
    made = chunks(Case(choices=2, n=6, seed=3), 2)
    for chunk in made:
        for choice in chunk["choices"]:
            if choice["index"] == 1:
                choice["index"] = 2
    err = refused(sse(made), form)
    assert err.field == "index" and err.choice == 2 and "jumps" in str(err)


def test_once_sent_fields_where_the_producer_puts_them(use):
    case = Case(n=9, seed=6)
    chunks = case.generate_chunks(3)
    chunks[1]["prompt_token_ids"] = case.prompt  # the prompt again, on a later chunk
    err = refused(sse(chunks))
    assert err.field == "prompt_token_ids" and "event 1" in str(err)
    chunks = case.generate_chunks(3)
    chunks[0]["choices"][0]["routed_experts"] = "AAAA"  # routing before the choice's last chunk
    err = refused(sse(chunks))
    assert err.field == "routed_experts" and err.choice == 0 and "event 0" in str(err)
    chunks = case.generate_chunks(3)
    chunks[0]["choices"][0]["weight_versions"] = [1]
    chunks[1]["choices"][0]["weight_versions"] = [2]
    err = refused(sse(chunks))
    assert err.field == "weight_versions" and "event 1" in str(err)


def test_completions_prompt_on_a_later_chunk(use):
    chunks = Case(n=6, seed=1).completions_chunks(2)
    chunks[1]["choices"][0]["prompt_token_ids"] = [1, 2]
    err = refused(sse(chunks), "completions")
    assert err.field == "prompt_token_ids" and err.choice == 0 and "event 1" in str(err)


def test_completions_lists_against_the_delta(use):
    chunks = Case(n=6, seed=1).completions_chunks(2)
    chunks[1]["choices"][0]["logprobs"]["token_logprobs"].append(-1.0)
    err = refused(sse(chunks), "completions")
    assert err.field == "logprobs.token_logprobs" and "event 1" in str(err)


def test_the_parsers_rules_still_apply(use):
    """What the whole-body rules refuse, the stream refuses the same way: usage disagreeing."""
    case = Case(n=6, seed=1)
    chunks = case.chat_chunks(2)
    chunks[-1]["usage"]["completion_tokens"] += 1
    err = refused(sse(chunks), "chat")
    want = pytest.raises(MalformedResponseError, use.parse_chat_completions_response,
                         case.chat_whole().replace(b'"completion_tokens":6', b'"completion_tokens":7'))
    assert err.field == want.value.field


def test_reader_arguments():
    with pytest.raises(ValueError, match="format must be one of"):
        StreamReader("sse")
    with pytest.raises(TypeError, match="unknown option"):
        StreamReader("chat", teacher_logits=True)
    reader = StreamReader("generate")
    with pytest.raises(TypeError, match="feed takes bytes"):
        reader.feed(5)


# --- random splits: the incremental reader gets the whole-body result -----------------------------


@st.composite
def split_streams(draw):
    form = draw(st.sampled_from(sorted(FORMS) + ["sglang"]))
    case = Case(choices=draw(st.integers(1, 3)), n=draw(st.integers(1, 20)), k=2, seed=draw(st.integers(0, 50)))
    if form == "sglang":
        body = sglang_sse(case.sglang_chunks(draw(st.integers(1, 6)), incremental=draw(st.booleans())))
    else:
        body = sse(FORMS[form][2](case, draw(st.integers(1, 6))))
    if draw(st.booleans()):
        body = body.replace(b"\n", b"\r\n")
    cuts = draw(st.lists(st.integers(0, len(body)), max_size=40))
    return form, body, cuts


@settings(max_examples=60, deadline=None)
@given(split_streams())
def test_random_splits_give_the_whole_body_result(stream):
    form, body, cuts = stream
    parse = tokenwire.parse_sglang_generate_stream if form == "sglang" else FORMS[form][0]
    want = parse(body, top_k=2)
    assert_same(incremental(form, body, cuts, top_k=2), want)


# --- SGLang /generate: cumulative by default, incremental with --incremental-streaming-output -------


@pytest.mark.parametrize("deltas", [False, True], ids=["cumulative", "incremental"])
@pytest.mark.parametrize("per", [1, 4, 50])
def test_sglang_stream_is_the_whole_response(use, deltas, per):
    case = Case(n=23, k=3, seed=per)
    body = sglang_sse(case.sglang_chunks(per, incremental=deltas))
    want = use.parse_sglang_generate_response(case.sglang_whole(), top_k=3)
    assert_same(tokenwire.parse_sglang_generate_stream(body, top_k=3), want)
    assert_same(incremental("sglang", body, list(range(0, len(body), 11)), top_k=3), want)


def sglang_refused(chunks: list[Any]) -> MalformedResponseError:
    body = sglang_sse(chunks)
    with pytest.raises(MalformedResponseError) as whole:
        tokenwire.parse_sglang_generate_stream(body)
    with pytest.raises(MalformedResponseError) as pieced:
        incremental("sglang", body, list(range(0, len(body), 5)))
    assert str(whole.value) == str(pieced.value)
    return whole.value


def test_sglang_cumulative_chunks_must_extend(use):
    case = Case(n=12, seed=3)
    chunks = case.sglang_chunks(4)
    chunks[2]["output_ids"][1] += 1  # the third chunk rewrites an id the second sent
    err = sglang_refused(chunks)
    assert err.field == "output_ids" and "event 2" in str(err) and "do not extend" in str(err)
    chunks = case.sglang_chunks(4)
    chunks[2]["meta_info"]["output_token_logprobs"][0][0] -= 0.5
    err = sglang_refused(chunks)
    assert err.field == "meta_info.output_token_logprobs" and "event 2" in str(err)


def test_sglang_incremental_lists_against_the_delta(use):
    case = Case(n=12, seed=3)
    chunks = case.sglang_chunks(4, incremental=True)
    chunks[1]["meta_info"]["output_top_logprobs"].pop()
    err = sglang_refused(chunks)
    assert err.field == "meta_info.output_top_logprobs" and "event 1" in str(err)
    chunks = case.sglang_chunks(4, incremental=True)
    chunks[2]["meta_info"]["completion_tokens"] += 1
    err = sglang_refused(chunks)
    assert err.field == "meta_info.completion_tokens" and "event 2" in str(err)


def test_sglang_neither_form(use):
    chunks = Case(n=12, seed=3).sglang_chunks(4, incremental=True)
    chunks[1]["meta_info"]["completion_tokens"] = 5  # 4 new ids after 4: neither 4 nor 8
    err = sglang_refused(chunks)
    assert err.field == "meta_info.completion_tokens" and "event 1" in str(err)


def test_parse_many_takes_streams(use):
    cases = [Case(n=8 + i, k=2, seed=i) for i in range(3)]
    bodies = [sse(c.generate_chunks(3)) for c in cases]
    bodies.append(sse(cases[0].generate_chunks(3), done=False))
    got = tokenwire.parse_many(bodies, format="generate_stream", errors="collect", threads=2, top_k=2)
    for body, result in zip(bodies[:3], got):
        assert_same(result, tokenwire.parse_generate_stream(body, top_k=2))
    assert isinstance(got[3], MalformedResponseError) and got[3].body_index == 3
    chunks = [sglang_sse(c.sglang_chunks(4, incremental=True)) for c in cases]
    for body, result in zip(chunks, tokenwire.parse_many(chunks, format="sglang_stream", threads=1)):
        assert_same(result, tokenwire.parse_sglang_generate_stream(body))
    with pytest.raises(TypeError, match="unknown option"):
        tokenwire.parse_many(bodies, format="chat_stream", teacher_logits=True)


# --- linear time against adversarial streams (n against 4n, as tests/test_complexity.py) ------------


def _fed(body: bytes, piece: int) -> None:
    reader = StreamReader("generate")
    try:
        for i in range(0, len(body), piece):
            reader.feed(body[i:i + piece])
        reader.result()
    except MalformedResponseError:
        pass


def _one_long_event(n: int) -> bytes:  # one event's bytes arriving a few at a time
    return sse([{"choices": [{"index": 0, "token_ids": [1] * n, "logprobs": None}]}])


def _keep_alives(n: int) -> bytes:
    return b": keep-alive\n\n" * n + sse([{"choices": [{"index": 0, "token_ids": [1], "logprobs": None}]}])


def _data_lines(n: int) -> bytes:  # one event spelled over many data: lines
    return b"data: {\"choices\": [{\"index\": 0, \"token_ids\": [1" + b"\ndata: ,1" * n + b"]}]}\n\ndata: [DONE]\n\n"


def _many_choices(n: int) -> bytes:
    return sse([{"choices": [{"index": i, "token_ids": [1], "logprobs": None}]} for i in range(n)])


STREAM_INPUTS = {"one_long_event": (_one_long_event, 100000, 16), "keep_alives": (_keep_alives, 20000, 7),
                 "data_lines": (_data_lines, 20000, 5), "many_choices": (_many_choices, 3000, 64)}


@pytest.mark.parametrize("name", STREAM_INPUTS)
def test_stream_reading_is_linear(name):
    make, n, piece = STREAM_INPUTS[name]
    small, large = make(n), make(4 * n)
    ratio = growth.ratio(lambda: _fed(small, piece), lambda: _fed(large, piece))
    assert ratio < growth.BOUND, f"{name}: 4x the input took {ratio:.1f}x as long"


@pytest.mark.parametrize("sent", [{"error": {"message": "boom", "type": "InternalServerError", "code": 500}},
                                  {"object": "error", "message": "boom", "type": "BadRequestError", "code": 400}])
def test_a_streamed_server_error(use, sent):
    chunks = Case(n=6, seed=1).generate_chunks(2)
    err = refused(sse(chunks[:2] + [sent]))
    assert err.field == "error" and "event 2: the server sent an error" in str(err) and "boom" in str(err)


# --- the compiled scan (csrc/wire/tw_sse.c) against this module's reading ----------------------------


def _outcome(format: str, body: bytes, cuts: list[int], scan: bool, **options: Any) -> Any:
    """The reader's result, or its refusal, with the compiled scan or without it."""
    reader = StreamReader(format, **options)
    if not scan:
        reader._scan = None
    try:
        for piece in pieces(body, cuts):
            reader.feed(piece)
        return reader.result()
    except MalformedResponseError as exc:
        return exc


def assert_same_outcome(got: Any, want: Any) -> None:
    if isinstance(want, MalformedResponseError):
        assert isinstance(got, MalformedResponseError), got
        assert (str(got), got.choice, got.field, got.token) == (str(want), want.choice, want.field, want.token)
    else:
        assert not isinstance(got, Exception), got
        assert_same(got, want)
        for g, w in zip(got.choices, want.choices):
            assert _same_values(g.raw, w.raw)
        assert _same_values(got.payload, want.payload)


def _same_values(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_values(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same_values, a, b))
    return type(a) is type(b) and a == b


def _scanned(format: str, body: bytes) -> bool:
    """Whether the compiled scan read the whole body itself (no hand-over)."""
    reader = StreamReader(format)
    reader.feed(body)
    return reader._scan is not None and reader._scan.document() is not None


def test_the_compiled_scan_reads_the_producers_streams(simd, monkeypatch):
    from tokenwire import _core
    monkeypatch.setattr(_select, "impl", _core)
    case = Case(choices=2, n=30, k=2, seed=4)
    for form, (_, _, chunks, _) in FORMS.items():
        for per in (1, 7):
            body = sse(chunks(case, per))
            assert _scanned(form, body), (form, per)
            assert_same_outcome(_outcome(form, body, [], True, top_k=2), _outcome(form, body, [], False, top_k=2))
    assert _scanned("generate", b": keep-alive\n\n" + sse(case.generate_chunks(5)) + b"\n")


# Texts that change a stream where the compiled scan must decide as this module does: hand over
# (a form it leaves to it) or agree.
_EDITS = [
    (b'"token_ids":[', b'"token_ids":[],"token_ids":['),  # a repeated key
    (b'"index":0', b'"index":0.0'), (b'"index":0', b'"index":-0'), (b'"index":1', b'"index":3'),
    (b'"finish_reason":null', b'"finish_reason":null,"extra":{"a":[1,2]}'),
    (b'"request_id":"gen-1"', b'"request_id":"gen-1","object":"error"'),
    (b'"usage":null', b'"usage":null,"error":{"message":"x"}'),
    (b'"logprobs":{"content":[', b'"logprobs":{"content":null,"x":['),
    (b'"content":[{', b'"content":[{"token":"token_id:1","logprob":-1.0},{'),
    (b'"logprob":-', b'"logprob":1e999,"x":-'), (b'"logprob":-', b'"logprob":"\\ud800",'),
    (b'"routed_experts":null', b'"routed_experts":"AAAA"'),
    (b'"finish_reason":null', b'"finish_reason":null,"kept_tokens":[1]'),
    (b'"role":"assistant"', b'"role":""'), (b'"role":"assistant"', b'"role":"\\u0061ssistant"'),
    (b'"content":"<', b'"content":"\\ud83d\\ude00<'), (b'"content":"<', b'"content":7,"x":"<'),
    (b'"text":"<', b'"text":"\\n<'), (b'"text":"<', b'"text":null,"x":"<'),
    (b'"tokens":[', b'"tokens":null,"x":['),
    (b'"prompt_token_ids":null', b'"prompt_token_ids":[1,2]'),
    (b'"created":1', b'"created":1.0'), (b'"model":"m"', b'"model":"m","model_x":"\\u00e9"'),
    (b'\n\n', b'\n:comment\nevent: x\nid: 3\n\n'), (b'\n\n', b'\ndata: {}\n\n'), (b'\n\n', b'\r\n\r\n'),
    (b'data: [DONE]', b'data:[DONE] '), (b'data: [DONE]\n\n', b'data: [DONE]'),
    (b'data: [DONE]\n\n', b''), (b'data: [DONE]\n\n', b'data: [DONE]\n\ndata: {}\n\n'),
    (b'{"', b'[{"'), (b'{"', b'{ "'), (b'}\n', b'} \n'), (b'}\n', b'}x\n'),
]


@st.composite
def edited_streams(draw):
    form = draw(st.sampled_from(sorted(FORMS)))
    case = Case(choices=draw(st.integers(1, 3)), n=draw(st.integers(1, 12)), k=2, seed=draw(st.integers(0, 50)))
    body = sse(FORMS[form][2](case, draw(st.integers(1, 5))))
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            old, new = draw(st.sampled_from(_EDITS))
            at = [i for i in range(len(body)) if body.startswith(old, i)]
            if at:
                i = draw(st.sampled_from(at))
                body = body[:i] + new + body[i + len(old):]
        else:  # any byte: one replaced, dropped or repeated
            i = draw(st.integers(0, len(body) - 1))
            how = draw(st.sampled_from(["replace", "drop", "repeat"]))
            byte = draw(st.sampled_from(b'"{}[],:\\\n -0e.x\x00\xff'))
            body = (body[:i] + bytes([byte]) + body[i + 1:] if how == "replace" else
                    body[:i] + body[i + 1:] if how == "drop" else body[:i] + body[i:i + 8] + body[i:])
    cuts = draw(st.lists(st.integers(0, len(body)), max_size=6))
    return form, body, cuts


@settings(max_examples=150, deadline=None)
@given(edited_streams())
def test_the_compiled_scan_decides_as_the_specification(stream):
    """Producers' streams changed anywhere: the compiled reader (scan, hand-over where it
    declines) gives this module's result or its refusal, message and place, on every path."""
    from tokenwire import _core
    form, body, cuts = stream
    saved = _select.impl
    _select.impl = _core
    try:
        for path in _core.simd_paths():
            with _core.simd_path_forced(path):
                want = _outcome(form, body, cuts, False, top_k=2)
                assert_same_outcome(_outcome(form, body, cuts, True, top_k=2), want)
                assert_same_outcome(_outcome(form, body, [], True, top_k=2), want)
    finally:
        _select.impl = saved


def test_the_scan_hands_over_mid_stream(monkeypatch):
    from tokenwire import _core
    monkeypatch.setattr(_select, "impl", _core)
    case = Case(choices=2, n=20, k=2, seed=9)
    events = sse(case.chat_chunks(3)).split(b"\n\n")
    events[4] = events[4].replace(b'"delta":{', b'"delta":\n  data: {', 1)  # one event over two data lines
    events[4] = events[4].replace(b"\n  data: ", b"\ndata: ")
    body = b"\n\n".join(events)
    reader = StreamReader("chat", top_k=2)
    reader.feed(body[: len(body) // 2])
    assert reader._scan is None  # handed over at event 4
    reader.feed(body[len(body) // 2:])
    assert_same(reader.result(), tokenwire.parse_chat_completions_response(case.chat_whole(), top_k=2))
    assert_same_outcome(_outcome("chat", body, [], True, top_k=2), _outcome("chat", body, [], False, top_k=2))


# --- streams as formats of the registry: the audit, the command line, the batch path ---------------


STREAM_BODIES = {
    "generate_stream": lambda case: sse(case.generate_chunks(3)),
    "completions_stream": lambda case: sse(case.completions_chunks(3)),
    "chat_stream": lambda case: sse(case.chat_chunks(3)),
    "sglang_stream": lambda case: sglang_sse(case.sglang_chunks(4, incremental=True)),
}


@pytest.mark.parametrize("format", STREAM_BODIES)
def test_the_audit_takes_streams(use, format):
    case = Case(choices=1 if format == "sglang_stream" else 2, n=12, k=2, seed=5)
    verdict = tokenwire.audit(STREAM_BODIES[format](case), format, top_k=2)
    assert verdict.valid and verdict.format == format
    assert verdict.choices == len(case.choices) and verdict.tokens == sum(len(c[0]) for c in case.choices)


def test_the_audit_sorts_a_streams_defects(use):
    case = Case(n=10, k=2, seed=6)
    chunks = case.generate_chunks(2)
    chunks[2]["choices"][0]["logprobs"]["content"].append(case.records(0, 0, 1)[0])  # 3 records, 2 ids
    verdict = tokenwire.audit(sse(chunks), "generate_stream")
    assert (verdict.valid, verdict.defect, verdict.field, verdict.length_difference) == \
        (False, "length_mismatch", "logprobs.content", 1)
    assert verdict.message == "event 2: 3 records for the chunk's 2 token ids"
    body = sse(case.generate_chunks(2)).replace(b'"index":0', b'"index":0,', 1)
    verdict = tokenwire.audit(body, "generate_stream")
    assert verdict.defect == "malformed_json" and verdict.message.startswith("event 0: the data is not JSON")
    verdict = tokenwire.audit(sse(case.generate_chunks(2), done=False), "generate_stream")
    assert verdict.defect == "malformed_json" and "truncated" in verdict.message
    chunks = case.generate_chunks(2)
    chunks[3]["choices"][0]["logprobs"]["content"][1]["token"] = "token_id:7"  # a record naming another token
    verdict = tokenwire.audit(sse(chunks), "generate_stream")
    assert (verdict.defect, verdict.token) == ("id_mismatch", 7) and verdict.message.endswith("(event 3)")
    with pytest.raises(ValueError, match="generate_stream"):
        tokenwire.audit(b"", "generate_streams")


def test_check_takes_stream_files(tmp_path, capsys):
    from tokenwire import cli
    case = Case(choices=2, n=9, k=2, seed=7)
    good, bad = tmp_path / "good.sse", tmp_path / "bad.sse"
    good.write_bytes(sse(case.chat_chunks(2)))
    chunks = case.chat_chunks(2)
    del chunks[3]["choices"][0]["token_ids"][0]
    bad.write_bytes(sse(chunks))
    assert cli.main(["check", "--format", "chat_stream", "--top-k", "2", str(good)]) == 0
    assert cli.main(["check", "--format", "chat_stream", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "length mismatch" in out and "event 3" in out
    # SSE bodies kept as JSON strings in a JSON-lines capture: --field reaches them
    lines = tmp_path / "bodies.jsonl"
    lines.write_text("".join(json.dumps({"body": sse(c).decode()}) + "\n"
                             for c in (case.chat_chunks(1), case.chat_chunks(4))))
    assert cli.main(["check", "--format", "chat_stream", "--field", "body", str(lines)]) == 0


def test_streams_into_a_batch(use):
    cases = [Case(choices=c, n=7 + 3 * c, k=2, seed=c) for c in (1, 2, 3)]
    streamed = tokenwire.parse_many([sse(c.generate_chunks(4)) for c in cases], format="generate_stream",
                                    threads=2, top_k=2)
    whole = [tokenwire.parse_generate_response(c.generate_whole(), top_k=2) for c in cases]
    got, want = tokenwire.collate(streamed), tokenwire.collate(whole)
    for name in ("completion_ids", "lengths", "mask", "completion_logprobs", "completion_top_ids",
                 "completion_top_logprobs", "completion_top_lengths", "prompt_token_ids", "prompt_lengths",
                 "response", "choice"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), strict=True)


def test_one_reader_fed_from_two_threads_never_crashes(monkeypatch):
    """A reader is one stream's: fed from two threads at once, a call may be refused
    (RuntimeError) while the other runs, but the process never sees a half-written state."""
    import threading
    from tokenwire import _core
    monkeypatch.setattr(_select, "impl", _core)
    body = sse(Case(n=400, k=2, seed=2).generate_chunks(1))
    reader = StreamReader("generate", top_k=2)
    refused = []

    def feed(part: bytes) -> None:
        for i in range(0, len(part), 512):
            try:
                reader.feed(part[i:i + 512])
            except (RuntimeError, MalformedResponseError) as exc:
                refused.append(exc)

    threads = [threading.Thread(target=feed, args=(body,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        reader.result()
    except (MalformedResponseError, RuntimeError):
        pass


@pytest.mark.parametrize("edit", range(len(_EDITS)))
def test_each_edit_decides_as_the_specification(simd, monkeypatch, edit):
    """Every edit of the list at its first and its last place in each form's stream, whole and
    in pieces: the compiled reader's outcome is the Python reader's."""
    from tokenwire import _core
    monkeypatch.setattr(_select, "impl", _core)
    old, new = _EDITS[edit]
    case = Case(choices=2, n=6, k=2, seed=edit)
    for form, (_, _, chunks, _) in FORMS.items():
        body = sse(chunks(case, 2))
        at = [i for i in range(len(body)) if body.startswith(old, i)]
        for i in sorted(set(at[:1] + at[-1:])):
            edited = body[:i] + new + body[i + len(old):]
            for cuts in ([], list(range(0, len(edited), 97))):
                want = _outcome(form, edited, cuts, False, top_k=2)
                assert_same_outcome(_outcome(form, edited, cuts, True, top_k=2), want)
