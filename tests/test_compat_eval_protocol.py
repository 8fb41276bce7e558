"""tokenwire.compat.eval_protocol: eval-protocol's own ``FireworksV1CompletionsClient`` (its real
code, its real Fireworks SDK client) against a local server on 127.0.0.1 that answers as
Fireworks does, unpatched and patched: the same result on valid responses, a refusal for each
planted defect, eval-protocol's errors kept where it refuses.

Skipped where eval-protocol is not installed (it is too heavy for CI's environment);
``python tests/run_eval_protocol_suite.py`` runs this file in eval-protocol's environment,
beside eval-protocol's own suite.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import pickle
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire import MalformedResponseError
from tokenwire.compat import eval_protocol as compat

from .canned_http import DEFECTS, CannedServer, fireworks_completion

# eval-protocol imports litellm, which would fetch a price list from the network on import.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
client_module = pytest.importorskip(compat.CLIENT_MODULE, reason="eval-protocol is not installed")
fireworks = pytest.importorskip("fireworks")
pytestmark = pytest.mark.skipif(compat._installed_version() not in compat.SUPPORTED_VERSIONS,
                                reason="an eval-protocol release the drop-in does not follow")

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]
Client = client_module.FireworksV1CompletionsClient


@pytest.fixture(scope="module")
def server():
    with CannedServer(limit=5_000) as running:
        yield running


def _decode(token_ids: list[int]) -> str:
    # eval-protocol decodes with a Hugging Face tokenizer; a stand-in that depends on every id.
    return "<|im_start|>" + " ".join(str(i) for i in token_ids[:8]) + f" ({len(token_ids)})<|im_end|>"


def _client(server: CannedServer, **kwargs: Any) -> Any:
    client = Client(model_id="accounts/fireworks/models/qwen3-8b", api_key="test-key",
                    base_url=f"{server.url}/inference/v1", **kwargs)
    client.decode_token_ids = _decode
    return client


async def _outcome(call: Any) -> tuple[str, Any]:
    try:
        return "returned", await call
    except Exception as exc:  # what the call raised is the outcome compared
        return "raised", exc


def _both(server: CannedServer, body: bytes, status: int = 200, **kwargs: Any) -> tuple[tuple, tuple]:
    """eval-protocol's method, then the drop-in's, each on the same response, with one client."""

    async def run() -> tuple[tuple, tuple]:
        client = _client(server, **kwargs)
        try:
            server.push(body, status)
            theirs = await _outcome(compat.original()(client, prompt_token_ids=PROMPT))
            server.push(body, status)
            ours = await _outcome(compat.create_completion_from_prompt_ids(client, prompt_token_ids=PROMPT))
        finally:
            await client.close()
        return theirs, ours

    return asyncio.run(run())


def _python_values(value: Any) -> bool:
    """Lists of plain ints and floats, dicts of them: what eval-protocol returns."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _python_values(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_python_values(v) for v in value)
    return value is None or type(value) in (int, float, str, bool)


def _same_result(theirs: tuple, ours: tuple) -> None:
    assert theirs[0] == "returned", theirs[1]
    assert ours[0] == "returned", ours[1]
    assert ours[1] == theirs[1]
    assert _python_values(ours[1])
    assert [type(x) for x in ours[1]["completion_ids"]] == [type(x) for x in theirs[1]["completion_ids"]]


# --- valid responses: eval-protocol's result -----------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 7, 300, 2048])
@pytest.mark.parametrize("shape", ["plain", "prompt_ids", "token_ids", "raw_output", "no_usage"])
def test_valid_responses_give_eval_protocols_result(server, n, shape):
    body = fireworks_completion(n, seed=n, prompt_ids=shape == "prompt_ids", token_ids=shape == "token_ids",
                                raw_output=shape == "raw_output", usage=shape != "no_usage")
    # (Fireworks always sends usage; without it the SDK's model gives usage None and
    # eval-protocol counts the tokens itself: both do the same.)
    theirs, ours = _both(server, body)
    _same_result(theirs, ours)
    assert ours[1]["completion_ids"] == [e["token_id"] for e in json.loads(body)["choices"][0]["logprobs"]["content"]]
    # The same request went out both times.
    assert server.requests[-1][1] == server.requests[-2][1]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 400), seed=st.integers(0, 10**6), prompt_ids=st.booleans(), token_ids=st.booleans(),
       raw_output=st.booleans(), logprobs=st.booleans(), parser=st.booleans())
def test_valid_responses_match_for_any_shape(server, n, seed, prompt_ids, token_ids, raw_output, logprobs, parser):
    def tool_parser(text: str, ids: list[int], tools: Any) -> dict[str, Any]:
        call = client_module.ParsedToolCall(tool_call_id=f"call_{len(ids)}", name="move", arguments={"n": ids[-1]})
        return {"parsed_tool_call": call, "assistant_content": text[:5], "parser": "probe"}

    body = fireworks_completion(n, seed, prompt_ids=prompt_ids, token_ids=token_ids, raw_output=raw_output)
    theirs, ours = _both(server, body, logprobs=logprobs, tool_call_parser=tool_parser if parser else None,
                         request_params={"top_p": 0.9})
    _same_result(theirs, ours)


# --- the planted defects ---------------------------------------------------------------------------

# What eval-protocol 0.3.33 does with each defect (docs/migrating-from-eval-protocol.md): returns
# the misaligned result, or raises (its type).
THEIRS = {
    "n_plus_1": "returned",  # n + 1 ids and logprobs; usage says n
    "ids_short": "returned",  # choices[0].token_ids one short of content[]: not read
    "missing_sampling_logprob": RuntimeError,
    "null_logprob": RuntimeError,
    "sentinel": "returned",  # -9999.0 among the logprobs
    "nan": "returned",  # nan among the logprobs
    "positive": "returned",  # a logprob of 0.25
    "no_token_id": RuntimeError,
    "no_content": RuntimeError,  # token_logprobs and token_ids: eval-protocol refuses the shape
}


def test_the_defect_table_covers_every_defect():
    assert set(THEIRS) == set(DEFECTS)


@pytest.mark.parametrize("defect", DEFECTS)
def test_each_planted_defect_is_refused(server, defect):
    theirs, ours = _both(server, fireworks_completion(64, seed=3, defect=defect, token_ids=defect == "ids_short"))
    expected = THEIRS[defect]
    if expected == "returned":
        assert theirs[0] == "returned", theirs[1]
    else:
        assert theirs[0] == "raised" and isinstance(theirs[1], expected), theirs
    assert ours[0] == "raised", ours[1]
    error = ours[1]
    assert isinstance(error, compat.MalformedFireworksResponseError)
    assert isinstance(error, MalformedResponseError) and isinstance(error, RuntimeError)
    assert error.field  # where: choices[0]..., or the top-level usage it disagrees with
    if theirs[0] == "raised":
        # eval-protocol's own refusal: its type and its message.
        assert isinstance(error, type(theirs[1]))
        assert str(error) == str(theirs[1])


def test_the_refusals_name_the_fault(server):
    reasons = {}
    for defect in ("n_plus_1", "ids_short", "sentinel", "nan", "positive"):
        _, ours = _both(server, fireworks_completion(64, seed=5, defect=defect))
        reasons[defect] = str(ours[1])
    assert "usage.completion_tokens is 64 but the completion has 65 token ids" in reasons["n_plus_1"]
    assert "completion has 63 token ids but 64 logprobs (+1)" in reasons["ids_short"]
    assert "-9999" in reasons["sentinel"]
    assert "NaN" in reasons["nan"] or "JSON" in reasons["nan"]
    assert "positive" in reasons["positive"]


def test_unpatched_returns_the_misaligned_results(server):
    # The evidence behind the table: what eval-protocol hands a trainer.
    theirs, _ = _both(server, fireworks_completion(2048, seed=1, defect="n_plus_1"))
    result = theirs[1]
    assert len(result["completion_ids"]) == len(result["completion_logprobs"]) == 2049
    assert result["usage"]["completion_tokens"] == 2048
    theirs, _ = _both(server, fireworks_completion(16, seed=1, defect="sentinel"))
    assert -9999.0 in theirs[1]["completion_logprobs"]
    theirs, _ = _both(server, fireworks_completion(16, seed=1, defect="nan"))
    assert any(math.isnan(x) for x in theirs[1]["completion_logprobs"])


# --- the SDK's errors and retries ------------------------------------------------------------------


def test_sdk_errors_pass_through(server):
    theirs, ours = _both(server, b'{"error": {"message": "bad request", "code": "invalid"}}', status=400)
    assert theirs[0] == ours[0] == "raised"
    assert type(ours[1]) is type(theirs[1]) is fireworks.BadRequestError
    assert ours[1].status_code == 400


def test_sdk_retries_are_kept(server):
    body = fireworks_completion(32, seed=9)

    async def run() -> tuple[Any, Any, int]:
        client = _client(server)
        try:
            before = len(server.requests)
            server.push(b'{"error": "overloaded"}', 500)
            server.push(body)
            ours = await compat.create_completion_from_prompt_ids(client, prompt_token_ids=PROMPT)
            retried = len(server.requests) - before
            server.push(body)
            theirs = await compat.original()(client, prompt_token_ids=PROMPT)
        finally:
            await client.close()
        return ours, theirs, retried

    ours, theirs, retried = asyncio.run(run())
    assert retried == 2  # the SDK retried the 500 itself
    assert ours == theirs


# --- a client object of its own (eval-protocol's tests put one in _client) --------------------------


class _Dumped:
    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload

    def model_dump(self) -> dict[str, Any]:
        return self.payload


class _OwnClient:
    def __init__(self, payload: dict[str, Any]) -> None:
        async def create(**kwargs: Any) -> _Dumped:
            return _Dumped(json.loads(json.dumps(payload)))

        self.completions = type("Completions", (), {"create": staticmethod(create)})()

    async def close(self) -> None:
        return None


@pytest.mark.parametrize("defect", [None, *DEFECTS])
def test_a_client_object_without_raw_responses(server, defect):
    payload = json.loads(fireworks_completion(40, seed=11, defect=defect, token_ids=defect == "ids_short"))

    async def run() -> tuple[tuple, tuple]:
        client = _client(server)
        await client.close()
        client._client = _OwnClient(payload)
        theirs = await _outcome(compat.original()(client, prompt_token_ids=PROMPT))
        ours = await _outcome(compat.create_completion_from_prompt_ids(client, prompt_token_ids=PROMPT))
        return theirs, ours

    theirs, ours = asyncio.run(run())
    if defect is None:
        _same_result(theirs, ours)
        return
    assert ours[0] == "raised" and isinstance(ours[1], compat.MalformedFireworksResponseError), ours
    if theirs[0] == "raised":
        assert isinstance(ours[1], type(theirs[1])) and str(ours[1]) == str(theirs[1])


# --- the error -----------------------------------------------------------------------------------


def test_error_is_every_type_eval_protocol_raises():
    error = compat.MalformedFireworksResponseError
    assert issubclass(error, MalformedResponseError)
    assert issubclass(error, ValueError) and issubclass(error, RuntimeError)
    exc = error.theirs("eval-protocol's text", None, choice=0, field="logprobs.content", token=3)
    assert str(exc) == "eval-protocol's text"
    assert exc.location == "choices[0].logprobs.content[3]"
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is error and again.token == 3


def test_no_choices_is_their_value_error(server):
    theirs, ours = _both(server, b'{"id":"x","object":"text_completion","created":1,"model":"m","choices":[],'
                                 b'"usage":{"prompt_tokens":1,"completion_tokens":0,"total_tokens":1}}')
    assert theirs[0] == ours[0] == "raised"
    assert type(theirs[1]) is ValueError
    assert isinstance(ours[1], ValueError) and str(ours[1]) == str(theirs[1])


# --- the patch -----------------------------------------------------------------------------------


def test_patch_replaces_and_unpatch_restores():
    theirs = Client.__dict__["create_completion_from_prompt_ids"]
    assert not compat.is_patched()
    compat.patch()
    try:
        assert compat.is_patched()
        assert Client.create_completion_from_prompt_ids is compat.create_completion_from_prompt_ids
        from eval_protocol.integrations import FireworksV1CompletionsClient as exported

        assert exported.create_completion_from_prompt_ids is compat.create_completion_from_prompt_ids
        compat.patch()  # idempotent
        assert compat.original() is theirs
    finally:
        compat.unpatch()
    assert Client.__dict__["create_completion_from_prompt_ids"] is theirs
    compat.unpatch()  # harmless
    assert not compat.is_patched()


def test_patched_context_manager_nests_and_leaves_an_outer_patch():
    theirs = Client.__dict__["create_completion_from_prompt_ids"]
    with compat.patched() as cls:
        assert cls is Client and compat.is_patched()
        with compat.patched():
            assert compat.is_patched()
        assert compat.is_patched()
    assert Client.__dict__["create_completion_from_prompt_ids"] is theirs
    compat.patch()
    try:
        with compat.patched():
            pass
        assert compat.is_patched()  # the block did not apply it, so it does not remove it
    finally:
        compat.unpatch()
    with pytest.raises(KeyError), compat.patched():
        raise KeyError("passes through")
    assert not compat.is_patched()


def test_patched_method_runs_through_the_class(server):
    body = fireworks_completion(12, seed=12)

    async def run() -> dict[str, Any]:
        client = _client(server)
        try:
            server.push(body)
            return await client.create_completion_from_prompt_ids(prompt_token_ids=PROMPT)
        finally:
            await client.close()

    before = compat.calls
    with compat.patched():
        result = asyncio.run(run())
    assert compat.calls == before + 1
    assert len(result["completion_ids"]) == 12


def test_an_unknown_release_is_refused(monkeypatch):
    monkeypatch.setattr(compat, "_installed_version", lambda: "0.3.20")
    with pytest.raises(RuntimeError, match="does not support eval-protocol 0.3.20"):
        compat.patch()
    assert not compat.is_patched()


def test_plugin_patches_before_collection(tmp_path):
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(f"""
        from {compat.CLIENT_MODULE} import FireworksV1CompletionsClient
        from tokenwire.compat import eval_protocol as compat

        def test_probe():
            assert FireworksV1CompletionsClient.create_completion_from_prompt_ids is compat.create_completion_from_prompt_ids
    """))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
               "tokenwire.compat.eval_protocol_plugin", str(tmp_path / "test_probe.py")]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stayed patched for the whole session" in done.stdout
