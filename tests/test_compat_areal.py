"""tokenwire.compat.areal without AReaL installed: the checks its patch adds, over AReaL-shaped
responses and stand-in backends that read them as AReaL 1.0.4's do (AReaL's own suite and its
real backend code against a local server run in tests/run_areal_suite.py)."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenwire import MalformedResponseError
from tokenwire.compat import areal as compat

SENTINEL = -9999.0


@dataclass
class HttpGenerationResult:  # the shape of AReaL's (areal.api.io_struct)
    output_tokens: list[int]
    output_logprobs: list[float]
    stop_reason: str
    routed_experts: np.ndarray | None = None


class VLLMStandIn:
    """Reads a vLLM body as AReaL's VLLMBackend does: the number after the name's colon."""

    def parse_generation_response(self, response: dict[str, Any]) -> HttpGenerationResult:
        choice = response["choices"][0]
        block = choice["logprobs"]
        if "tokens" in block:
            tokens, values = [int(n.split(":")[1]) for n in block["tokens"]], block["token_logprobs"]
        elif "content" in block:
            tokens = [int(r["token"].split(":")[1]) for r in block["content"]]
            values = [r["logprob"] for r in block["content"]]
        else:
            raise ValueError("Unexpected vLLM response format.")
        if choice["finish_reason"] == "abort" and not tokens:
            return HttpGenerationResult([], [], "abort")
        return HttpGenerationResult(tokens, values, choice["finish_reason"])


class SGLangStandIn:
    """Reads an SGLang body as AReaL's SGLangBackend does: ids and logprobs of the triples,
    int32 routing reshaped to prompt + completion - 1 rows."""

    def parse_generation_response(self, response: dict[str, Any]) -> HttpGenerationResult:
        meta = response["meta_info"]
        routed = meta.get("routed_experts")
        if routed is not None:
            rows = meta["prompt_tokens"] + meta["completion_tokens"] - 1
            routed = np.frombuffer(base64.b64decode(routed), dtype=np.int32).reshape(rows, -1)
        triples = meta["output_token_logprobs"]
        return HttpGenerationResult([t[1] for t in triples], [t[0] for t in triples],
                                    meta["finish_reason"]["type"], routed)


@pytest.fixture
def backends(monkeypatch):
    """Stand-in backend classes patched as patch() patches AReaL's."""
    classes = {"vllm": type("VLLMBackend", (VLLMStandIn,), {}), "sglang": type("SGLangBackend", (SGLangStandIn,), {})}
    for kind, cls in classes.items():
        monkeypatch.setitem(compat._saved, cls, vars(cls.__mro__[1])["parse_generation_response"])
        monkeypatch.setattr(cls, "parse_generation_response", compat._REPLACEMENTS[kind], raising=False)
    return {kind: (cls(), cls.__mro__[1]()) for kind, cls in classes.items()}


def vllm(n: int = 6, *, chat: bool = True, names: str = "token_id:", extra: int = 0, usage: bool = True,
         values: list[Any] | None = None, finish: str = "stop") -> dict[str, Any]:
    ids = [1000 + 3 * t for t in range(n)]
    logprobs = values if values is not None else [-0.125 * (t + 1) for t in range(n + extra)]
    if chat:
        records = [{"token": f"{names}{i}", "logprob": lp, "bytes": None, "top_logprobs": []}
                   for i, lp in zip(ids + [7] * extra, logprobs)]
        block: dict[str, Any] = {"content": records}
    else:
        block = {"tokens": [f"{names}{i}" for i in ids], "token_logprobs": logprobs,
                 "top_logprobs": None, "text_offset": list(range(n))}
    body: dict[str, Any] = {"choices": [{"index": 0, "finish_reason": finish, "logprobs": block}]}
    if usage:
        body["usage"] = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3}
    return body


def routing(rows: int, width: int = 8) -> str:
    flat = [(r * 7 + k) % 64 for r in range(rows) for k in range(width)]
    return base64.b64encode(struct.pack(f"<{len(flat)}i", *flat)).decode()


def sglang(n: int = 6, prompt: int = 4, *, rows: int | None = None, completion: int | None = None,
           values: list[Any] | None = None) -> dict[str, Any]:
    logprobs = values if values is not None else [-0.25 * (t + 1) for t in range(n)]
    meta = {"prompt_tokens": prompt, "completion_tokens": n if completion is None else completion,
            "finish_reason": {"type": "stop"},
            "output_token_logprobs": [[lp, 500 + t, None] for t, lp in enumerate(logprobs)]}
    if rows is not None:
        meta["routed_experts"] = routing(rows)
    return {"text": "x", "output_ids": [500 + t for t in range(n)], "meta_info": meta}


def same(a: HttpGenerationResult, b: HttpGenerationResult) -> None:
    assert type(a) is type(b)
    assert a.output_tokens == b.output_tokens and a.stop_reason == b.stop_reason
    assert [type(x) for x in a.output_tokens] == [type(x) for x in b.output_tokens]
    assert a.output_logprobs == b.output_logprobs
    assert [type(x) for x in a.output_logprobs] == [type(x) for x in b.output_logprobs]
    if b.routed_experts is None:
        assert a.routed_experts is None
    else:
        assert a.routed_experts.dtype == b.routed_experts.dtype
        np.testing.assert_array_equal(a.routed_experts, b.routed_experts)


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("names", ["token_id:", "token:"])
def test_vllm_valid_responses_read_as_areal_reads_them(backends, chat, names):
    ours, theirs = backends["vllm"]
    for body in (vllm(chat=chat, names=names), vllm(1, chat=chat, names=names), vllm(chat=chat, usage=False),
                 vllm(0, chat=chat, finish="abort")):
        same(ours.parse_generation_response(body), theirs.parse_generation_response(body))
    assert compat.calls["parse_generation_response (vLLM)"] > 0


def test_sglang_valid_responses_read_as_areal_reads_them(backends):
    ours, theirs = backends["sglang"]
    for body in (sglang(), sglang(1, 1), sglang(rows=9), sglang(3, 2, rows=4)):
        same(ours.parse_generation_response(body), theirs.parse_generation_response(body))


@given(st.lists(st.floats(-50, 0, allow_nan=False).filter(lambda x: x != SENTINEL), min_size=1, max_size=40),
       st.booleans())
def test_vllm_any_finite_logprobs_pass_unchanged(values, chat):
    body = vllm(len(values), chat=chat, values=values)
    result = compat._vllm_parse(VLLMStandIn(), body)
    assert result.output_logprobs == values
    assert result.output_tokens == [1000 + 3 * t for t in range(len(values))]


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("defect, field, token", [
    ("N ids vs N+1 logprobs", None, None),
    ("missing logprob", None, 2),
    ("-9999 logprob", None, 2),
    ("NaN logprob", None, 2),
    ("usage one more", "usage.completion_tokens", None),
])
def test_vllm_defects_refused(backends, chat, defect, field, token):
    ours, theirs = backends["vllm"]
    values: list[Any] = [-0.5] * 6
    body = vllm(6, chat=chat)
    if defect == "N ids vs N+1 logprobs":
        # chat: one record more than usage counts; completions: 6 names against 7 logprobs
        body = vllm(6, chat=chat, extra=1) if chat else vllm(6, chat=chat, values=[-0.5] * 7)
    elif defect != "usage one more":
        values[2] = {"missing logprob": None, "-9999 logprob": SENTINEL, "NaN logprob": math.nan}[defect]
        body = vllm(6, chat=chat, values=values)
    else:
        body["usage"]["completion_tokens"] = 7
    theirs.parse_generation_response(body)  # AReaL's reading passes it
    with pytest.raises(compat.AReaLResponseError) as caught:
        ours.parse_generation_response(body)
    assert isinstance(caught.value, MalformedResponseError) and isinstance(caught.value, ValueError)
    assert caught.value.choice == 0
    if field:
        assert caught.value.field == field
    if token is not None:
        assert caught.value.token == token


def test_vllm_token_ids_disagreeing_with_the_names_refused(backends):
    ours, _ = backends["vllm"]
    body = vllm(4)
    body["choices"][0]["token_ids"] = [1000, 1003, 1006, 1010]
    with pytest.raises(compat.AReaLResponseError, match="token_ids holds 1010") as caught:
        ours.parse_generation_response(body)
    assert caught.value.token == 3
    body["choices"][0]["token_ids"] = [1000, 1003, 1006, 1009]
    assert ours.parse_generation_response(body).output_tokens == [1000, 1003, 1006, 1009]


def test_vllm_areal_errors_kept(backends):
    ours, theirs = backends["vllm"]
    for body in ({"choices": [{"finish_reason": "stop", "logprobs": {}}]},
                 {"choices": [{"finish_reason": "stop", "logprobs": {"content": [{"logprob": -1.0}]}}]},
                 {"choices": [{"finish_reason": "stop", "logprobs": {"tokens": ["7"], "token_logprobs": [-1.0]}}]}):
        with pytest.raises(Exception) as expected:
            theirs.parse_generation_response(body)
        with pytest.raises(type(expected.value)):
            ours.parse_generation_response(body)


@pytest.mark.parametrize("defect", ["completion one more", "missing logprob", "-9999 logprob", "NaN logprob",
                                    "output_ids one more"])
def test_sglang_defects_refused(backends, defect):
    ours, theirs = backends["sglang"]
    if defect == "completion one more":
        body = sglang(completion=7)
    elif defect == "output_ids one more":
        body = sglang()
        body["output_ids"].append(9)
    else:
        values: list[Any] = [-0.5] * 6
        values[3] = {"missing logprob": None, "-9999 logprob": SENTINEL, "NaN logprob": math.nan}[defect]
        body = sglang(values=values)
    theirs.parse_generation_response(body)
    with pytest.raises(compat.AReaLResponseError):
        ours.parse_generation_response(body)


def test_sglang_routing_one_row_short(backends, monkeypatch):
    ours, theirs = backends["sglang"]
    # 6 + 4 - 1 = 9 rows of 8 values; 8 rows do not divide into 9: AReaL's reshape raises too
    body = sglang(rows=8)
    with pytest.raises(ValueError):
        theirs.parse_generation_response(body)
    with pytest.raises(compat.AReaLResponseError, match="do not divide into 9 rows"):
        ours.parse_generation_response(body)
    # 3 + 2 - 1 = 4 rows; 3 rows of 8 are 24 values = 4 rows of 6: AReaL passes a wrong shape
    body = sglang(3, 2, rows=3)
    assert theirs.parse_generation_response(body).routed_experts.shape == (4, 6)
    assert ours.parse_generation_response(body).routed_experts.shape == (4, 6)
    monkeypatch.setattr(compat, "routing_width", 8)
    with pytest.raises(compat.AReaLResponseError, match="3 rows of 8, not 4"):
        ours.parse_generation_response(body)
    assert ours.parse_generation_response(sglang(3, 2, rows=4)).routed_experts.shape == (4, 8)


def test_sglang_routing_not_canonical_or_negative(backends):
    ours, _ = backends["sglang"]
    body = sglang(rows=9)
    body["meta_info"]["routed_experts"] = body["meta_info"]["routed_experts"][:-4] + "@@@@"
    with pytest.raises(compat.AReaLResponseError, match="canonical"):
        ours.parse_generation_response(body)
    body = sglang(rows=9)
    flat = [1] * 72
    flat[8 * 5 + 2] = -1
    body["meta_info"]["routed_experts"] = base64.b64encode(struct.pack("<72i", *flat)).decode()
    with pytest.raises(compat.AReaLResponseError, match="negative") as caught:
        ours.parse_generation_response(body)
    assert caught.value.token == 5


def test_patch_refuses_without_areal(monkeypatch):
    monkeypatch.setattr(compat, "areal_version", lambda: None)
    with pytest.raises(RuntimeError, match="follows AReaL 1.0.4, not None"):
        compat.patch()
    assert not compat.is_patched()


def test_plugin_loads_beside_the_nemo_gym_one():
    import importlib

    areal_plugin = importlib.import_module("tokenwire.compat.areal_plugin")
    nemo_plugin = importlib.import_module("tokenwire.compat.nemo_gym_plugin")
    assert areal_plugin.OPTION == "--tokenwire-no-areal-patch"
    assert nemo_plugin.OPTION == "--tokenwire-no-nemo-gym-patch"


ENDPOINTS = {"vllm chat": "/v1/chat/completions", "vllm": "/v1/completions", "sglang": "/generate"}


def _bytes_path(backends: Any, kind: str, body: dict[str, Any], raw: bytes | None = None) -> tuple[Any, Any, bool]:
    """The patched parse of ``body``'s bytes as agenerate's session reads them (json() from the
    bytes), AReaL's stand-in's parse of ``json.loads``, and whether the bytes were read by the reader."""
    raw = json.dumps(body).encode() if raw is None else raw
    ours, theirs = backends["sglang" if kind == "sglang" else "vllm"]
    document = compat._read_document(raw, ENDPOINTS[kind])
    try:
        patched = ours.parse_generation_response(document if document is not None else json.loads(raw))
    except compat.AReaLResponseError as exc:
        patched = exc
    return patched, theirs.parse_generation_response(json.loads(raw)), document is not None


@pytest.mark.parametrize("kind", list(ENDPOINTS))
@pytest.mark.parametrize("n", [1, 6, 300])
def test_bytes_path_reads_as_areal_reads(backends, kind, n):
    body = sglang(n) if kind == "sglang" else vllm(n, chat=kind == "vllm chat")
    patched, unpatched, read = _bytes_path(backends, kind, body)
    assert read, "a plain valid body is read from its bytes"
    same(patched, unpatched)
    assert compat._read_body.get() is None  # taken by the parse


@pytest.mark.parametrize("case", ["text names", "top names", "routing", "abort", "two choices", "a defect",
                                  "NaN"])
def test_bytes_path_left_to_json_loads(backends, case):
    """Bodies AReaL reads otherwise than the reader (or that the drop-in refuses) are
    json.loads's dict and the drop-in's checks: the same outcome as before."""
    kind, raw = "vllm chat", None
    if case == "text names":
        body = vllm(6, chat=False, names="token:")
        kind = "vllm"
    elif case == "top names":
        body = vllm(6)
        body["choices"][0]["logprobs"]["content"][0]["top_logprobs"] = [{"token": "token_id:1000", "logprob": -0.125}]
    elif case == "routing":
        body, kind = sglang(6, 4, rows=9), "sglang"
    elif case == "abort":
        body = vllm(0, finish="abort")
    elif case == "two choices":
        body = vllm(6)
        body["choices"].append(dict(body["choices"][0], index=1))
        body["usage"] = None
    elif case == "a defect":
        body = vllm(6, extra=1)
    else:
        body = vllm(6)
        raw = json.dumps(body).encode().replace(b"-0.25", b"NaN", 1)
    patched, _, read = _bytes_path(backends, kind, body, raw)
    assert not read
    expected = backends["sglang" if kind == "sglang" else "vllm"][0]
    try:
        again = expected.parse_generation_response(json.loads(raw or json.dumps(body).encode()))
    except compat.AReaLResponseError as exc:
        again = exc
    if isinstance(again, Exception):
        assert type(patched) is type(again) and str(patched) == str(again)
    else:
        same(patched, again)


def test_body_session_reads_generation_responses_only():
    class Response:
        def __init__(self, raw: bytes) -> None:
            self.raw, self.content_type = raw, "application/json"

        async def read(self) -> bytes:
            return self.raw

        async def json(self, **_: Any) -> Any:
            return json.loads(self.raw)

    class Request:
        def __init__(self, raw: bytes) -> None:
            self.response = Response(raw)

        async def __aenter__(self) -> Response:
            return self.response

        async def __aexit__(self, *exc: Any) -> None:
            return None

    class Session:
        raw = json.dumps(vllm(6)).encode()

        def post(self, url: str, **_: Any) -> Request:
            return Request(self.raw)

    async def fetch(endpoint: str, session: Any) -> Any:  # arequest_with_retry's reading, in short
        async with session.post("http://127.0.0.1:1" + endpoint, json={}) as response:
            assert response.content_type == "application/json"
            return await response.json()

    async def theirs(addr: str, endpoint: str, payload: Any = None, session: Any = None, method: str = "POST") -> Any:
        return await fetch(endpoint, session)

    wrapped = compat._reading_bytes(theirs)
    assert wrapped.__wrapped__ is theirs
    got = asyncio.run(wrapped(addr="a", endpoint="/v1/chat/completions", payload={}, session=Session()))
    assert compat._read_body.get() is None  # (the context of that run)
    assert set(got) == {"choices"} and got["choices"][0]["finish_reason"] == "stop"
    plain = asyncio.run(wrapped("a", "/health", None, Session()))
    assert plain == json.loads(Session.raw)  # another endpoint: json.loads's dict
