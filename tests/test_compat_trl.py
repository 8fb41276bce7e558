"""tokenwire.compat.trl: TRL 1.16.0's real VLLMClient.generate and chat (requests.Session,
vLLM's OpenAI-compatible bodies) against a local server, unpatched and patched: the same result
on valid responses, a refusal for each planted defect.

TRL (and torch) are not tokenwire dependencies: these tests run where TRL is installed
(``python tests/run_compat_suite.py trl`` runs them in the venv that has it), and skip
elsewhere. Where the installed TRL is another release (1.9.0, whose client speaks to TRL's own
``/generate/`` server), only the refusal to patch it runs."""

from __future__ import annotations

import contextlib
import json
import math
import random
from typing import Any

import pytest

from tokenwire import MalformedResponseError

from .compat_http import local_server

pytest.importorskip("trl.generation.vllm_client", reason="TRL (with torch) is not installed")

from trl.generation import vllm_client  # noqa: E402

from tokenwire.compat import trl as compat  # noqa: E402

MODEL = "test-model"
FOLLOWED = pytest.mark.skipif(compat.trl_version() not in compat.SUPPORTED_VERSIONS,
                              reason=f"TRL {compat.trl_version()} is not a release the drop-in follows")


def client(url: str) -> Any:
    """TRL's VLLMClient on ``url`` (its constructor asks vLLM to be installed; the client's
    generation path never uses it)."""
    saved = vllm_client.is_vllm_available
    vllm_client.is_vllm_available = lambda *a, **k: True
    try:
        return vllm_client.VLLMClient(base_url=url)
    finally:
        vllm_client.is_vllm_available = saved


def _token(i: int) -> str:
    return f"token_id:{i}"


def completions_body(prompts: list[list[int]], n: int, lengths: list[int], seed: int, top: int = 0) -> dict[str, Any]:
    """vLLM's /v1/completions body for TRL's request (return_token_ids,
    return_tokens_as_token_ids, logprobs=top): prompt-major choices."""
    rng = random.Random(seed)
    choices = []
    for index, length in enumerate(lengths):
        ids = [rng.randrange(3, 150_000) for _ in range(length)]
        lps = [-rng.random() * 6 for _ in ids]
        tops = []
        for i, lp in zip(ids, lps):
            head = {_token(i): lp}  # vLLM puts the sampled token first, then the top-N
            for _ in range(top):
                head.setdefault(_token(rng.randrange(3, 150_000)), -rng.random() * 8)
            tops.append(head)
        choices.append({
            "index": index, "text": "x" * length, "prompt_token_ids": prompts[index // n], "token_ids": ids,
            "logprobs": {"text_offset": list(range(length)), "token_logprobs": lps,
                         "tokens": [_token(i) for i in ids], "top_logprobs": tops},
            "finish_reason": "length", "stop_reason": None,
        })
    total = sum(lengths)
    return {"id": f"cmpl-{seed}", "object": "text_completion", "created": 0, "model": MODEL, "choices": choices,
            "usage": {"prompt_tokens": sum(map(len, prompts)), "completion_tokens": total,
                      "total_tokens": total + sum(map(len, prompts))}}


def chat_body(prompt: list[int], n: int, length: int, seed: int, top: int = 0) -> dict[str, Any]:
    """vLLM's /v1/chat/completions body for TRL's request (logprobs, top_logprobs=top)."""
    rng = random.Random(seed)
    choices = []
    for index in range(n):
        ids = [rng.randrange(3, 150_000) for _ in range(length)]
        content = []
        for i in ids:
            lp = -rng.random() * 6
            heads = [{"token": _token(i), "logprob": lp, "bytes": None}] if top else []
            while len(heads) < top:
                heads.append({"token": _token(rng.randrange(3, 150_000)), "logprob": -rng.random() * 8, "bytes": None})
            content.append({"token": _token(i), "logprob": lp, "bytes": None, "top_logprobs": heads})
        choices.append({"index": index, "message": {"role": "assistant", "content": "x"},
                        "logprobs": {"content": content}, "finish_reason": "length", "token_ids": ids})
    return {"id": f"chat-{seed}", "object": "chat.completion", "created": 0, "model": MODEL, "choices": choices,
            "prompt_token_ids": prompt,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": n * length, "total_tokens": len(prompt) + n * length}}


def encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def run(url: str, call: str, **kwargs: Any) -> tuple[str, Any]:
    try:
        c = client(url)
        return "ok", getattr(c, call)(**kwargs)
    except Exception as exc:  # noqa: BLE001 - the outcome is the point
        return "raised", exc


@pytest.fixture
def server():
    with local_server(MODEL) as s:
        yield s


def _same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down (ints stay ints, floats floats)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(_same, a, b))
    return a == b


CASES = [  # (prompts, n, lengths per choice, logprobs)
    ([[1, 2, 3]], 1, [1], 0),
    ([[1, 2, 3], [4, 5]], 2, [16, 3, 200, 1], 0),
    ([[7] * 40], 1, [2048], 0),
    ([[1, 2], [3]], 1, [30, 12], 3),
    ([[1, 2]], 2, [50, 40], None),
]


@FOLLOWED
@pytest.mark.parametrize("prompts,n,lengths,top", CASES)
def test_generate_gives_the_same_result(server, prompts, n, lengths, top):
    document = completions_body(prompts, n, lengths, seed=len(lengths) * 7 + n, top=top or 0)
    if top is None:
        for choice in document["choices"]:
            choice["logprobs"] = None
    raw = encode(document)
    server.serve(raw, raw)
    kwargs = {"prompts": prompts, "n": n, "logprobs": top}
    unpatched = run(server.url, "generate", **kwargs)
    with compat.patched():
        patched = run(server.url, "generate", **kwargs)
    assert unpatched[0] == "ok", unpatched
    assert patched[0] == "ok", patched
    assert _same(patched[1], unpatched[1])


@FOLLOWED
@pytest.mark.parametrize("n,length,top", [(1, 1, 0), (2, 300, 0), (1, 64, 4), (3, 20, None)])
def test_chat_gives_the_same_result(server, n, length, top):
    conversations = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "bye"}]]
    bodies = []
    for k in range(len(conversations)):
        document = chat_body([1, 2, 3 + k], n, length, seed=k * 13 + length, top=top or 0)
        if top is None:
            for choice in document["choices"]:
                choice["logprobs"] = None
        bodies.append(encode(document))
    kwargs = {"messages": conversations, "n": n, "logprobs": top, "max_concurrent_requests": 1}
    server.serve(*bodies)
    unpatched = run(server.url, "chat", **kwargs)
    server.serve(*bodies)
    with compat.patched():
        patched = run(server.url, "chat", **kwargs)
    assert unpatched[0] == "ok", unpatched
    assert patched[0] == "ok", patched
    assert _same(patched[1], unpatched[1])


# --- the planted defects -----------------------------------------------------------------------


def _completion_defect(name: str) -> bytes:
    document = completions_body([[1, 2, 3]], 1, [64], seed=5)
    logprobs = document["choices"][0]["logprobs"]
    if name == "N ids, N+1 logprobs":
        logprobs["tokens"].append(_token(9))
        logprobs["token_logprobs"].append(-0.5)
        logprobs["top_logprobs"].append({_token(9): -0.5})
        logprobs["text_offset"].append(64)
    elif name == "-9999":
        logprobs["token_logprobs"][7] = -9999.0
        logprobs["top_logprobs"][7] = {logprobs["tokens"][7]: -9999.0}
    elif name == "NaN":
        logprobs["token_logprobs"][7] = math.nan
        logprobs["top_logprobs"][7] = {logprobs["tokens"][7]: math.nan}
    elif name in ("NaN sent as null", "a missing logprob"):
        logprobs["token_logprobs"][7] = None
        logprobs["top_logprobs"][7] = None if name == "a missing logprob" else {logprobs["tokens"][7]: None}
    return encode(document)


def _chat_defect(name: str) -> bytes:
    document = chat_body([1, 2, 3], 1, 64, seed=6)
    content = document["choices"][0]["logprobs"]["content"]
    if name == "N ids, N+1 logprobs":
        content.append({"token": _token(9), "logprob": -0.5, "bytes": None, "top_logprobs": []})
    elif name == "-9999":
        content[7]["logprob"] = -9999.0
    elif name == "NaN":
        content[7]["logprob"] = math.nan
    elif name == "NaN sent as null":
        content[7]["logprob"] = None
    elif name == "a missing logprob":
        del content[7]["logprob"]
    return encode(document)


DEFECTS = ["N ids, N+1 logprobs", "a missing logprob", "-9999", "NaN", "NaN sent as null"]


def outcome(url: str, call: str, raw: bytes, server: Any) -> tuple[str, Any]:
    server.serve(raw)
    if call == "generate":
        return run(url, "generate", prompts=[[1, 2, 3]], n=1, logprobs=0)
    return run(url, "chat", messages=[[{"role": "user", "content": "hi"}]], n=1, logprobs=0)


@FOLLOWED
@pytest.mark.parametrize("call", ["generate", "chat"])
@pytest.mark.parametrize("defect", DEFECTS)
def test_each_defect_is_refused_patched(server, call, defect):
    raw = (_completion_defect if call == "generate" else _chat_defect)(defect)
    with compat.patched():
        kind, exc = outcome(server.url, call, raw, server)
    assert kind == "raised", f"{call}, {defect}: accepted patched"
    assert isinstance(exc, MalformedResponseError), repr(exc)


def defect_table(patched: bool) -> list[tuple[str, str, str]]:
    """What TRL did with each planted defect, unpatched or patched (the docs' table)."""
    rows = []
    with local_server(MODEL) as s, (compat.patched() if patched else contextlib.nullcontext()):
        for call in ("generate", "chat"):
            for defect in DEFECTS:
                raw = (_completion_defect if call == "generate" else _chat_defect)(defect)
                kind, value = outcome(s.url, call, raw, s)
                if kind == "raised":
                    text = f"raised {type(value).__name__}: {value}"
                else:
                    lp = value["logprobs"][0]
                    text = (f"accepted: {len(value['completion_ids'][0])} ids, {len(lp)} logprob rows, "
                            f"row 7 {lp[7] if len(lp) > 7 else None}")
                rows.append((call, defect, text))
    return rows


@FOLLOWED
def test_patch_and_unpatch_restore():
    post, parse = vllm_client.VLLMClient.__dict__["_post"], vllm_client.parse_logprobs
    with compat.patched() as module:
        assert module is vllm_client and compat.is_patched()
        with compat.patched():
            assert compat.is_patched()
        assert compat.is_patched()
    assert vllm_client.VLLMClient.__dict__["_post"] is post and vllm_client.parse_logprobs is parse
    assert not compat.is_patched()
    compat.unpatch()


@FOLLOWED
def test_other_requests_keep_trls_path(server):
    """get_sequence_logprobs (prompt logprobs, no return_tokens_as_token_ids) is TRL's own."""
    document = {"choices": [{"index": 0, "text": "", "prompt_logprobs": [None, {"5": {"logprob": -0.5, "rank": 1}}]}]}
    raw = encode(document)
    server.serve(raw, raw)
    unpatched = run(server.url, "get_sequence_logprobs", sequences=[[4, 5]], prompt_lengths=[1], top_logprobs=1)
    with compat.patched():
        patched = run(server.url, "get_sequence_logprobs", sequences=[[4, 5]], prompt_lengths=[1], top_logprobs=1)
    assert unpatched[0] == "ok" and _same(patched[1], unpatched[1])


def test_a_release_not_followed_is_refused(monkeypatch):
    """Another TRL release (the installed one, or 1.9.0 said to be installed): RuntimeError
    naming the followed release, and TRL's module left as it was."""
    if compat.trl_version() in compat.SUPPORTED_VERSIONS:
        monkeypatch.setattr(compat, "trl_version", lambda: "1.9.0")
    before = dict(vars(vllm_client)), dict(vllm_client.VLLMClient.__dict__)
    with pytest.raises(RuntimeError, match=r"does not support TRL .*it follows TRL 1\.16\.0"):
        compat.patch()
    assert not compat.is_patched()
    assert (dict(vars(vllm_client)), dict(vllm_client.VLLMClient.__dict__)) == before


if __name__ == "__main__":
    for label, patched in (("unpatched", False), ("patched", True)):
        for call, defect, text in defect_table(patched):
            print(f"{label} | {call} | {defect} | {text[:160]}")
