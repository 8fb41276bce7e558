"""tokenwire.compat.skyrl without SkyRL installed: its checks over a stand-in of SkyRL's
``RemoteGenerateResult`` and its read of generate bodies from the bytes (SkyRL's real client
against a local server: tests/test_compat_skyrl.py, run by tests/run_skyrl_suite.py)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenwire import MalformedResponseError
from tokenwire.compat import skyrl as compat


@dataclass(frozen=True)
class RemoteGenerateResult:  # the shape of SkyRL 0.4.0's
    raw_response: dict[str, Any]
    response_ids: list[int]
    response_logprobs: list[float] | None
    stop_reason: str
    routed_experts: np.ndarray | None
    sample_support: np.ndarray | None


def result(ids: list[Any], values: list[Any] | None, *, routes: np.ndarray | None = None,
           support: np.ndarray | None = None) -> tuple[dict[str, Any], RemoteGenerateResult]:
    """A body with those ids and logprobs, and the result SkyRL's generate reads from it."""
    content = None if values is None else [{"logprob": v} for v in values]
    document = {"choices": [{"token_ids": ids, "finish_reason": "stop",
                             "logprobs": None if content is None else {"content": content}}]}
    read = values if values else None
    return document, RemoteGenerateResult(document, ids, read, "stop", routes, support)


def values(n: int) -> list[float]:
    return [-0.01 * (t + 1) for t in range(n)]


@given(st.integers(1, 200))
def test_aligned_results_pass_unchanged(n):
    document, r = result(list(range(n)), values(n))
    assert compat.check_response(document, r, prompt_tokens=5) is r


@pytest.mark.parametrize(("ids", "logprobs", "where"), [
    ([1, 2, 3], values(4), "3 token ids against 4 logprobs"),
    ([1, 2, 3], values(2), "3 token ids against 2 logprobs"),
    ([1, 2, 3], [-0.1, None, -0.2], "missing (null)"),
    ([1, 2, 3], [-0.1, "x", -0.2], "'x', not a number"),
    ([1, 2, 3], [-0.1, True, -0.2], "True, not a number"),
    ([1, 2, 3], [-0.1, float("nan"), -0.2], "nan, not finite"),
    ([1, 2, 3], [-0.1, float("-inf"), -0.2], "-inf, not finite"),
    ([1, 2, 3], [-0.1, 10**400, -0.2], "beyond float range"),
    ([1, -2, 3], values(3), "not an int in [0, 2**32)"),
    ([1, 2**32, 3], values(3), "not an int in [0, 2**32)"),
    ([1, 2.0, 3], values(3), "not an int in [0, 2**32)"),
    ([1, True, 3], values(3), "not an int in [0, 2**32)"),
])
def test_each_misalignment_is_refused(ids, logprobs, where):
    document, r = result(ids, logprobs)
    with pytest.raises(compat.SkyRLResponseError, match=__import__("re").escape(where)) as caught:
        compat.check_response(document, r)
    assert isinstance(caught.value, MalformedResponseError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("block", [{"content": []}, None, {}, {"content": None}, {"sampled": [-0.1, -0.2]},
                                   {"content": None, "sampled": [-0.1, -0.2]}])
def test_a_completion_without_logprobs_is_refused_when_they_were_asked_for(block):
    """SkyRL reads each of these as no logprobs (``response_logprobs`` None): asked for, the
    trainer would get None for them."""
    document, r = result([1, 2], None)
    document["choices"][0]["logprobs"] = block
    with pytest.raises(compat.SkyRLResponseError, match="2 token ids against 0 logprobs") as caught:
        compat.check_response(document, r)
    assert caught.value.field == "logprobs.content"
    assert compat.check_response(document, r, logprobs_asked=False) is r  # not asked for: SkyRL's None, passed
    document, r = result([], None)  # no completion, no logprobs
    assert compat.check_response(document, r) is r


@pytest.mark.parametrize("logprobs", [values(4), values(2), [-0.1, None, -0.2], [-0.1, "x", -0.2],
                                      [-0.1, float("nan"), -0.2], [-0.1, -9999.0, -0.2], []])
def test_logprobs_not_asked_for_are_handed_on(logprobs):
    """The request did not ask for logprobs (SkyRL's generate then drops them): whatever the
    server sent is handed on as SkyRL read it, unchecked and unmarked; asked for, refused."""
    document, r = result([1, 2, 3], logprobs)
    out = compat.check_response(document, r, logprobs_asked=False)
    assert out is r and type(out.response_logprobs) is type(r.response_logprobs)
    with pytest.raises(compat.SkyRLResponseError):
        compat.refuse_clamped = True
        try:
            compat.check_response(document, r)
        finally:
            compat.refuse_clamped = False


@pytest.mark.parametrize("defect", ["id", "routing", "support"])
def test_ids_routing_and_support_are_checked_when_logprobs_are_not_asked_for(defect):
    ids = [1, 2**32, 3] if defect == "id" else [1, 2, 3]
    routes = np.zeros((4, 2, 2), np.uint8) if defect == "routing" else None  # 5 rows for 3 prompt tokens
    support = np.zeros((2, 4), np.int32) if defect == "support" else None
    document, r = result(ids, values(1), routes=routes, support=support)
    with pytest.raises(compat.SkyRLResponseError, match={"id": "not an int", "routing": "holds 4 rows, not 5",
                                                         "support": "2 rows for 3"}[defect]):
        compat.check_response(document, r, prompt_tokens=3, logprobs_asked=False)


@pytest.mark.parametrize("start", [None, 0, 2])
def test_routing_rows_are_counted(start):
    n, prompt = 6, 5
    rows = prompt - (start or 0) + n - 1
    for got in (rows - 1, rows, rows + 1):
        document, r = result(list(range(n)), values(n), routes=np.zeros((got, 3, 2), np.uint8))
        if got == rows:
            assert compat.check_response(document, r, prompt_tokens=prompt, routing_start=start) is r
        else:
            with pytest.raises(compat.SkyRLResponseError, match=f"routed_experts holds {got} rows, not {rows}"):
                compat.check_response(document, r, prompt_tokens=prompt, routing_start=start)


def test_sample_support_rows_are_counted():
    document, r = result([1, 2, 3], values(3), support=np.zeros((2, 4), np.int32))
    with pytest.raises(compat.SkyRLResponseError, match="2 rows for 3 generated tokens"):
        compat.check_response(document, r)


def test_the_clamp_is_kept_and_marked(monkeypatch):
    logprobs = values(5)
    logprobs[1] = logprobs[3] = -9999.0
    document, r = result(list(range(5)), logprobs)
    out = compat.check_response(document, r)
    flagged = out.response_logprobs
    assert type(flagged) is compat.ClampedLogprobs and flagged == logprobs
    assert flagged.clamped.tolist() == [False, True, False, True, False] and flagged.clamped_tokens == [1, 3]
    monkeypatch.setattr(compat, "refuse_clamped", True)
    with pytest.raises(compat.SkyRLResponseError, match=r"content\[1\].*clamp -9999"):
        compat.check_response(document, r)


def vllm_body(n: int, *, defect: str | None = None, records: str = "named") -> bytes:
    ids = [100 + t for t in range(n)]
    logprobs: list[Any] = values(n)
    if defect == "sentinel":
        logprobs[0] = -9999.0
    if defect == "null":
        logprobs[0] = None
    if records == "named":
        content = [{"token": f"token_id:{i}", "logprob": v, "bytes": None, "top_logprobs": []} for i, v in zip(ids, logprobs)]
    else:
        content = [{"logprob": v} for v in logprobs]
    if defect == "n_plus_1":
        content.append(dict(content[-1]))
    return json.dumps({"choices": [{"index": 0, "token_ids": ids, "finish_reason": "length",
                                    "logprobs": {"content": content}}]}).encode()


def read_document(raw: Any) -> Any:
    """The drop-in's reading of ``raw`` as SkyRL's ``load_packed_body`` hands it the body
    (``/skyrl/v1/generate``); a body without routing anywhere is read the same as its
    ``orjson.loads`` hands it over (``/inference/v1/generate``, where vLLM's named records go to
    the reader as they are, the transport search after it)."""
    packed = compat._read_document(raw, True)
    if isinstance(raw, bytes) and b"routed_experts" not in raw:
        plain = compat._read_document(raw, False)
        assert (plain is None) == (packed is None)
        if packed is not None:
            assert plain[0] == packed[0] and np.array_equal(plain[1], packed[1])
            assert all(type(i) is int for i in plain[0]["choices"][0]["token_ids"])
    return packed


@pytest.mark.parametrize("routing", [False, True])
def test_named_records_on_the_plain_path_are_left_to_skyrl_with_routing(routing, kernels):
    """On ``/inference/v1/generate`` SkyRL reads no routing: a choice holding some is left to
    its read (no envelope stands in for it there), one without is read from the bytes."""
    document = json.loads(vllm_body(3))
    if routing:
        document["choices"][0]["routed_experts"] = {"data": "AAECAwQFBgc=", "shape": [2, 2, 2], "dtype": "uint8"}
    read = compat._read_document(json.dumps(document).encode(), False)
    assert (read is None) == routing


@given(st.integers(1, 300))
def test_the_bytes_read_as_skyrl_reads_them(n):
    raw = vllm_body(n)
    document, read = read_document(raw)
    theirs = json.loads(raw)["choices"][0]
    assert document["choices"][0]["token_ids"] == theirs["token_ids"]
    assert document["choices"][0]["finish_reason"] == theirs["finish_reason"]
    assert read.tolist() == [r["logprob"] for r in theirs["logprobs"]["content"]]


@pytest.mark.parametrize(("defect", "records"), [("sentinel", "named"), ("null", "named"), ("n_plus_1", "named"),
                                                 ("sentinel", "tokenless"), ("null", "tokenless"),
                                                 ("n_plus_1", "tokenless"), (None, "empty")])
def test_other_bodies_are_left_to_skyrl(defect, records, kernels):
    raw = vllm_body(4, defect=defect, records=records) if records != "empty" else vllm_body(0)
    assert read_document(raw) is None
    assert read_document(raw.decode()) is None  # only bytes, as aiohttp reads them


def skyrl_body(logprobs: list[Any], *, routes: bool = False) -> bytes:
    """A body as SkyRL's own server writes it (orjson's compact form, token-less records)."""
    choice: dict[str, Any] = {"token_ids": list(range(7, 7 + len(logprobs))), "finish_reason": "stop",
                              "logprobs": {"content": [{"logprob": v} for v in logprobs]}}
    if routes:
        choice["routed_experts"] = {"data": "AAECAwQFBgc=", "shape": [2, 2, 2], "dtype": "uint8"}
        choice["rollout_sample_support"] = None
    return json.dumps({"choices": [choice]}, separators=(",", ":")).encode()


@given(st.lists(st.floats(-50, 0, allow_nan=False).filter(lambda v: v != -9999.0), min_size=1, max_size=200),
       st.booleans())
def test_skyrl_records_read_as_skyrl_reads_them(logprobs, routes):
    raw = skyrl_body(logprobs, routes=routes)
    document, read = read_document(raw)
    theirs = json.loads(raw)["choices"][0]
    assert read.tolist() == [r["logprob"] for r in theirs["logprobs"]["content"]]
    assert document["choices"][0]["token_ids"] == theirs["token_ids"]
    if routes:
        envelope = document["choices"][0]["routed_experts"]
        assert bytes(envelope["data"]) == theirs["routed_experts"]["data"].encode()
        assert envelope["shape"] == [2, 2, 2] and envelope["dtype"] == "uint8"


@pytest.mark.parametrize(("old", "new"), [
    (b'{"logprob":-0.02}', b'{"logprob":-0.02,2}'),  # a bare value inside a record
    (b'{"logprob":-0.02}', b'{"logprob":null}'),  # missing
    (b'{"logprob":-0.02}', b'{"logprob":-9999.0}'),  # SkyRL's clamp: left to SkyRL's read, then marked
    (b'{"logprob":-0.02}', b'{"logprob":[-0.02]}'),  # not a number
    (b'{"logprob":-0.02}', b'{"logprob":"-0.02"}'),
    (b'},{"logprob":-0.02}', b'}{"logprob":-0.02}'),  # records not comma-separated
    (b'{"logprob":-0.02}', b'{"logprob":-0.02},{"logprob":-0.5}'),  # N+1
    (b'{"logprob":-0.02}', b'{}'),  # no logprob
    (b'{"logprob":-0.02}', b'-0.02'),  # not a record
    (b'{"choices"', b'{"output_mode":"tokens","choices"'),  # says its output mode: SkyRL's read
    (b'"finish_reason"', b'"rollout_sample_support":{"data":"AAAA"},"finish_reason"'),  # a sample support
])
@pytest.mark.parametrize("routes", [False, True])
def test_other_skyrl_bodies_are_left_to_skyrl(old, new, routes, kernels):
    raw = skyrl_body(values(3), routes=routes)
    assert old in raw
    assert read_document(raw.replace(old, new, 1)) is None


def test_a_named_record_is_read_by_name_without_routing_and_by_position_with_it(kernels):
    """SkyRL never reads a record's token: its packed body's records are read by position
    whatever they hold; without routing a body naming ids is vLLM's, read by name, and one
    whose name is not its id is left to SkyRL's read (which then hands on its logprob)."""
    raw = skyrl_body(values(3)).replace(b'{"logprob":-0.02}', b'{"logprob":-0.02,"token":"token_id:99"}')
    assert read_document(raw) is None
    raw = skyrl_body(values(3), routes=True).replace(b'{"logprob":-0.02}', b'{"logprob":-0.02,"token":"token_id:99"}')
    assert read_document(raw)[1].tolist() == values(3)


def test_a_routing_envelope_not_the_choices_own_is_left_to_skyrl(kernels):
    """SkyRL's generate reads choices[0].routed_experts: an envelope elsewhere (here in a
    record) is not the choice's routing, and SkyRL's own read refuses the body."""
    raw = skyrl_body(values(3), routes=True)
    envelope = raw[raw.index(b'"routed_experts":'):raw.index(b',"rollout_sample_support"')]
    moved = raw.replace(b"," + envelope, b"").replace(b'{"logprob":-0.02}', b'{"logprob":-0.02,' + envelope + b"}")
    assert json.loads(moved)["choices"][0].get("routed_experts") is None
    assert read_document(moved) is None


@pytest.mark.parametrize(("old", "new"), [
    (b'{"logprob":-0.02}', b'{"logprob":-0.02,"x":1}'),  # another member: SkyRL reads the logprob alone
    (b'{"logprob":-0.02}', b'{"token":"Hello","logprob":-0.02}'),  # decoded text, no id: by position
    (b'{"logprob":-0.02}', b'{ "logprob" : -0.02 }'),  # another spelling
    (b'"content":[', b'"content":[ '),
])
@pytest.mark.parametrize("routes", [False, True])
def test_skyrl_records_read_by_position_whatever_their_spelling(old, new, routes, kernels):
    raw = skyrl_body(values(3), routes=routes).replace(old, new, 1)
    document, read = read_document(raw)
    theirs = json.loads(raw)["choices"][0]
    assert read.tolist() == [r["logprob"] for r in theirs["logprobs"]["content"]]
    assert document["choices"][0]["token_ids"] == theirs["token_ids"]


@pytest.mark.parametrize("make", [lambda: vllm_body(50), lambda: skyrl_body(values(50)),
                                  lambda: skyrl_body(values(50), routes=True)], ids=["vllm", "skyrl", "skyrl-routed"])
def test_each_implementation_reads_the_bytes_alike(make, kernels):
    raw = make()
    document, read = read_document(raw)
    theirs = json.loads(raw)["choices"][0]
    assert read.tolist() == [r["logprob"] for r in theirs["logprobs"]["content"]]
    assert document["choices"][0]["token_ids"] == theirs["token_ids"]


def _content(logprobs: list[float]) -> bytes:
    return json.dumps({"content": [{"logprob": v} for v in logprobs]}, separators=(",", ":")).encode()


@pytest.mark.parametrize("block", [
    b'{"sampled":[-0.01,-0.02,-0.03]}',  # vLLM's sampled list alone: SkyRL reads no logprobs
    b'{"content":null,"sampled":[-0.01,-0.02,-0.03]}',
    b'{"s\\u0061mpled":[-0.01,-0.02,-0.03]}',  # the same key spelled with an escape
    b'{"content":[],"sampled":[-0.01,-0.02,-0.03]}',
])
@pytest.mark.parametrize("routes", [False, True])
def test_logprobs_skyrl_does_not_read_are_left_to_skyrl(block, routes, kernels):
    """SkyRL reads ``logprobs.content`` alone: logprobs the reader would take from another
    transport are not SkyRL's, and the body is left to SkyRL's read (then refused when they
    were asked for: test_a_completion_without_logprobs_is_refused_when_they_were_asked_for)."""
    raw = skyrl_body(values(3), routes=routes)
    assert _content(values(3)) in raw
    raw = raw.replace(_content(values(3)), block, 1)
    assert not json.loads(raw)["choices"][0]["logprobs"].get("content")
    assert read_document(raw) is None


def test_packed_logprobs_beside_the_records_are_left_to_skyrl(kernels):
    """The reader takes a choice's logprobs from ``completion_logprobs`` before ``logprobs``
    (the two need only agree within its tolerance); SkyRL reads the records."""
    import base64

    packed = np.array(values(3)) * (1 + 1e-9)
    envelope = {"data": base64.b64encode(packed.tobytes()).decode(), "dtype": "float64", "shape": [3]}
    raw = skyrl_body(values(3)).replace(b'"finish_reason"', b'"completion_logprobs":' + json.dumps(envelope).encode()
                                        + b',"finish_reason"', 1)
    assert read_document(raw) is None


def test_an_envelope_of_no_rows_in_the_body_is_no_stand_in(kernels):
    """The envelope the reader is given in place of the routing has a shape drawn for the
    call: an envelope of no rows the body holds itself, a second one in the choice or the
    choice's own beside one elsewhere, is not taken for it (SkyRL's read refuses both)."""
    raw = skyrl_body(values(3), routes=True)
    second = raw.replace(b'"rollout_sample_support":null}', b'"rollout_sample_support":null,'
                         b'"routed_experts": {"data": "","shape":[0,1,1],"dtype":"uint8"}}', 1)
    assert second != raw and read_document(second) is None
    envelope = raw[raw.index(b'"routed_experts":'):raw.index(b',"rollout_sample_support"')]
    elsewhere = (b"{" + envelope + b"," + raw[1:]).replace(
        b"," + envelope + b",", b',"routed_experts":{"shape":[0,1,1],"dtype":"uint8","data":""},', 1)
    assert json.loads(elsewhere)["choices"][0]["routed_experts"]["shape"] == [0, 1, 1]
    assert read_document(elsewhere) is None
    assert read_document(raw) is not None


@pytest.mark.parametrize("routes", [False, True])
def test_the_transport_keys_are_found_by_their_m(routes, kernels):
    """Another transport's key is found by the "m" each holds 3 bytes in: other words with an
    "m" (a usage block, a prompt's text) leave the body read from its bytes, a body with more
    "m" bytes than are looked at is SkyRL's read, and the routing's base64 is not searched."""
    raw = skyrl_body(values(3), routes=routes)
    usage = raw.replace(b'{"choices"', b'{"usage":{"completion_tokens":3},"prompt":"' + b"m" * 50 + b'","choices"', 1)
    assert read_document(usage)[1].tolist() == values(3)
    many = raw.replace(b'{"choices"', b'{"prompt":"' + b"m " * (compat._M_LIMIT + 1) + b'","choices"', 1)
    assert read_document(many) is None
    for key in (b'"sampled"', b'"completion_logprobs"', b'"compact_logprobs"'):
        named = raw.replace(b'{"choices"', b'{"prompt":' + key + b',"choices"', 1)  # a string, SkyRL's read all the same
        assert read_document(named) is None
    if routes:  # a routing whose base64 is 8000 "m" (more than are looked at): not searched
        data = base64.b64encode(b"\x9a\x69\xa6" * 2000)
        assert data == b"m" * 8000
        routed = raw.replace(b'"AAECAwQFBgc=","shape":[2,2,2]', b'"' + data + b'","shape":[1000,2,3]', 1)
        document, read = read_document(routed)
        assert bytes(document["choices"][0]["routed_experts"]["data"]) == data and read.tolist() == values(3)
