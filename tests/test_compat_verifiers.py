"""tokenwire.compat.verifiers: verifiers 0.4.0's real TrainClient.get_response (renderers'
generate() over AsyncOpenAI, then response_from_generate) against a local server, unpatched and
patched: the same Response on valid responses, a refusal for each planted defect.

verifiers is not a tokenwire dependency: these tests run where it is installed
(``python tests/run_compat_suite.py verifiers`` installs nothing; it runs them in the venv that
has verifiers), and skip elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
import base64
import json
import math
import random
from typing import Any

import numpy as np
import pytest

from tokenwire import MalformedResponseError

from .compat_http import local_server

verifiers = pytest.importorskip("verifiers", reason="verifiers is not installed")
pytest.importorskip("verifiers.v1.clients.train", reason="not verifiers 0.4's layout")

from renderers import MalformedGenerateResponseError  # noqa: E402
from renderers.base import ParsedResponse, RenderedTokens  # noqa: E402
from verifiers.v1.clients import train  # noqa: E402
from verifiers.v1.configs.client import TrainClientConfig  # noqa: E402
from verifiers.v1.dialects.chat import ChatDialect  # noqa: E402
from verifiers.v1.types import SamplingConfig  # noqa: E402

from tokenwire.compat import verifiers as compat  # noqa: E402

MODEL = "test-model"
PROMPT = [11, 12, 13, 14]


class FakeRenderer:
    """What generate() and get_response ask of a renderer, without a tokenizer."""

    supports_tools = True

    def render(self, messages: Any, *, tools: Any = None, add_generation_prompt: bool = False, **_: Any) -> RenderedTokens:
        return RenderedTokens(token_ids=list(PROMPT), message_indices=[0] * len(PROMPT),
                              sampled_mask=[False] * len(PROMPT), is_content=[True] * len(PROMPT),
                              message_roles=["user"])

    def get_stop_token_ids(self) -> list[int]:
        return [2]

    def parse_response(self, completion_ids: list[int], *, tools: Any = None, prompt_ids: Any = None) -> ParsedResponse:
        return ParsedResponse(content=f"{len(completion_ids)} tokens", reasoning_content=None, tool_calls=[])


def body(n: int, seed: int = 0, *, mask: bool = True, routing: bool = True, layers: int = 2, topk: int = 2,
         start: int = 0) -> dict[str, Any]:
    """A /inference/v1/generate response of ``n`` tokens as vLLM writes it (native records)."""
    rng = random.Random(seed)
    ids = [rng.randrange(3, 150_000) for _ in range(n)]
    choice: dict[str, Any] = {
        "index": 0,
        "token_ids": ids,
        "logprobs": {"content": [{"token": f"token_id:{i}", "logprob": -rng.random() * 5} for i in ids]},
        "finish_reason": "length",
    }
    if mask:
        choice["sampling_mask"] = [sorted({i, rng.randrange(3, 150_000)}) for i in ids]
    if routing:
        rows = len(PROMPT) + n - 1 - start
        routed = np.frombuffer(rng.randbytes(rows * layers * topk), np.uint8).reshape(rows, layers, topk) % 64
        choice["routed_experts"] = {"data": base64.b64encode(routed.tobytes()).decode(),
                                    "shape": [rows, layers, topk], "start": start}
    return {"request_id": f"gen-{seed}", "choices": [choice]}


def encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


# The planted defects: (name, edit of a valid document, raw text edit or None).
def _n_plus_one(d: dict[str, Any]) -> None:
    d["choices"][0]["logprobs"]["content"].append({"token": "token_id:5", "logprob": -0.5})


def _missing(d: dict[str, Any]) -> None:
    del d["choices"][0]["logprobs"]["content"][7]["logprob"]


def _none(d: dict[str, Any]) -> None:
    d["choices"][0]["logprobs"]["content"][7]["logprob"] = None


def _sentinel(d: dict[str, Any]) -> None:
    d["choices"][0]["logprobs"]["content"][7]["logprob"] = -9999.0


def _nan(d: dict[str, Any]) -> None:
    d["choices"][0]["logprobs"]["content"][7]["logprob"] = math.nan  # json.dumps writes NaN


def _mask_without_sampled(d: dict[str, Any]) -> None:
    choice = d["choices"][0]
    sampled = choice["token_ids"][7]
    choice["sampling_mask"][7] = [i for i in choice["sampling_mask"][7] if i != sampled] or [sampled + 1]


def _routing_row_short(d: dict[str, Any]) -> None:
    routed = d["choices"][0]["routed_experts"]
    rows, layers, topk = routed["shape"]
    routed["data"] = base64.b64encode(base64.b64decode(routed["data"])[: (rows - 1) * layers * topk]).decode()
    routed["shape"] = [rows - 1, layers, topk]


DEFECTS = {
    "N ids, N+1 logprobs": _n_plus_one,
    "a missing logprob": _missing,
    "a null logprob": _none,
    "-9999": _sentinel,
    "NaN": _nan,
    "a mask row without its sampled id": _mask_without_sampled,
    "routing one row short": _routing_row_short,
}


def get_response(url: str) -> Any:
    """One TrainClient.get_response against ``url`` (verifiers' own code all the way)."""

    async def run() -> Any:
        client = train.TrainClient(TrainClientConfig(base_url=url + "/v1"))
        train.ElasticRendererPool._renderers[(MODEL, None, None)] = [train.RendererSlot(FakeRenderer())]
        try:
            return await client.get_response(ChatDialect(), {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                                             SamplingConfig(max_tokens=64))
        finally:
            await client.close()

    return asyncio.run(run())


def outcome(url: str) -> tuple[str, Any]:
    """("ok", the Response's comparable parts) or ("raised", the exception)."""
    try:
        response = get_response(url)
    except Exception as exc:  # noqa: BLE001 - the outcome is the point
        return "raised", exc
    return "ok", summary(response)


def summary(response: Any) -> dict[str, Any]:
    tokens = response.tokens
    mask = tokens.sampling_mask
    routed = tokens.routed_experts
    return {
        "response": response.model_dump(),
        "completion_ids": tokens.completion_ids,
        "completion_logprobs": list(tokens.completion_logprobs),
        "logprob_types": {type(x).__name__ for x in tokens.completion_logprobs},
        "mask": None if mask is None else (mask.ids.tolist(), mask.counts.tolist(), str(mask.ids.dtype)),
        "routed": None if routed is None else (bytes(routed["data"]), routed["shape"], routed.get("start"),
                                               type(routed["data"]).__name__),
    }


@pytest.fixture
def server():
    with local_server(MODEL) as s:
        yield s


@pytest.mark.parametrize("n,seed", [(1, 1), (16, 2), (300, 3), (2048, 4)])
@pytest.mark.parametrize("mask,routing", [(False, False), (True, True), (True, False)])
def test_valid_responses_give_the_same_response(server, n, seed, mask, routing):
    raw = encode(body(n, seed, mask=mask, routing=routing))
    server.serve(raw, raw)
    unpatched = outcome(server.url)
    with compat.patched():
        assert train.response_from_generate is compat.response_from_generate
        patched = outcome(server.url)
    assert unpatched[0] == "ok", unpatched
    assert patched == unpatched


def _edit(name: str, d: dict[str, Any]) -> None:
    choice = d["choices"][0]
    if name == "prompt ids":
        d["prompt_token_ids"] = list(PROMPT)
    elif name == "unsorted mask rows":
        choice["sampling_mask"] = [list(reversed(row)) for row in choice["sampling_mask"]]
    elif name == "a repeated mask id":
        choice["sampling_mask"][5] = choice["sampling_mask"][5] + choice["sampling_mask"][5][:1]
    elif name == "int token_id agreeing":
        for entry, i in zip(choice["logprobs"]["content"], choice["token_ids"]):
            entry["token_id"] = i
    elif name == "int token_id disagreeing":
        choice["logprobs"]["content"][3]["token_id"] = choice["token_ids"][3] + 1
    elif name == "logprobs.sampled":
        choice["logprobs"]["sampled"] = [e["logprob"] for e in choice["logprobs"]["content"]]
    elif name == "kept_tokens":
        choice["kept_tokens"] = {"ids": "AAAA", "counts": "AAAA"}
    elif name == "routing start":
        d["choices"][0] = body(40, 9, start=2)["choices"][0]
    elif name == "two choices":
        d["choices"].append(dict(choice, index=1))
    elif name == "a leading zero":
        choice["logprobs"]["content"][2]["token"] = "token_id:0" + str(choice["token_ids"][2])
    elif name == "an integer logprob":
        choice["logprobs"]["content"][2]["logprob"] = -3


EDGES = ["prompt ids", "unsorted mask rows", "a repeated mask id", "int token_id agreeing", "int token_id disagreeing",
         "logprobs.sampled", "kept_tokens", "routing start", "two choices", "a leading zero", "an integer logprob"]


@pytest.mark.parametrize("edge", EDGES)
def test_the_core_read_of_generate_agrees_with_renderers_read(server, edge, monkeypatch):
    """Patched, generate()'s document is read by the compiled core from the bytes (no dict per
    record) when the body is one plain choice; whatever the body, the outcome is the one of
    renderers' own read (the patched drop-in's, for the planted defects)."""
    from tokenwire.compat import renderers as compat_renderers

    document = body(40, 8)
    _edit(edge, document)
    raw = encode(document)
    server.serve(raw, raw, raw)
    unpatched = outcome(server.url)
    lean = []
    made = compat_renderers._generate_document
    monkeypatch.setattr(compat_renderers, "_generate_document", lambda raw: lean.append(made(raw)) or lean[-1])
    with compat.patched():
        patched = outcome(server.url)
    with compat.patched(), monkeypatch.context() as m:
        m.setattr(compat_renderers, "_generate_document", lambda raw: None)  # renderers' read, patched
        full = outcome(server.url)
    assert patched[0] == full[0], (patched, full)
    if patched[0] == "ok":
        assert patched == full
        if unpatched[0] == "ok":
            assert patched == unpatched
    else:
        assert type(patched[1]) is type(full[1]) and str(patched[1]) == str(full[1])
    if edge in ("prompt ids", "unsorted mask rows", "int token_id agreeing", "routing start"):
        assert lean and lean[-1] is not None  # read by the core
    if edge in ("kept_tokens", "two choices", "logprobs.sampled"):
        assert lean and lean[-1] is None  # left to renderers' read


@pytest.mark.parametrize("defect", list(DEFECTS))
def test_each_defect_is_refused_patched(server, defect):
    document = body(64, 7)
    DEFECTS[defect](document)
    raw = encode(document)
    server.serve(raw, raw)
    unpatched = outcome(server.url)
    with compat.patched():
        kind, exc = outcome(server.url)
    assert kind == "raised", f"{defect}: accepted patched (unpatched: {unpatched[0]})"
    assert isinstance(exc, MalformedResponseError), repr(exc)
    assert isinstance(exc, MalformedGenerateResponseError)  # renderers' class, which verifiers passes on
    if unpatched[0] == "raised":  # where verifiers (through renderers) refused already: the same class
        assert isinstance(unpatched[1], MalformedGenerateResponseError)


def defect_table(patched: bool) -> dict[str, str]:
    """What verifiers did with each planted defect, unpatched or patched (the docs' table)."""
    with local_server(MODEL) as s, (compat.patched() if patched else contextlib.nullcontext()):
        table = {}
        for defect, plant in DEFECTS.items():
            document = body(64, 7)
            plant(document)
            s.serve(encode(document))
            kind, value = outcome(s.url)
            table[defect] = (f"raised {type(value).__name__}: {value}" if kind == "raised" else "accepted")
        return table


def test_patch_and_unpatch_restore():
    import renderers.client

    theirs = train.response_from_generate
    generate = renderers.client.generate
    with compat.patched() as module:
        assert module is train and compat.is_patched()
        assert renderers.client.generate.__wrapped__ is generate  # run with the core's read of its body
        with compat.patched():
            assert compat.is_patched()
        assert compat.is_patched()
    assert train.response_from_generate is theirs and not compat.is_patched()
    assert renderers.client.generate is generate
    compat.patch()
    compat.patch()
    try:
        assert compat.original() is theirs
    finally:
        compat.unpatch()
    assert train.response_from_generate is theirs
    compat.unpatch()


if __name__ == "__main__":
    for label, patched in (("unpatched", False), ("patched", True)):
        for name, result in defect_table(patched).items():
            print(f"{label} | {name} | {result}")
