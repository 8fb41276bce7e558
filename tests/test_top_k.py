"""vLLM's packed top-k (``logprobs.top_k``, ``return_top_k_logprobs``) beside the sampled
logprobs of ``logprobs.sampled``: heads on both implementations and every SIMD path, every
malformed form refused where it is, the writer's round trip."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError, samples

INF = math.inf
L = math.log


def b64(array: np.ndarray) -> str:
    return base64.b64encode(array.tobytes()).decode("ascii")


def vllm_top_k(ids: Any, logprobs: Any) -> dict[str, Any]:
    """The block as vLLM's encoder lays it out: ``num_positions`` rows of ``k`` candidates,
    row-major, in engine order, ids base64 int32 and logprobs base64 raw float32 (``-inf``
    kept, never clamped to -9999)."""
    ids = np.asarray(ids, dtype="<i4")
    return {"num_positions": ids.shape[0], "k": ids.shape[1], "token_ids": b64(ids),
            "logprobs": b64(np.asarray(logprobs, dtype="<f4"))}


# Three tokens, five candidates each. Token 0: {5: .5, 9: .25, 1: .125, 2: .0625} and one
# filtered out; token 1: the sampled 6 at .5 and a tie at the second place; token 2: 7 alone
# kept by the sampler, every other candidate at -inf.
TOKENS = [5, 6, 7]
IDS = [[5, 9, 1, 2, 3], [6, 4, 8, 10, 11], [7, 1, 2, 3, 4]]
LPS = [[L(0.5), L(0.25), L(0.125), L(0.0625), -INF],
       [L(0.5), L(0.2), L(0.2), L(0.05), L(0.05)],
       [0.0, -INF, -INF, -INF, -INF]]
SAMPLED = [float(np.float32(row[0])) for row in LPS]


def body(block: Any = None, *, sampled: Any = SAMPLED, extra: Any = None, logprobs: Any = None) -> bytes:
    if logprobs is None:
        logprobs = {"content": None, "sampled": sampled,
                    "top_k": vllm_top_k(IDS, LPS) if block is None else block}
    choice = {"index": 0, "token_ids": list(TOKENS), "logprobs": logprobs, "finish_reason": "stop"}
    choice.update(extra or {})
    return json.dumps({"request_id": "r", "choices": [choice]}).encode()


def fails(impl, raw: bytes, top_k: int | None = 2) -> MalformedResponseError:
    with pytest.raises(MalformedResponseError) as info:
        impl.parse_generate_response(raw, top_k=top_k)
    return info.value


def test_heads_from_packed_rows(impl):
    choice = impl.parse_generate_response(body(), top_k=2).choices[0]
    assert choice.completion_logprobs.tolist() == SAMPLED
    # Token 1's second place is tied: both tied candidates are left out. Token 2: -inf is a
    # filtered candidate, as the sentinel is.
    assert choice.completion_top_ids.to_lists() == [[5, 9], [6], [7]]
    f32 = lambda x: float(np.float32(x))  # noqa: E731
    assert choice.completion_top_logprobs.to_lists() == [[f32(L(0.5)), f32(L(0.25))], [f32(L(0.5))], [0.0]]
    assert "logprobs" not in choice.raw


def test_heads_equal_the_native_records_of_the_same_candidates(impl):
    """One set of candidates, sent as native records (filtered ones at the sentinel) and as
    packed rows (at -inf): the same heads."""
    for seed in range(6):
        ev = samples.evidence(40, 12, seed=seed, support=False, width=20)
        packed = samples.build_choice(ev, transport="top_k")
        native = samples.build_choice(ev, transport="native")
        for k in (1, 5, 10):
            heads = []
            for choice in (packed, native):
                raw = json.dumps({"choices": [choice]}).encode()
                try:
                    got = impl.parse_generate_response(raw, top_k=k).choices[0]
                    heads.append((got.completion_top_ids.to_lists(), np.float32(got.completion_top_logprobs.values).tolist()))
                except MalformedResponseError as exc:
                    heads.append((exc.reason, exc.token))
            assert heads[0] == heads[1], (seed, k)


def test_without_a_head_the_block_is_still_checked(impl):
    choice = impl.parse_generate_response(body(), top_k=None).choices[0]
    assert choice.completion_top_ids is None
    lps = np.array(LPS, dtype=np.float32)
    lps[1, 3] = np.nan
    error = fails(impl, body(vllm_top_k(IDS, lps)), top_k=None)
    assert (error.field, error.token) == ("logprobs.top_k.logprobs", 1)


def test_raw_keeps_the_block_as_sent_beside_another_transport(impl):
    """Packed sampled logprobs used, no head: ``logprobs`` (its sampled list and the packed
    rows) stays in raw exactly as sent, though the compiled scan blanked its big values."""
    logprobs = {"content": None, "sampled": SAMPLED, "top_k": vllm_top_k(IDS, LPS)}
    packed = {"data": b64(np.array(SAMPLED, dtype="<f4")), "shape": [3], "dtype": "float32"}
    raw = body(logprobs=logprobs, extra={"completion_logprobs": packed})
    choice = impl.parse_generate_response(raw).choices[0]
    assert choice.raw["logprobs"] == logprobs
    # With a head, the heads come from the packed rows, the sampled values from completion_logprobs.
    choice = impl.parse_generate_response(raw, top_k=2).choices[0]
    assert choice.completion_top_ids.to_lists() == [[5, 9], [6], [7]]
    assert "logprobs" not in choice.raw


def test_the_head_of_a_recorded_support(impl):
    mask = [[5, 9, 1, 2], [6, 4], [7]]  # token 0: .5 + .25 + .125 + .0625 is not 1
    error = fails(impl, body(extra={"sampling_mask": mask}))
    assert (error.reason, error.token) == ("Sampler probabilities must normalize over the recorded support", 0)
    lps = [[L(0.5), L(0.25), L(0.25), -INF, -INF], [L(0.5), L(0.5), -INF, -INF, -INF], [0.0, -INF, -INF, -INF, -INF]]
    mask = [[5, 9, 1], [6, 4], [7]]
    sampled = [float(np.float32(row[0])) for row in lps]
    choice = impl.parse_generate_response(body(vllm_top_k(IDS, lps), sampled=sampled, extra={"sampling_mask": mask}),
                                          top_k=1).choices[0]
    assert choice.completion_top_ids.to_lists() == [[5, 1, 9], [4, 6], [7]]  # ties: by id


def _with(**change: Any) -> dict[str, Any]:
    ids, lps = np.array(IDS, dtype=np.int64), np.array(LPS, dtype=np.float64)
    for (row, col), value in change.pop("ids", {}).items():
        ids[row, col] = value
    for (row, col), value in change.pop("lps", {}).items():
        lps[row, col] = value
    block = vllm_top_k(ids, lps)
    block.update(change)
    return block


@pytest.mark.parametrize(
    "block, field, token, reason",
    [
        ([], "logprobs.top_k", None, "must be an object"),
        (_with(num_positions=4), "logprobs.top_k.num_positions", None, "completion token count"),
        (_with(num_positions=True), "logprobs.top_k.num_positions", None, "completion token count"),
        (_with(k=True), "logprobs.top_k.k", None, "non-negative int"),
        (_with(k=-1), "logprobs.top_k.k", None, "non-negative int"),
        (_with(k=4), "logprobs.top_k.token_ids", None, "base64 of 12 int32"),
        (_with(k=2**62), "logprobs.top_k.k", None, "non-negative int"),
        (_with(token_ids=b64(np.zeros(14, "<i4"))), "logprobs.top_k.token_ids", None, "base64 of 15 int32"),
        (_with(token_ids="AAAA="), "logprobs.top_k.token_ids", None, "base64"),
        (_with(token_ids=[5, 9]), "logprobs.top_k.token_ids", None, "base64"),
        (_with(logprobs=b64(np.zeros(15, "<f8"))), "logprobs.top_k.logprobs", None, "base64 of 15 float32"),
        (_with(ids={(1, 2): -3}), "logprobs.top_k.token_ids", 1, "nonnegative token id"),
        (_with(lps={(2, 0): math.nan}), "logprobs.top_k.logprobs", 2, "NaN or positive"),
        (_with(lps={(0, 4): 0.5}), "logprobs.top_k.logprobs", 0, "NaN or positive"),
        (_with(lps={(0, 4): INF}), "logprobs.top_k.logprobs", 0, "NaN or positive"),
        (_with(ids={(1, 4): 6}), "logprobs.top_k.token_ids", 1, "Duplicate top logprob token id"),
        # The sampled token's candidate at -inf: it disagrees with its sampled logprob.
        (_with(lps={(2, 0): -INF}), "logprobs.top_k", 2, "Sampler head and sampled-token logprob disagree"),
    ],
)
def test_malformed_blocks(impl, block, field, token, reason):
    error = fails(impl, body(block))
    assert (error.choice, error.field, error.token) == (0, field, token)
    assert reason in error.reason


def test_rows_need_the_sampled_logprobs(impl):
    error = fails(impl, body(logprobs={"content": None, "top_k": vllm_top_k(IDS, LPS)}))
    assert error.field == "logprobs.content"  # no sampled logprobs in any transport
    packed = {"data": b64(np.array(SAMPLED, dtype="<f4")), "shape": [3], "dtype": "float32"}
    choice = impl.parse_generate_response(
        body(logprobs={"content": None, "top_k": vllm_top_k(IDS, LPS)}, extra={"completion_logprobs": packed}),
        top_k=2).choices[0]
    assert choice.completion_top_ids.to_lists() == [[5, 9], [6], [7]]


def test_too_few_candidates_for_the_head(impl):
    error = fails(impl, body(), top_k=4)  # k + 2 = 6 candidates needed, 5 sent
    assert error.reason.startswith("Engine returned fewer top logprobs than requested: a head of top_k=4 needs k + 2 = 6") and error.token == 0


# --- the writer ---------------------------------------------------------------------------------


@pytest.fixture
def writer(kernels):
    return kernels


_rows = st.integers(0, 6).flatmap(lambda n: st.integers(0, 7).flatmap(lambda k: st.tuples(
    st.lists(st.lists(st.integers(0, 2**31 - 1), min_size=k, max_size=k, unique=True), min_size=n, max_size=n),
    st.lists(st.lists(st.sampled_from([0.0, -0.5, -2.25, -INF, -9999.0, -1e-3]), min_size=k, max_size=k),
             min_size=n, max_size=n),
    st.just(k))))


@settings(max_examples=60)
@given(_rows)
def test_writer_round_trip(writer, rows):
    ids, lps, k = rows
    shape = (len(ids), k)
    block = tokenwire.encode_top_k(np.array(ids, dtype=np.int64).reshape(shape), np.array(lps).reshape(shape))
    text = json.dumps(block, default=str)  # a Blob is its base64 text
    sent = json.loads(text)
    assert sent["num_positions"] == len(ids) and sent["k"] == k
    back_ids = np.frombuffer(base64.b64decode(sent["token_ids"]), "<i4").reshape(shape)
    back_lps = np.frombuffer(base64.b64decode(sent["logprobs"]), "<f4").reshape(shape)
    assert back_ids.tolist() == np.array(ids, dtype=np.int64).reshape(shape).tolist()
    assert np.array_equal(back_lps, np.array(lps, dtype=np.float32).reshape(shape))
    # Read back as the engine's own response (the sampled token the first candidate).
    if len(ids) and k and all(row[0] > -9999.0 for row in lps):
        choice = {"token_ids": [row[0] for row in ids],
                  "logprobs": {"content": None, "sampled": [float(np.float32(row[0])) for row in lps], "top_k": sent}}
        raw = json.dumps({"choices": [choice]}).encode()
        try:
            writer.parse_generate_response(raw, top_k=1)
        except MalformedResponseError as exc:  # a head rule (too few, mass), never the block's
            assert not exc.field.startswith("logprobs.top_k.")


@pytest.mark.parametrize(
    "ids, lps, match",
    [
        ([[1, 1]], [[0.0, -1.0]], "Duplicate top logprob token id"),
        ([[1, 2]], [[0.0, math.nan]], "NaN or positive"),
        ([[1, 2]], [[0.0, 0.1]], "NaN or positive"),
        ([[1, 2]], [[0.0, -9999.0000001]], "becomes -9999.0 in float32"),
        ([[1, -2]], [[0.0, -1.0]], "token_ids"),
        ([1, 2], [0.0, -1.0], r"\(num_positions, k\)"),
        ([[1, 2]], [[0.0, -1.0, -2.0]], "shape"),
    ],
)
def test_writer_refuses_what_readers_refuse(writer, ids, lps, match):
    with pytest.raises((MalformedResponseError, ValueError), match=match):
        tokenwire.encode_top_k(np.array(ids), np.array(lps))


@pytest.mark.parametrize("k", [None, 2])
def test_a_block_beside_compact_rows_is_validated(impl, k):
    """A packed top-k block beside compact_logprobs used to be left unread, so any block was
    accepted; it is validated as beside every other transport (the heads are the compact
    rows'), with or without a head asked for."""
    ev = samples.evidence(3, 5, seed=1, support=False, width=5)
    choice = samples.build_choice(ev, transport="compact", num_top=4)
    garbage = dict(vllm_top_k(IDS, LPS), token_ids="not base64!")
    choice["logprobs"] = {"content": None, "top_k": garbage}
    error = fails(impl, json.dumps({"choices": [choice]}).encode(), top_k=k)
    assert (error.choice, error.field) == (0, "logprobs.top_k.token_ids"), error
