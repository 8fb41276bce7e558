"""SkyRL's real generation client against a local HTTP server, unpatched and patched with
tokenwire.compat.skyrl (skipped where SkyRL 0.4.0 is not installed; tests/run_skyrl_suite.py
runs it in SkyRL's venv).

The server on 127.0.0.1 answers ``/inference/v1/generate`` with vLLM's records (``"token_id:N"``
names beside ``token_ids``) or SkyRL's own token-less ``{"logprob": x}`` records, and
``/skyrl/v1/generate`` with SkyRL's packed routing envelope. Each request goes through
``RemoteInferenceClient._generate_single`` (the trainer's path) and
``RemoteGenerateClient.generate`` (a direct caller, which keeps ``raw_response``). Each planted
defect's outcome both ways is printed as a table row (``DEFECT name | unpatched | patched``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import typing
from typing import Any

import pytest

pytest.importorskip("skyrl")
if sys.version_info < (3, 12):  # SkyRL 0.4.0 asks for 3.12: pydantic needs this TypedDict before 3.12
    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]

ric = pytest.importorskip("skyrl.backends.skyrl_train.inference_servers.remote_inference_client")
import numpy as np  # noqa: E402
import orjson  # noqa: E402

from skyrl.backends.skyrl_train.inference_servers.generate_wire import pack_routed_experts  # noqa: E402
from tokenwire import MalformedResponseError  # noqa: E402
from tokenwire.compat import skyrl as compat  # noqa: E402

try:
    from canned_http import bounded_server  # copied beside this file by run_skyrl_suite.py
except ImportError:
    from tests.canned_http import bounded_server

if compat.skyrl_version() not in compat.SUPPORTED_VERSIONS:
    pytest.skip(f"SkyRL {compat.skyrl_version()} is not the release the drop-in follows", allow_module_level=True)

PROMPT = [11, 12, 13, 14]
N = 64
LAYERS, TOPK = 3, 2


def _ids(seed: int) -> list[int]:
    return [(1000 + 7 * t + seed) % 150_000 for t in range(N)]


def _logprobs(seed: int) -> list[Any]:
    return [-0.001 * ((t * 37 + seed) % 997 + 1) for t in range(N)]


def body(kind: str = "vllm", defect: str | None = None, seed: int = 0) -> bytes:
    """A generate body of ``N`` tokens: ``vllm`` (vLLM's records), ``tokenless`` (SkyRL's
    ``{"logprob": x}``) or ``packed`` (token-less records and the routing envelope)."""
    ids, values = _ids(seed), _logprobs(seed)
    if defect == "n_plus_1":
        values.append(-0.5)
    elif defect == "missing":
        values[5] = None
    elif defect == "sentinel":
        values[7] = -9999.0
    elif defect == "nan":
        values[9] = float("nan")
    if kind == "vllm":
        records = [{"token": f"token_id:{ids[min(t, N - 1)]}", "logprob": v, "bytes": [65], "top_logprobs": []}
                   for t, v in enumerate(values)]
    else:
        records = [{"logprob": v} for v in values]
    choice: dict[str, Any] = {"index": 0, "token_ids": ids, "finish_reason": "length", "logprobs": {"content": records}}
    if kind == "packed":
        rows = len(PROMPT) + N - 1 - (defect == "routing_short")
        routes = (np.arange(rows * LAYERS * TOPK) % 60).reshape(rows, LAYERS, TOPK)
        choice = {"token_ids": ids, "finish_reason": "length", "logprobs": {"content": records},
                  "routed_experts": pack_routed_experts(routes), "rollout_sample_support": None}
        return orjson.dumps({"choices": [choice]})
    document = {"request_id": f"r{seed}", "choices": [choice], "prompt_logprobs": None, "kv_transfer_params": None}
    if defect == "nan":
        return json.dumps(document).encode()  # json writes NaN as NaN, as a server's encoder may
    return orjson.dumps(document)  # compact, as vLLM's and SkyRL's servers write


class Server:
    """The bodies to answer, one per request, in order."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.paths: list[str] = []

    def answer(self, path: str, sent: bytes) -> tuple[int, bytes]:
        self.paths.append(path)
        return 200, self.bodies.pop(0) if self.bodies else b'{"error": "no body"}'


async def _call(url: str, raw: bytes, server: Server, *, routed: bool, direct: bool, asked: bool) -> Any:
    server.bodies = [raw] * 2  # a retry reads the same body
    client = ric.RemoteInferenceClient(proxy_url=url, server_urls=[url], data_parallel_size=1,
                                       enable_return_routed_experts=routed)
    sampling_params = {"logprobs": 0} if asked else {"max_tokens": N}
    try:
        if direct:
            return await client._get_generate_client().generate(
                prompt_token_ids=PROMPT, sampling_params=sampling_params, session_id=None, model="m",
                return_routed_experts=routed)
        return await client._generate_single(prompt_token_ids=PROMPT, sampling_params=sampling_params,
                                             session_id=None, model="m")
    finally:
        await client._get_generate_client().aclose()


def run(raw: bytes, *, routed: bool = False, direct: bool = False, asked: bool = True) -> Any:
    """SkyRL's call on ``raw`` served locally (``asked``: the request asks for logprobs): its
    result, or the exception it raised."""
    server = Server()
    with bounded_server(server.answer) as host:
        try:
            return asyncio.run(_call(f"http://{host}", raw, server, routed=routed, direct=direct, asked=asked))
        except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
            return exc


@pytest.fixture(autouse=True)
def _unpatched(monkeypatch):
    monkeypatch.setattr(ric, "_DATA_PLANE_RETRIES", 1)  # a body that is not JSON: one retry sleep, not 30
    compat.unpatch()
    yield
    compat.unpatch()


def _same(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, list):  # SkyRL's lists: the same values of the same types, element by element
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif hasattr(a, "__dataclass_fields__"):
        assert type(a) is type(b)
        for name in a.__dataclass_fields__:
            _same(getattr(a, name), getattr(b, name))
    else:
        assert type(a) is type(b) and a == b


def read_alike(raw: bytes, **how: Any) -> Any:
    """SkyRL's result on ``raw``, unpatched and patched (the drop-in's calls counted from
    zero): the two must be equal; gives the patched one."""
    before = run(raw, **how)
    assert not isinstance(before, BaseException), before
    compat.calls.clear()
    with compat.patched():
        after = run(raw, **how)
    assert not isinstance(after, BaseException), after
    _same(before, after)
    return after


@pytest.mark.parametrize(("kind", "direct"), [("vllm", False), ("vllm", True), ("tokenless", False),
                                              ("tokenless", True), ("packed", False), ("packed", True)])
def test_valid_responses_read_alike(kind, direct):
    routed = kind == "packed"
    for seed in range(3):
        raw = body(kind, seed=seed)
        after = read_alike(raw, routed=routed, direct=direct)
        assert type(after["response_logprobs"] if not direct else after.response_logprobs) is list
        # the trainer's path is read from the bytes (vLLM's records, SkyRL's own, its routing envelope)
        assert compat.calls["generate from the reader's arrays"] == (not direct)


# defect -> (the body's kind, what the drop-in does: "refused" or "flagged")
DEFECTS = {
    "n_plus_1": ("vllm", "refused"),
    "n_plus_1 (token-less records)": ("tokenless", "refused"),
    "missing": ("vllm", "refused"),
    "missing (token-less records)": ("tokenless", "refused"),
    "sentinel": ("vllm", "flagged"),
    "sentinel (token-less records)": ("tokenless", "flagged"),
    "nan": ("vllm", "refused"),
    "routing_short": ("packed", "refused"),
}


def _outcome(result: Any) -> str:
    if isinstance(result, BaseException):
        return f"raises {type(result).__name__}"
    values = result["response_logprobs"]
    return f"returns {len(result['response_ids'])} ids, {len(values)} logprobs" + (
        f", clamped at {values.clamped_tokens}" if isinstance(values, compat.ClampedLogprobs) else "")


@pytest.mark.parametrize("name", list(DEFECTS))
def test_planted_defects(name):
    kind, expected = DEFECTS[name]
    defect = name.split(" ")[0]
    raw = body(kind, defect)
    routed = kind == "packed"
    before = run(raw, routed=routed)
    with compat.patched():
        after = run(raw, routed=routed)
        direct = run(raw, routed=routed, direct=True)
    print(f"\nDEFECT {name} | {_outcome(before)} | {_outcome(after)}")
    if defect == "nan":  # not JSON: SkyRL's own refusal (orjson's error, after _post's retry) both ways
        assert isinstance(before, orjson.JSONDecodeError) and isinstance(after, orjson.JSONDecodeError)
        assert isinstance(direct, orjson.JSONDecodeError)
        return
    assert not isinstance(before, BaseException), before  # SkyRL passes every other one
    if expected == "refused":
        assert isinstance(after, compat.SkyRLResponseError), after
        assert isinstance(after, MalformedResponseError) and isinstance(after, ValueError)
        assert isinstance(direct, compat.SkyRLResponseError), direct
        return
    values = after["response_logprobs"]
    assert isinstance(values, compat.ClampedLogprobs) and values == before["response_logprobs"]
    assert values.clamped_tokens == [7] and values.clamped.tolist() == [t == 7 for t in range(N)]
    assert {k: v for k, v in after.items() if k != "response_logprobs"}.keys() == before.keys() - {"response_logprobs"}
    compat.refuse_clamped = True
    try:
        with compat.patched():
            refused = run(raw)
    finally:
        compat.refuse_clamped = False
    assert isinstance(refused, compat.SkyRLResponseError), refused


@pytest.mark.parametrize("name", [name for name in DEFECTS if DEFECTS[name][0] != "packed" and "nan" not in name])
def test_logprobs_not_asked_for_are_handed_on(name):
    """A request without ``logprobs`` (SkyRL's generate then drops ``response_logprobs``): the
    logprobs the server sent all the same are handed on exactly as SkyRL reads them, on the
    trainer's path and to a direct caller; asked for, each is refused or marked
    (test_planted_defects)."""
    raw = body(DEFECTS[name][0], name.split(" ")[0])
    for direct in (False, True):
        read_alike(raw, direct=direct, asked=False)
        assert compat.calls["logprobs not asked for"] == 1


def test_routing_is_checked_when_logprobs_are_not_asked_for():
    raw = body("packed", "routing_short")
    before = run(raw, routed=True, asked=False)
    assert not isinstance(before, BaseException), before
    with compat.patched():
        after = run(raw, routed=True, asked=False)
        direct = run(raw, routed=True, direct=True, asked=False)
    assert isinstance(after, compat.SkyRLResponseError) and "routed_experts holds 66 rows, not 67" in str(after)
    assert isinstance(direct, compat.SkyRLResponseError)  # the direct caller gives no prompt start: 0


def test_patch_is_undone():
    generate = ric.RemoteGenerateClient.generate
    with compat.patched():
        assert compat.is_patched() and ric.RemoteGenerateClient.generate is not generate
    assert not compat.is_patched() and ric.RemoteGenerateClient.generate is generate
    assert ric.orjson is orjson
    assert ric.decode_packed_routed_experts is decode


decode = ric.decode_packed_routed_experts


def decoded(payload: Any) -> Any:
    """The client module's decode_packed_routed_experts (SkyRL's, or the drop-in's once patched)."""
    try:
        return ric.decode_packed_routed_experts(payload)
    except Exception as exc:  # noqa: BLE001 - SkyRL's own error, compared below
        return type(exc), str(exc)


@pytest.mark.parametrize("case", ["uint8", "uint8 empty", "int16", "int32", "short", "long", "bad base64",
                                  "escaped", "shape of two", "shape of bools", "numpy shape", "extra key",
                                  "not canonical padding"])
def test_routing_decoded_as_skyrl_decodes_it(case):
    """The patched client module's decode_packed_routed_experts gives SkyRL's array (dtype,
    shape, values, writable, C-contiguous) for every envelope, tokenwire decoding the uint8
    ones, and SkyRL's own error for every other."""
    rng = np.random.default_rng(3)
    high = {"int16": 2**15, "int32": 2**31}.get(case, 256)
    routes = rng.integers(0, min(high, 300) if case != "uint8" else 256, (0 if "empty" in case else 9, 4, 2))
    payload = pack_routed_experts(routes.astype(np.int64))
    if case == "int32":
        payload = pack_routed_experts(np.full((3, 2, 2), 2**20, np.int64))
    data = payload["data"]
    if case == "short":
        payload["data"] = data[:-4]
    elif case == "long":
        payload["data"] = data + "AAAA"
    elif case == "bad base64":
        payload["data"] = data[:4] + "-" + data[5:]
    elif case == "escaped":
        payload["data"] = memoryview(data.replace(data[4:8], "\\u0041", 1).encode())
    elif case == "shape of two":
        payload["shape"] = payload["shape"][:2]
    elif case == "shape of bools":
        payload["shape"] = [True, 9 * 4, 2] if payload["shape"][0] else payload["shape"]
    elif case == "numpy shape":
        payload["shape"] = [np.int64(d) for d in payload["shape"]]
    elif case == "extra key":
        payload["sidecar"] = 1
    elif case == "not canonical padding":
        payload["data"] = data + "="
    if case in ("uint8", "uint8 empty", "escaped", "short"):
        assert payload["dtype"] == "uint8"
    theirs = decoded(dict(payload))
    with compat.patched():
        before = compat.calls["routing decoded by tokenwire"]
        ours = decoded(dict(payload))
        by_tokenwire = compat.calls["routing decoded by tokenwire"] - before
    assert by_tokenwire == (case in ("uint8", "uint8 empty"))
    if isinstance(theirs, tuple):
        assert ours == theirs
        return
    assert type(ours) is np.ndarray and ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert ours.flags.writeable and ours.flags.c_contiguous and np.array_equal(ours, theirs)


@pytest.mark.parametrize("kind", ["vllm", "packed"])
@pytest.mark.parametrize("block", [{"sampled": _logprobs(0)}, {"content": None, "sampled": _logprobs(0)}],
                         ids=["sampled", "content null"])
def test_logprobs_skyrl_does_not_read_are_none_as_skyrl_reads_them(kind, block):
    """vLLM's ``logprobs.sampled`` (alone, or beside a null ``content``): SkyRL reads no
    logprobs (``response_logprobs`` None). Asked for, the drop-in refuses the body (the trainer
    would get None for the logprobs it asked for), never hands on the list SkyRL did not read;
    not asked for, it hands on SkyRL's None."""
    document = orjson.loads(body(kind))
    document["choices"][0]["logprobs"] = block
    raw = orjson.dumps(document)
    routed = kind == "packed"
    before = run(raw, routed=routed)
    assert not isinstance(before, BaseException) and before["response_logprobs"] is None, before
    with compat.patched():
        after = run(raw, routed=routed)
        direct = run(raw, routed=routed, direct=True)
    assert isinstance(after, compat.SkyRLResponseError) and f"{N} token ids against 0 logprobs" in str(after), after
    assert isinstance(direct, compat.SkyRLResponseError), direct
    assert read_alike(raw, routed=routed, asked=False)["response_logprobs"] is None


@pytest.mark.parametrize("where", ["a second one in the choice", "the choice's own, the routing elsewhere"])
def test_an_envelope_of_no_rows_in_the_body_is_refused_as_skyrl_refuses_it(where):
    """An envelope of no rows the body holds itself is not taken for the one the drop-in puts
    in the routing's place for the reader: SkyRL's own refusal, both ways."""
    raw = body("packed")
    if where == "a second one in the choice":
        assert raw.endswith(b"}]}")
        raw = raw[:-3] + b',"routed_experts": {"data": "","shape":[0,1,1],"dtype":"uint8"}}]}'
    else:
        choice = orjson.loads(raw)["choices"][0]
        envelope = choice.pop("routed_experts")
        choice["routed_experts"] = {"shape": [0, 1, 1], "dtype": "uint8", "data": ""}
        raw = orjson.dumps({"routed_experts": envelope, "choices": [choice]})
    before = run(raw, routed=True)
    with compat.patched():
        after = run(raw, routed=True)
    print(f"\n{where}: {before!r} | {after!r}")
    assert isinstance(before, ValueError) and not isinstance(before, MalformedResponseError), before
    assert type(after) is type(before) and str(after) == str(before), after


@pytest.mark.parametrize("routing", ["envelope", "envelope, rows short", "nested lists"])
def test_vllm_records_with_routing_skyrl_does_not_read(routing):
    """On ``/inference/v1/generate`` SkyRL reads no routing: vLLM's named records go to the
    reader as they are (no search for an envelope), and a choice holding routing, of any form
    and any row count, reads as SkyRL reads it."""
    document = orjson.loads(body("vllm"))
    rows = len(PROMPT) + N - 1 - (routing == "envelope, rows short")
    routes = (np.arange(rows * LAYERS * TOPK) % 60).reshape(rows, LAYERS, TOPK)
    document["choices"][0]["routed_experts"] = (routes.tolist() if routing == "nested lists"
                                                else pack_routed_experts(routes))
    after = read_alike(orjson.dumps(document))
    assert len(after["response_ids"]) == N and after["routed_experts"] is None
