"""tokenwire.compat.nemo_gym without NeMo-Gym installed: the checks its patch adds, over
NeMo-Gym-shaped responses (NeMo-Gym's own suite and its real client against a local server
run in tests/run_nemo_gym_suite.py, in a Python 3.13 venv)."""

from __future__ import annotations

import asyncio
import base64
import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire import MalformedResponseError
from tokenwire.read import _select
orjson = pytest.importorskip("orjson", reason="NeMo-Gym's reader is orjson's (a dependency of NeMo-Gym)")
from tokenwire.compat import nemo_gym as compat

SENTINEL = -9999.0


def envelope(values: list[list[list[int]]], dtype: str = "int16") -> str:
    """NeMo-RL's nrlre1 envelope, written here from its description: little-endian values,
    standard base64."""
    code = {"int8": "b", "int16": "h", "int32": "i"}[dtype]
    flat = [e for row in values for layer in row for e in layer]
    raw = struct.pack(f"<{len(flat)}{code}", *flat)
    shape = f"{len(values)}x{len(values[0])}x{len(values[0][0])}"
    return f"nrlre1:{dtype}:{shape}:{base64.b64encode(raw).decode()}"


def routes(rows: int, layers: int = 2, topk: int = 2) -> list[list[list[int]]]:
    return [[[(r + layer + k) % 8 for k in range(topk)] for layer in range(layers)] for r in range(rows)]


def chat(n: int = 4, prompt: int = 3, *, content: list | None = None, token_ids: list | None = None,
         message: dict | None = None) -> dict:
    ids = list(range(100, 100 + n))
    records = content if content is not None else [
        {"token": f"token_id:{i}", "logprob": -0.25 * (k + 1), "bytes": None, "top_logprobs": []}
        for k, i in enumerate(ids)]
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "prompt_token_ids": list(range(1, prompt + 1)),
        "choices": [{
            "index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "hi", **(message or {})},
            "token_ids": ids if token_ids is None else token_ids,
            "logprobs": {"content": records},
        }],
    }


class Response:
    """What get_response_json reads of an aiohttp response."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    async def read(self) -> bytes:
        return self.raw


def read(body: dict | bytes) -> object:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return asyncio.run(compat.get_response_json(Response(raw)))


@pytest.fixture
def reader(impl, monkeypatch):
    """The tests that read a response, over each implementation: the reference and the core on each SIMD path."""
    monkeypatch.setattr(_select, "kernels", impl)
    return impl


def test_valid_responses_read_as_orjson_reads_them(reader):
    for body in (chat(), chat(1, 1), {"tokens": [1, 2, 3]}, {"choices": [{"message": {"content": "x"}}]},
                 chat(message={"prompt_token_ids": [1, 2, 3], "generation_token_ids": [100, 101, 102, 103],
                               "generation_log_probs": [-0.1, -0.2, -0.3, -0.4],
                               "routed_experts": envelope(routes(7))})):
        assert read(body) == orjson.loads(orjson.dumps(body))


def test_error_is_runtime_error_and_malformed_response_error(reader):
    with pytest.raises(compat.NeMoGymResponseError) as info:
        read(chat(2, content=[{"token": "token_id:100", "logprob": -0.5}, {"token": "token_id:101", "logprob": SENTINEL}]))
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, MalformedResponseError)
    assert info.value.choice == 0 and info.value.token == 1


@pytest.mark.parametrize("defect", ["n_plus_one", "missing", "sentinel", "routing_short", "bundle_sentinel",
                                    "bundle_n_plus_one", "routing_negative", "routing_base64"])
def test_each_planted_defect_is_refused(defect, reader):
    body = chat()
    choice = body["choices"][0]
    records = choice["logprobs"]["content"]
    bundle = {"prompt_token_ids": [1, 2, 3], "generation_token_ids": choice["token_ids"],
              "generation_log_probs": [r["logprob"] for r in records], "routed_experts": envelope(routes(7))}
    if defect == "n_plus_one":
        records.append({"token": "token_id:7", "logprob": -1.0, "bytes": None, "top_logprobs": []})
    elif defect == "missing":
        records[2]["logprob"] = None
    elif defect == "sentinel":
        records[1]["logprob"] = SENTINEL
    else:
        if defect == "routing_short":
            bundle["routed_experts"] = envelope(routes(6))
        elif defect == "bundle_sentinel":
            bundle["generation_log_probs"][3] = SENTINEL
        elif defect == "bundle_n_plus_one":
            bundle["generation_log_probs"].append(-0.5)
        elif defect == "routing_negative":
            values = routes(7)
            values[4][1][0] = -1
            bundle["routed_experts"] = envelope(values)
        elif defect == "routing_base64":
            bundle["routed_experts"] = bundle["routed_experts"][:-4] + "A=A="
        choice["message"].update(bundle)
    with pytest.raises(compat.NeMoGymResponseError):
        read(body)


def test_nan_stays_orjsons_refusal(reader):
    raw = orjson.dumps(chat()).replace(b'"logprob":-0.5', b'"logprob":NaN', 1)
    with pytest.raises(orjson.JSONDecodeError):
        read(raw)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 40), layers=st.integers(1, 5), topk=st.integers(1, 4),
       dtype=st.sampled_from(["int8", "int16", "int32"]), cut=st.integers(-2, 2), data=st.data())
def test_routing_envelope_rows(rows, layers, topk, dtype, cut, data):
    values = data.draw(st.lists(st.lists(st.lists(st.integers(0, 127), min_size=topk, max_size=topk),
                                         min_size=layers, max_size=layers), min_size=rows, max_size=rows))
    text = envelope(values, dtype)
    for routed in (text, values):
        if cut == 0:
            assert compat.check_routed_experts(routed, rows).tolist() == values
        else:
            with pytest.raises(compat.NeMoGymResponseError, match="rows"):
                compat.check_routed_experts(routed, rows + cut)


@pytest.mark.parametrize("routed", ["nrlre2:int16:1x1x1:AAA=", "nrlre1:int64:1x1x1:AAAAAAAAAAA=",
                                    "nrlre1:int16:1x1:AAA=", "nrlre1:int16:0x1x1:", "nrlre1:int16:1x1x2:AAA=",
                                    "nrlre1:int16:1x1x1:AA A", "nrlre1:int16:1x1x" + "9" * 5000 + ":AAA=",
                                    [[1, 2]], [[[1.0]]], [[[True]]], [], 5])
def test_routing_envelope_malformed(routed):
    with pytest.raises(compat.NeMoGymResponseError):
        compat.check_routed_experts(routed, None)


def _their_extract(content: list) -> tuple[list[int], list[float]]:
    """NeMo-Gym's per-record reading, as its source describes it (the reference for the
    whole-list reading)."""
    ids, lps = [], []
    for entry in content:
        token = entry.get("token")
        if not isinstance(token, str) or not token.startswith("token_id:"):
            raise RuntimeError("token")
        ids.append(int(token.removeprefix("token_id:")))
        value = entry.get("logprob")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise RuntimeError("logprob")
        lps.append(float(value))
    return ids, lps


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1),
                          st.one_of(st.floats(-50, 0), st.integers(-50, 0))), min_size=1, max_size=50))
def test_extract_matches_the_per_record_reading(pairs):
    content = [{"token": f"token_id:{i}", "logprob": lp, "bytes": None} for i, lp in pairs]
    ours = compat._extract_choice_logprobs(None, {"logprobs": {"content": content}})
    theirs = _their_extract(content)
    assert ours == theirs
    assert [type(x) for x in ours[0]] == [int] * len(pairs)
    assert [type(x) for x in ours[1]] == [float] * len(pairs)


@pytest.mark.parametrize("value", [SENTINEL, math.inf, -math.inf, math.nan])
def test_extract_refuses_what_it_would_pass(value):
    content = [{"token": "token_id:5", "logprob": -0.5}, {"token": "token_id:6", "logprob": value}]
    with pytest.raises(compat.NeMoGymResponseError) as info:
        compat._extract_choice_logprobs(None, {"logprobs": {"content": content}})
    assert info.value.token == 1


@pytest.mark.parametrize(("value", "what"), [("x", "'x', not a number"), (None, "missing (null)"),
                                             ([-0.5], "[-0.5], not a number")])
def test_bundle_names_a_logprob_that_is_not_a_number(value, what):
    """A message's token bundle whose logprob is not a number (NeMo-Gym's own record loop
    refuses one with its RuntimeError; a bundle a caller built reaches the check) is refused in
    the words SkyRL's and AReaL's drop-ins use (compat._checks.check_logprobs)."""
    with pytest.raises(compat.NeMoGymResponseError) as info:
        compat.check_token_bundle([1, 2], [5, 6], [-0.5, value])
    assert str(info.value).endswith(f"the sampled token's logprob is {what}"), str(info.value)
    assert (info.value.token, info.value.field) == (1, "message.generation_log_probs")


def test_bundle_arrays_and_lists_agree():
    lps = [-0.1, -0.2, -0.3]
    compat.check_token_bundle([1], [5, 6, 7], lps, routes(4))
    compat.check_token_bundle([1], [5, 6, 7], np.array(lps, np.float32), envelope(routes(4), "int8"))
    with pytest.raises(compat.NeMoGymResponseError, match="3 logprobs for 2"):
        compat.check_token_bundle([1], [5, 6], lps)


def test_extract_after_read_uses_what_the_reader_read(reader):
    """In one task, the records get_response_json handed over are read from tokenwire's
    arrays: the same lists as NeMo-Gym's reading; other records are read from the dicts."""
    body = chat(6, content=[{"token": f"token_id:{100 + k}", "logprob": -1 - k / 7, "bytes": None,
                             "top_logprobs": []} for k in range(6)])

    async def go() -> tuple:
        doc = await compat.get_response_json(Response(orjson.dumps(body)))
        choice = doc["choices"][0]
        cached = compat._last_read.get()
        return cached, compat._extract_choice_logprobs(None, choice), _their_extract(choice["logprobs"]["content"])

    cached, ours, theirs = asyncio.run(go())
    assert len(cached) == 1 and ours == theirs and all(type(x) is float for x in ours[1])
    # A candidate's "token" too: the bytes hold the key more often than there are records.
    body["choices"][0]["logprobs"]["content"][0]["top_logprobs"] = [{"token": "token_id:100", "logprob": -1.0}]

    async def again() -> tuple:
        await compat.get_response_json(Response(orjson.dumps(body)))
        return compat._last_read.get()

    assert asyncio.run(again()) == ()


def test_patch_refuses_without_the_supported_release(monkeypatch):
    monkeypatch.setattr(compat, "nemo_gym_version", lambda: "0.6.0")
    with pytest.raises(RuntimeError, match=r"follows NeMo-Gym 0\.7\.0, not 0\.6\.0"):
        compat.patch()
    assert not compat._saved and not compat.is_patched()


def test_plugin_stops_a_session_it_cannot_patch(tmp_path):
    """Without NeMo-Gym 0.7.0 the plugin refuses the session (a usage error naming the way
    out) instead of running the tests unpatched; --tokenwire-no-nemo-gym-patch runs them."""
    import subprocess
    import sys

    if compat.nemo_gym_version() in compat.SUPPORTED_VERSIONS:
        pytest.skip("NeMo-Gym 0.7.0 is installed here")
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tokenwire.compat.nemo_gym_plugin",
            str(tmp_path / "test_x.py")]
    refused = subprocess.run(base, capture_output=True, text=True, cwd=tmp_path)
    assert refused.returncode == 4 and "--tokenwire-no-nemo-gym-patch" in refused.stderr
    allowed = subprocess.run([*base, "--tokenwire-no-nemo-gym-patch"], capture_output=True, text=True, cwd=tmp_path)
    assert allowed.returncode == 0 and "1 passed" in allowed.stdout


# --- the vLLM model server's token path, read from the bytes ---------------------------------------


def armed_read(raw: bytes, reads: int = 1) -> list:
    """get_response_json as the patched VLLMModel.chat_completions has it run on its token path
    (the mark set for the call), ``reads`` times in the same task."""

    async def go() -> list:
        compat._token_path.set([True])
        return [await compat.get_response_json(Response(raw)) for _ in range(reads)]

    return asyncio.run(go())


def from_bytes() -> int:
    return compat.calls["get_response_json read from the bytes"]


logprob_values = st.one_of(st.floats(-60, 0).filter(lambda v: v != SENTINEL), st.integers(-60, 0),
                           st.sampled_from([-0.0, -1e-300, -5e-324, -1.2345678901234567e-5]))


@settings(max_examples=80, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 2**32 - 1), logprob_values), min_size=1, max_size=40),
       with_ids=st.booleans(), prompt=st.one_of(st.none(), st.lists(st.integers(0, 2**32 - 1), max_size=8)),
       usage=st.booleans(), content=st.text(max_size=12), padding=st.booleans())
def test_token_path_document_is_orjsons_but_for_the_records(reader, pairs, with_ids, prompt, usage, content,
                                                            padding):
    """On the token path the document is orjson's, value for value, but for the records,
    which are the ids and logprobs NeMo-Gym's loop reads from them: over both implementations."""
    ids = [i for i, _ in pairs]
    records = [{"token": f"token_id:{i}", "logprob": lp, "bytes": None, "top_logprobs": []} for i, lp in pairs]
    body = {"id": "chatcmpl-7", "object": "chat.completion", "created": 3, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "stop_reason": None,
                         "message": {"role": "assistant", "content": content, "tool_calls": [],
                                     "routed_experts": envelope(routes(len(ids) + len(prompt or [])))},
                         **({"token_ids": ids} if with_ids else {}), "logprobs": {"content": records}}]}
    if prompt is not None:
        body["prompt_token_ids"] = prompt
    if usage:
        body["usage"] = {"prompt_tokens": len(prompt or []), "completion_tokens": len(ids),
                         "total_tokens": len(ids) + len(prompt or [])}
    raw = orjson.dumps(body, option=orjson.OPT_INDENT_2 if padding else None)
    before = from_bytes()
    (doc,) = armed_read(raw)
    assert from_bytes() == before + 1
    want = orjson.loads(raw)
    read_records = doc["choices"][0]["logprobs"]["content"]
    assert type(read_records) is compat.ReadRecords and len(read_records) == len(ids)
    theirs = _their_extract(want["choices"][0]["logprobs"]["content"])
    ours = compat._extract_choice_logprobs(None, doc["choices"][0])
    assert ours == theirs
    assert [type(x) for x in ours[0]] == [int] * len(ids) and [type(x) for x in ours[1]] == [float] * len(ids)
    assert [math.copysign(1, x) for x in ours[1]] == [math.copysign(1, x) for x in theirs[1]]  # -0.0
    doc["choices"][0]["logprobs"]["content"] = want["choices"][0]["logprobs"]["content"]
    assert doc == want
    if with_ids:
        assert all(type(i) is int for i in doc["choices"][0]["token_ids"])


def token_path_body(n: int = 4, **edits: object) -> dict:
    body = chat(n)
    body["usage"] = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3}
    body["choices"][0].update(edits)
    return body


@pytest.mark.parametrize("case", [
    "token_id key", "token_id key beside the name", "id key", "sampling_logprob", "escaped name", "bundle",
    "two choices", "logprobs.refusal", "choice routed_experts", "string body"])
def test_token_path_leaves_to_orjson_what_nemo_gym_reads_otherwise(reader, case):
    """Where NeMo-Gym would read anything the reader does not give as it does (an id from a
    key rather than the token, another logprob, a bundle that keeps the records, more than one
    choice, fields the scan blanks), get_response_json reads the body as before."""
    body = token_path_body()
    choice = body["choices"][0]
    records = choice["logprobs"]["content"]
    if case == "token_id key":
        records[1] = {"token": "x", "token_id": 101, "logprob": -0.5}
    elif case == "token_id key beside the name":
        records[1]["token_id"] = 101
    elif case == "id key":
        records[1] = {"token": "x", "id": 101, "logprob": -0.5}
    elif case == "sampling_logprob":
        for record in records:
            record["sampling_logprob"] = -2.0
    elif case == "bundle":
        choice["message"].update(prompt_token_ids=[1, 2, 3], generation_token_ids=choice["token_ids"],
                                 generation_log_probs=[r["logprob"] for r in records])
    elif case == "two choices":
        body["choices"].append(dict(choice, index=1))
        del body["usage"]
    elif case == "logprobs.refusal":
        choice["logprobs"]["refusal"] = None
    elif case == "choice routed_experts":
        choice["routed_experts"] = None
    raw = orjson.dumps(body)
    if case == "escaped name":
        raw = raw.replace(b'"token_id:101"', b'"token_id:\\u0031\\u00301"')
    if case == "string body":
        raw = raw.decode()
    before = from_bytes()
    (doc,) = armed_read(raw)
    want = orjson.loads(raw)
    if case == "escaped name" and from_bytes() == before + 1:  # the reference reads it decoded, as NeMo-Gym
        assert compat._extract_choice_logprobs(None, doc["choices"][0]) == _their_extract(
            want["choices"][0]["logprobs"]["content"])
        doc["choices"][0]["logprobs"] = want["choices"][0]["logprobs"]
    else:
        assert from_bytes() == before
    assert doc == want


@pytest.mark.parametrize("defect", ["n_plus_one", "missing", "sentinel", "nan", "usage", "ids_disagree"])
def test_token_path_refuses_as_before(reader, defect):
    """A defect on the token path raises what get_response_json raised before: the reader's
    refusal as NeMoGymResponseError, orjson's JSONDecodeError for a NaN."""
    body = token_path_body()
    records = body["choices"][0]["logprobs"]["content"]
    if defect == "n_plus_one":
        records.append({"token": "token_id:7", "logprob": -1.0})
    elif defect == "missing":
        records[2]["logprob"] = None
    elif defect == "sentinel":
        records[1]["logprob"] = SENTINEL
    elif defect == "usage":
        body["usage"]["completion_tokens"] = 5
    elif defect == "ids_disagree":
        records[3]["token"] = "token_id:9"
    raw = orjson.dumps(body)
    if defect == "nan":
        raw = raw.replace(b'"logprob":-0.5', b'"logprob":NaN', 1)
    with pytest.raises((compat.NeMoGymResponseError, orjson.JSONDecodeError)) as before:
        read(raw)
    with pytest.raises(type(before.value)) as after:
        armed_read(raw)
    assert str(after.value) == str(before.value)


def test_token_path_is_the_first_read_of_the_call_only(reader):
    raw = orjson.dumps(token_path_body())
    first, second = armed_read(raw, reads=2)
    assert type(first["choices"][0]["logprobs"]["content"]) is compat.ReadRecords
    assert second == orjson.loads(raw)
    assert read(raw) == orjson.loads(raw)  # and none without the mark


def test_bundle_check_skips_only_the_list_made_from_the_reader(reader):
    (doc,) = armed_read(orjson.dumps(token_path_body()))

    async def go() -> None:
        ids, values = compat._extract_choice_logprobs(None, doc["choices"][0])
        assert compat._checked_logprobs.get() is values
        compat.check_token_bundle([1, 2, 3], ids, values, envelope(routes(7)))
        assert compat._checked_logprobs.get() is None
        with pytest.raises(compat.NeMoGymResponseError, match="rows"):  # the routing is checked still
            compat._checked_logprobs.set(values)
            compat.check_token_bundle([1, 2, 3], ids, values, envelope(routes(6)))
        with pytest.raises(compat.NeMoGymResponseError, match="sentinel"):  # an equal list is scanned
            compat._checked_logprobs.set(values)
            compat.check_token_bundle([1, 2, 3], ids, [*values[:-1], SENTINEL])

    asyncio.run(go())


def test_token_path_only_where_the_server_drops_the_records(monkeypatch):
    from types import SimpleNamespace

    class Model:
        _extract_choice_logprobs = compat._extract_choice_logprobs

        def __init__(self, **config: object) -> None:
            self.config = SimpleNamespace(**{"return_token_id_information": True, "use_completions_api": False,
                                             **config})
            self._external_capture_handler = None

    class Overriding(Model):
        def _extract_choice_logprobs(self, choice_dict):
            return [], []

    monkeypatch.delenv("NEMO_GYM_VLLM_TRANSPORT_LOG", raising=False)
    assert compat._drops_records(Model())
    assert not compat._drops_records(Model(return_token_id_information=False))
    assert not compat._drops_records(Model(use_completions_api=True))
    assert not compat._drops_records(Overriding())
    handled = Model()
    handled._external_capture_handler = object()
    assert not compat._drops_records(handled)
    monkeypatch.setenv("NEMO_GYM_VLLM_TRANSPORT_LOG", "/tmp/log")
    assert not compat._drops_records(Model())


@pytest.mark.parametrize("case", ["valid", "int8", "rows", "negative", "bytes", "base64", "escape", "twice",
                                  "header elsewhere", "repeated"])
def test_token_path_routing_made_from_the_bytes(reader, case):
    """The message's routing envelope is made into its string once, from the bytes, and checked
    without its decoding kept (the reader neither copies nor builds it); the bundle check then
    counts its rows only. The document is orjson's either way; a body whose routing is not an
    envelope the check accepts, or where the string would not be orjson's, is read as before,
    and each defect is refused with the same message as from orjson's document. A copy of the
    key in another spelling after it (the one the reader keeps), holding the envelope's header,
    sends the body the old way."""
    body = token_path_body()
    values = routes(7 - (case == "rows"))
    if case == "negative":
        values[5][1][0] = -3
    routing = envelope(values, "int8" if case == "int8" else "int16")
    if case == "bytes":
        routing = routing.replace(":7x2x2:", ":7x2x3:")
    elif case == "base64":
        routing = routing[:-4] + "A=A="
    message = body["choices"][0]["message"]
    message["routed_experts"] = routing
    if case == "twice":
        message["tool_calls"] = [{"routed_experts": routing}]
    elif case == "header elsewhere":
        message["content"] = routing[:routing.rindex(":") + 1]
    raw = orjson.dumps(body)
    if case == "escape":  # orjson reads the same string; the bytes are not that string
        raw = raw.replace(b'"nrlre1:int16:', b'"nrlre1:int\\u00316:')
    elif case == "repeated":
        header = routing[:routing.rindex(":") + 1].encode()
        raw = raw.replace(routing.encode() + b'"', routing.encode() + b'","routed_experts" :"' + header + b'"', 1)
    want = orjson.loads(raw)
    theirs = want["choices"][0]["message"]["routed_experts"]
    compat._checked_routing.set(None)
    doc = compat.token_path_document(raw)
    try:
        assert (doc is None) == (case == "repeated")
        if doc is None:
            return
        ours = doc["choices"][0]["message"]["routed_experts"]
        handed = compat._checked_routing.get()
        assert (handed is ours) == (case in ("valid", "int8", "rows", "header elsewhere")) and (handed is None or handed is ours)
        doc["choices"][0]["logprobs"] = want["choices"][0]["logprobs"]
        assert doc == want
        ids = want["choices"][0]["token_ids"]
        lps = [r["logprob"] for r in want["choices"][0]["logprobs"]["content"]]
        for prompt in ([1, 2, 3], [1, 2]):  # rows one per prompt and generation token, or one short
            try:  # orjson's string: another object, read whole
                compat.check_token_bundle(prompt, ids, lps, "".join(theirs))
                expected = None
            except compat.NeMoGymResponseError as exc:
                expected = str(exc)
            compat._checked_routing.set(handed)
            try:
                compat.check_token_bundle(prompt, ids, lps, ours)
                got = None
            except compat.NeMoGymResponseError as exc:
                got = str(exc)
            assert got == expected
            assert (expected is None) == (case in ("valid", "int8", "escape", "twice", "header elsewhere")
                                          and len(prompt) == 3
                                          or case == "rows" and len(prompt) == 2)
    finally:
        compat._checked_routing.set(None)
