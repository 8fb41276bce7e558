"""The batch path: ``parse_many``/``aparse_many`` against a loop of single parses, and
``collate`` against padding each choice by hand, on both implementations."""

from __future__ import annotations

import asyncio
import functools
import pickle
import threading
import types
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import (
    GenerateChoice,
    GenerateResponse,
    MalformedResponseError,
    Ragged,
    RoutedExperts,
    samples,
)
from tokenwire.read import _select

from . import strategies
from .conftest import PYTHON, _core

# The batch kernels have one code path (no SIMD): the reference and the core, once each.
IMPLEMENTATIONS = [pytest.param(PYTHON, id="python"),
                   pytest.param(_core, id="c", marks=pytest.mark.skipif(_core is None, reason="no compiled core"))]
EXAMPLES = 30


@pytest.fixture(params=IMPLEMENTATIONS)
def batch_impl(request, monkeypatch):
    """The parsers and the kernels of one implementation, as the batch path reaches them."""
    monkeypatch.setattr(_select, "impl", request.param)
    monkeypatch.setattr(_select, "kernels", request.param)
    return request.param


# --- collate against padding by hand --------------------------------------------------------------


def _rows(items: list[Any]) -> list[tuple[int, GenerateResponse | None, GenerateChoice]]:
    rows = []
    for i, item in enumerate(items):
        if isinstance(item, GenerateResponse):
            rows += [(i, item, c) for c in item.choices]
        else:
            rows.append((i, None, item))
    return rows


def by_hand(items: list[Any], width: int | None = None, pad_id: int = 0, head_width: int | None = None,
            top_k: int | None = None) -> dict[str, Any]:
    """What collate must return, one token (and one head entry) at a time."""
    rows = _rows(items)
    B = len(rows)
    T = width if width is not None else max((len(c.completion_ids) for _, _, c in rows), default=0)
    out: dict[str, Any] = {}
    out["completion_ids"] = np.full((B, T), pad_id, dtype=np.int64)
    out["lengths"] = np.zeros(B, dtype=np.int64)
    out["mask"] = np.zeros((B, T), dtype=bool)
    for b, (_, _, c) in enumerate(rows):
        for t, token in enumerate(c.completion_ids.tolist()):
            out["completion_ids"][b, t] = token
            out["mask"][b, t] = True
        out["lengths"][b] = len(c.completion_ids)
    if any(c.completion_logprobs is not None for _, _, c in rows):
        out["completion_logprobs"] = np.zeros((B, T), dtype=np.float32)
        out["logprobs_present"] = np.array([c.completion_logprobs is not None for _, _, c in rows])
        for b, (_, _, c) in enumerate(rows):
            for t, lp in enumerate([] if c.completion_logprobs is None else c.completion_logprobs.tolist()):
                out["completion_logprobs"][b, t] = np.float32(lp)
    if any(c.completion_top_ids is not None for _, _, c in rows):
        heads = [[] if c.completion_top_ids is None else
                 [list(zip(c.completion_top_ids[t].tolist(), c.completion_top_logprobs[t].tolist()))
                  for t in range(len(c.completion_ids))] for _, _, c in rows]
        widest = max((len(h) for rows_ in heads for h in rows_), default=0)
        K = head_width if head_width is not None else widest if top_k is None else top_k
        out["completion_top_ids"] = np.full((B, T, K), pad_id, dtype=np.int64)
        out["completion_top_logprobs"] = np.full((B, T, K), -np.inf, dtype=np.float32)
        out["completion_top_lengths"] = np.zeros((B, T), dtype=np.int64)
        out["completion_top_truncated"] = np.zeros((B, T), dtype=bool)
        out["heads_present"] = np.array([c.completion_top_ids is not None for _, _, c in rows])
        for b, choice_heads in enumerate(heads):
            for t, head in enumerate(choice_heads):
                out["completion_top_truncated"][b, t] = len(head) > K
                head = head[:K]  # the K best: heads come ranked
                out["completion_top_lengths"][b, t] = len(head)
                for j, (i, lp) in enumerate(head):
                    out["completion_top_ids"][b, t, j] = i
                    out["completion_top_logprobs"][b, t, j] = np.float32(lp)
    if any(c.sampling_mask is not None for _, _, c in rows):
        kept: list[list[int]] = []
        out["sampling_mask_present"] = np.zeros((B, T), dtype=bool)
        for b, (_, _, c) in enumerate(rows):
            for t in range(T):
                row = c.sampling_mask[t].tolist() if c.sampling_mask is not None and t < len(c.completion_ids) else []
                kept.append(row)
                if c.sampling_mask is not None and t < len(c.completion_ids):
                    flags = c.sampling_mask_present
                    out["sampling_mask_present"][b, t] = bool(flags[t]) if flags is not None else bool(row)
        out["sampling_mask"] = kept
    routed = [c.routed_experts for _, _, c in rows]
    if any(r is not None for r in routed):
        present = [r.array for r in routed if r is not None]
        R = max(a.shape[0] for a in present)
        dtype = np.result_type(*{a.dtype for a in present}, np.int8)  # signed, for the fill
        out["routed_experts"] = np.full((B, R, *present[0].shape[1:]), -1, dtype=dtype)
        for b, r in enumerate(routed):
            for row in range(0 if r is None else r.array.shape[0]):
                out["routed_experts"][b, row] = r.array[row]
        out["routed_experts_lengths"] = np.array([0 if r is None else r.array.shape[0] for r in routed])
        out["routed_experts_start"] = np.array([-1 if r is None or r.start is None else r.start for r in routed])
        out["routed_experts_present"] = np.array([r is not None for r in routed])
    prompts = [None if r is None else r.prompt_token_ids for _, r, _ in rows]
    if any(p is not None for p in prompts):
        P = max(len(p) for p in prompts if p is not None)
        out["prompt_token_ids"] = np.full((B, P), pad_id, dtype=np.int64)
        for b, p in enumerate(prompts):
            for j, token in enumerate([] if p is None else p.tolist()):
                out["prompt_token_ids"][b, j] = token
        out["prompt_lengths"] = np.array([0 if p is None else len(p) for p in prompts])
        out["prompt_present"] = np.array([p is not None for p in prompts])
    out["response"] = np.array([i for i, _, _ in rows], dtype=np.int64)
    out["choice"] = np.array([c.index for _, _, c in rows], dtype=np.int64)
    return out


FIELDS = ("completion_ids", "lengths", "mask", "completion_logprobs", "logprobs_present", "completion_top_ids",
          "completion_top_logprobs", "completion_top_lengths", "completion_top_truncated", "heads_present",
          "sampling_mask_present",
          "routed_experts", "routed_experts_lengths", "routed_experts_start", "routed_experts_present",
          "prompt_token_ids", "prompt_lengths", "prompt_present", "response", "choice")


def assert_collated(batch: tokenwire.Batch, want: dict[str, Any]) -> None:
    for name in FIELDS:
        got = getattr(batch, name)
        if name not in want:
            assert got is None, name
            continue
        expected = want[name]
        assert got is not None, name
        assert got.shape == expected.shape, (name, got.shape, expected.shape)
        if name in ("lengths", "routed_experts_lengths", "routed_experts_start", "prompt_lengths",
                    "completion_top_lengths", "response", "choice"):
            assert got.dtype == np.int64, name
        else:
            assert got.dtype == expected.dtype, (name, got.dtype, expected.dtype)
        np.testing.assert_array_equal(got, expected, err_msg=name)
        assert got.flags.c_contiguous, name
    if "sampling_mask" in want:
        assert batch.sampling_mask.values.dtype == np.int32
        assert batch.sampling_mask.to_lists() == want["sampling_mask"]
    else:
        assert batch.sampling_mask is None


def _ragged(rows: list[list[Any]], dtype: Any, draw: Any) -> Ragged:
    """``rows`` as a Ragged whose values may have room before and after the rows."""
    before, after = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    flat = [v for r in rows for v in r]
    values = np.array([0] * before + flat + [0] * after, dtype=dtype)
    offsets = before + np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    return Ragged(offsets, values)


@st.composite
def hand_choices(draw, index: int, entry: tuple[int, int]) -> GenerateChoice:
    """A choice built by hand: every field present or not, every dtype a parser returns."""
    n = draw(st.integers(0, 5))
    ids = np.array(draw(st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n)), dtype=np.int64)
    lp_dtype = draw(st.sampled_from([None, np.float32, np.float64]))
    logprobs = None
    if lp_dtype is not None:
        logprobs = np.array(draw(st.lists(st.floats(-30, 0), min_size=n, max_size=n)), dtype=lp_dtype)
    top_ids = top_lps = None
    if draw(st.booleans()):
        sizes = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
        top_ids = _ragged([list(range(7, 7 + s)) for s in sizes], np.int64, draw)
        head_lps = [[-float(j) - 0.5 for j in range(s)] for s in sizes]
        top_lps = _ragged(head_lps, draw(st.sampled_from([np.float32, np.float64])), draw)
    mask = present = None
    if draw(st.booleans()):
        kept = [draw(st.lists(st.integers(0, 2**31 - 1), max_size=3)) for _ in range(n)]
        mask = _ragged(kept, np.int32, draw)
        if draw(st.booleans()):  # kept_tokens: an empty row is a token without a kept set
            present = np.array([bool(r) for r in kept], dtype=bool)
    routed = None
    if draw(st.booleans()):
        dtype = draw(st.sampled_from([np.uint8, np.uint16, np.int16, np.int32]))
        rows = draw(st.integers(0, 6))
        array = np.arange(rows * entry[0] * entry[1], dtype=np.int64).reshape(rows, *entry) % 100
        routed = RoutedExperts(array.astype(dtype), start=draw(st.sampled_from([None, 0, 3])))
    return GenerateChoice(index, ids, logprobs, top_ids, top_lps, mask, routed, draw(st.sampled_from(["stop", None])),
                          {}, present)


@st.composite
def hand_batches(draw) -> list[Any]:
    entry = draw(st.sampled_from([(1, 1), (2, 3)]))
    items: list[Any] = []
    for i in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            items.append(draw(hand_choices(i, entry)))
            continue
        choices = [draw(hand_choices(j, entry)) for j in range(draw(st.integers(1, 3)))]
        prompt = None
        if draw(st.booleans()):
            prompt = np.array(draw(st.lists(st.integers(0, 2**32 - 1), max_size=4)), dtype=np.int64)
        items.append(GenerateResponse(choices, f"r{i}", None, prompt, {}))
    return items


@pytest.fixture
def split_everything(monkeypatch):
    """collate fills every array on its threads, however small."""
    monkeypatch.setattr(tokenwire.batch._batch, "_SPLIT_BYTES", 0)


@settings(max_examples=EXAMPLES * 2)
@given(items=hand_batches(), extra=st.integers(0, 2), pad_id=st.sampled_from([0, -1, 151_643]),
       threads=st.sampled_from([1, 2, 3]))
def test_collate_equals_padding_by_hand(batch_impl, split_everything, items, extra, pad_id, threads):
    """Choices built by hand (every field present or absent, every dtype, offsets not
    starting at 0): collate equals the token-by-token padding, at the natural width and wider,
    on one thread or several."""
    want = by_hand(items, pad_id=pad_id)
    assert_collated(tokenwire.collate(items, pad_id=pad_id, threads=threads), want)
    width = want["completion_ids"].shape[1] + extra
    assert_collated(tokenwire.collate(items, width=width, pad_id=pad_id, threads=threads),
                    by_hand(items, width=width, pad_id=pad_id))


@st.composite
def parsed_batches(draw) -> tuple[list[bytes], int | None]:
    """Response bodies of every transport, with masks (kept_tokens rows without a kept set),
    routing (uint8 and uint16), several choices, and the one top_k they are parsed with."""
    k = draw(st.sampled_from([None, 1, 3, 5]))
    bodies = []
    for r in range(draw(st.integers(1, 3))):
        chosen = [draw(strategies.choices(i, k)) for i in range(draw(st.integers(1, 3)))]
        document = samples.response(chosen, prompt_tokens=draw(st.integers(0, 4)), seed=r)
        bodies.append(samples.dumps(document))
    return bodies, k


@settings(max_examples=EXAMPLES)
@given(case=parsed_batches())
def test_collate_of_parsed_responses_equals_padding_by_hand(batch_impl, case):
    bodies, k = case
    responses = []
    for body in bodies:
        try:
            responses.append(batch_impl.parse_generate_response(body, top_k=k))
        except MalformedResponseError:
            pass  # generated evidence the rules refuse: not this test's subject
    batch = tokenwire.collate(responses)
    assert_collated(batch, by_hand(responses, top_k=k))
    assert batch.format == ("generate" if responses else None) and batch.top_k == (k if responses else None)
    if k is not None and responses:
        assert batch.completion_top_ids.shape[2] >= k  # top_k wide at least: one shape per setting


def test_sample_workloads_collate_by_hand(batch_impl):
    """The embedded samples: heads with sampling masks wider than top_k, MoE routing over the
    prompt and the completion, several choices."""
    raws = [samples.sample("multi_choice"), samples.WORKLOADS["compact_top20_4k_mask"].responses(1)[0]]
    responses = [batch_impl.parse_generate_response(raw, top_k=4) for raw in raws]
    batch = tokenwire.collate(responses)
    assert_collated(batch, by_hand(responses, top_k=4))
    # A recorded support wider than top_k keeps its 4 best, flagged: K is top_k whatever the data.
    assert batch.completion_top_ids.shape[2] == 4 and batch.completion_top_truncated.any()
    wide = tokenwire.collate(responses, head_width=64)
    assert wide.completion_top_ids.shape[2] == 64 and not wide.completion_top_truncated.any()
    np.testing.assert_array_equal(wide.completion_top_ids[:, :, :4], batch.completion_top_ids)
    moe = batch_impl.parse_generate_response(samples.moe_response(64, 16, seed=2))
    batch = tokenwire.collate([moe, moe.choices[0]], pad_id=-1)
    assert_collated(batch, by_hand([moe, moe.choices[0]], pad_id=-1))
    # Routing rows as sent: the prompt's positions and the completion's but its last token.
    assert batch.routed_experts.shape == (2, 63, 48, 8)
    assert batch.routed_experts_start.tolist() == [0, 0]
    assert batch.prompt_present.tolist() == [True, False]  # a bare choice has no prompt


# --- what collate refuses ----------------------------------------------------------------------


BODY = b'{"choices":[{"token_ids":[5,6],"logprobs":{"sampled":[-0.5,-1.0]}}],"prompt_token_ids":[1,2,3]}'
COMPLETIONS = (b'{"choices":[{"index":0,"token_ids":[5,6],"logprobs":'
               b'{"tokens":["a","b"],"token_logprobs":[-0.1,-0.2]}}]}')


def _heads_body(n: int = 3) -> bytes:
    ev = samples.evidence(n, 6, seed=1)
    return samples.dumps(samples.response([samples.build_choice(ev, transport="compact")], prompt_tokens=2))


def test_mixed_formats_are_refused(batch_impl):
    generate = tokenwire.parse_generate_response(BODY)
    completions = tokenwire.parse_completions_response(COMPLETIONS)
    with pytest.raises(ValueError, match=r"mixes formats: item 0 is a 'generate' response and item 1 a 'completions'"):
        tokenwire.collate([generate, completions])
    tokenwire.collate([generate, completions.choices[0]])  # a bare choice carries no format


def test_heads_of_different_top_k_are_refused(batch_impl):
    body = _heads_body()
    with pytest.raises(ValueError, match=r"item 1 was parsed with top_k=2 and item 0 with top_k=4: heads of different"):
        tokenwire.collate(tokenwire.parse_many([body], top_k=4) + tokenwire.parse_many([body], top_k=2))
    with pytest.raises(ValueError, match=r"top_k=None and item 0 with top_k=4"):
        tokenwire.collate([tokenwire.parse_generate_response(body, top_k=4), tokenwire.parse_generate_response(body)])


def test_widths_shorter_than_the_rows_are_refused(batch_impl):
    responses = tokenwire.parse_many([_heads_body(3), _heads_body(5)], top_k=4)
    with pytest.raises(ValueError, match=r"choice 1 has 5 tokens, more than width=4 \(nothing is cut\)"):
        tokenwire.collate(responses, width=4)
    narrow = tokenwire.collate(responses, head_width=3)  # heads are cut to their 3 best, and say so
    assert narrow.completion_top_ids.shape == (2, 5, 3) and narrow.completion_top_lengths.max() == 3
    assert narrow.completion_top_truncated.tolist() == (tokenwire.collate(responses).completion_top_lengths > 3).tolist()
    with pytest.raises(ValueError, match=r"choice 0's prompt has 2 prompt ids, more than prompt_width=1"):
        tokenwire.collate(responses, prompt_width=1)
    assert tokenwire.collate(responses, head_width=6).completion_top_ids.shape == (2, 5, 6)
    moe = tokenwire.parse_generate_response(samples.moe_response(8, 4))
    with pytest.raises(ValueError, match=r"routing has 7 routing rows, more than routing_width=6"):
        tokenwire.collate([moe], routing_width=6)
    with pytest.raises(ValueError, match=r"width must be in"):
        tokenwire.collate(responses, width=-1)


def test_choices_that_do_not_fit_together_are_refused(batch_impl):
    base = tokenwire.parse_generate_response(_heads_body(3), top_k=4).choices[0]
    ids, lps = base.completion_top_ids, base.completion_top_logprobs
    cases = {
        "has 2 logprobs for 3 tokens": dict(completion_logprobs=base.completion_logprobs[:2]),
        "has head ids only": dict(completion_top_logprobs=None),
        "completion_top_ids has 2 rows for 3 tokens": dict(completion_top_ids=ids[:2]),
        "differ in length at token 0": dict(completion_top_logprobs=Ragged(
            np.array([0, 1, 1 + ids.lengths()[1], len(lps.values)]), lps.values)),
        "completion_top_ids offsets do not fit its values": dict(completion_top_ids=Ragged(
            ids.offsets + 1, ids.values)),
        "sampling_mask has 0 rows for 3 tokens": dict(sampling_mask=Ragged(np.zeros(1, np.int64),
                                                                           np.zeros(0, np.int32))),
        "must be a 1-D array of integers": dict(completion_ids=base.completion_ids.astype(float)),
    }
    for message, change in cases.items():
        choice = GenerateChoice(**{**base.__dict__, **change})
        with pytest.raises((ValueError, TypeError), match=message):
            tokenwire.collate([choice])
    one = RoutedExperts(np.zeros((2, 3, 4), np.uint8))
    other = RoutedExperts(np.zeros((2, 3, 5), np.uint8))
    with pytest.raises(ValueError, match=r"routed_experts of different \(layers, topk\)"):
        tokenwire.collate([GenerateChoice(**{**base.__dict__, "routed_experts": r}) for r in (one, other)])
    with pytest.raises(TypeError, match="not bytes"):
        tokenwire.collate([b"{}"])


def test_errors_name_the_choice_on_any_thread(batch_impl, split_everything):
    good = tokenwire.parse_generate_response(_heads_body(3), top_k=4).choices[0]
    ids = good.completion_top_ids
    bad = GenerateChoice(**{**good.__dict__, "completion_top_ids": Ragged(ids.offsets + 1, ids.values)})
    with pytest.raises(ValueError, match="choice 3's completion_top_ids offsets do not fit its values"):
        tokenwire.collate([good, good, good, bad], threads=2)


def test_absent_fields(batch_impl):
    """A field no choice has is None; a field some choices lack is filled and flagged."""
    with_lps = tokenwire.parse_generate_response(BODY)
    without = tokenwire.parse_generate_response(b'{"choices":[{"token_ids":[9,9,9],"logprobs":null}]}',
                                                require_logprobs=False)
    batch = tokenwire.collate([with_lps, without])
    assert batch.logprobs_present.tolist() == [True, False]
    assert batch.completion_logprobs.tolist() == [[-0.5, -1.0, 0.0], [0.0, 0.0, 0.0]]
    assert batch.prompt_present.tolist() == [True, False] and batch.prompt_token_ids.tolist() == [[1, 2, 3], [0] * 3]
    assert batch.completion_top_ids is None and batch.sampling_mask is None and batch.routed_experts is None
    alone = tokenwire.collate([without])
    assert alone.completion_logprobs is None and alone.logprobs_present is None and alone.prompt_token_ids is None


# --- exports ------------------------------------------------------------------------------------


def test_to_torch_shares_the_arrays():
    torch = pytest.importorskip("torch")
    batch = tokenwire.collate(tokenwire.parse_many([samples.sample("multi_choice")], top_k=4))
    tensors = batch.to_torch()
    arrays = batch.arrays()
    assert set(arrays) <= set(tensors) and "sampling_mask_values" in tensors
    # Every field is a key, None where the batch lacks it: the same keys for every batch.
    assert tensors["routed_experts"] is None and tensors["completion_routed_experts"] is None
    routed = tokenwire.collate([tokenwire.parse_generate_response(samples.moe_response(8, 4))]).to_torch()
    assert set(routed) == set(tensors) and routed["completion_top_ids"] is None
    for name, tensor in tensors.items():
        if name not in arrays:
            assert tensor is None, name
            continue
        assert tensor.data_ptr() == arrays[name].ctypes.data or not arrays[name].size, name
        assert tuple(tensor.shape) == arrays[name].shape
    assert tensors["completion_top_logprobs"].dtype == torch.float32 and tensors["mask"].dtype == torch.bool
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError):  # page-locked memory needs CUDA
            batch.to_torch(pin_memory=True)


def test_to_arrow_stores_the_batch(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    import json

    without = tokenwire.parse_generate_response(b'{"choices":[{"token_ids":[9],"logprobs":null}]}',
                                                require_logprobs=False)
    batch = tokenwire.collate([tokenwire.parse_generate_response(samples.moe_response(8, 4)), without])
    record = batch.to_arrow()
    assert record.num_rows == 2 and "mask" not in record.schema.names
    column = record.column("completion_ids")
    assert column.values.buffers()[1].address == batch.completion_ids.ctypes.data  # no copy
    assert record.column("completion_logprobs").null_count == 1
    assert record.column("routed_experts").to_pylist()[1] is None
    pq.write_table(pa.Table.from_batches([record]), tmp_path / "batch.parquet")
    back = pq.read_table(tmp_path / "batch.parquet")
    routing = np.array(back.column("routed_experts").to_pylist()[0], dtype=batch.routed_experts.dtype)
    np.testing.assert_array_equal(routing, batch.routed_experts[0])
    meta = json.loads(back.schema.metadata[b"tokenwire.batch"])
    assert meta["widths"]["routed_experts"] == 7 and meta["routing_entry"] == [48, 8] and meta["format"] == "generate"
    empty = tokenwire.collate([]).to_arrow()
    assert empty.num_rows == 0


# --- parse_many against a loop of single parses --------------------------------------------------


def _outcome(parse: Any, body: bytes) -> Any:
    try:
        return parse(body)
    except MalformedResponseError as exc:
        return exc


def assert_same(got: Any, want: Any) -> None:
    if isinstance(want, MalformedResponseError):
        assert type(got) is type(want) and str(got) == str(want)
        return
    assert isinstance(got, GenerateResponse)
    assert (got.request_id, got.usage, got.format, got.top_k) == (want.request_id, want.usage, want.format, want.top_k)
    np.testing.assert_array_equal(got.prompt_token_ids, want.prompt_token_ids)
    assert len(got.choices) == len(want.choices)
    for a, b in zip(got.choices, want.choices):
        for name in ("completion_ids", "completion_logprobs", "sampling_mask_present"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        for name in ("completion_top_ids", "completion_top_logprobs", "sampling_mask"):
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None) == (y is None) and (x is None or x.to_lists() == y.to_lists())
        assert (a.routed_experts is None) == (b.routed_experts is None)


@st.composite
def bodies(draw) -> tuple[list[bytes], int | None]:
    """Valid and malformed bodies (bad at random positions), parsed with one top_k."""
    k = draw(st.sampled_from([None, 2, 5]))
    chosen = [draw(strategies.cases()).raw for _ in range(draw(st.integers(0, 8)))]
    return chosen, k


@settings(max_examples=EXAMPLES)
@given(case=bodies(), threads=st.sampled_from([1, 2, 3, 8]))
def test_parse_many_equals_a_loop(batch_impl, case, threads):
    raws, k = case
    single = functools.partial(batch_impl.parse_generate_response, top_k=k)
    want = [_outcome(single, raw) for raw in raws]
    got = tokenwire.parse_many(raws, top_k=k, threads=threads, errors="collect")
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w)
        if isinstance(g, MalformedResponseError):
            assert g.body_index == i and f"in body {i} of the batch" in g.__notes__
    failures = [i for i, w in enumerate(want) if isinstance(w, MalformedResponseError)]
    if failures:
        with pytest.raises(MalformedResponseError) as caught:
            tokenwire.parse_many(raws, top_k=k, threads=threads)
        assert caught.value.body_index == failures[0] and str(caught.value) == str(want[failures[0]])
    else:
        for g, w in zip(tokenwire.parse_many(raws, top_k=k, threads=threads), want):
            assert_same(g, w)


def test_parse_many_formats(batch_impl):
    sglang = b'{"output_ids":[5,6],"meta_info":{"output_token_logprobs":[[-0.1,5,null],[-0.2,6,null]]}}'
    chat = b'{"choices":[{"index":0,"token_ids":[5],"logprobs":{"content":[{"token":"a","logprob":-0.1}]}}]}'
    for format, raw, parser in (("completions", COMPLETIONS, "parse_completions_response"),
                                ("chat", chat, "parse_chat_completions_response"),
                                ("sglang", sglang, "parse_sglang_generate_response")):
        (got,) = tokenwire.parse_many([raw], format=format, check_usage=False)
        assert_same(got, getattr(batch_impl, parser)(raw, check_usage=False))
        assert got.format == format


def test_the_error_keeps_its_index_through_pickling():
    (error,) = tokenwire.parse_many([b"{}"], errors="collect")
    again = pickle.loads(pickle.dumps(error))
    assert (again.body_index, again.field, str(again), again.__notes__) == (0, "choices", str(error), error.__notes__)


def _counting(monkeypatch) -> list[Any]:
    """The parsers, counting every body they are given."""
    calls: list[Any] = []
    real = _select.impl
    fake = types.SimpleNamespace()

    def counting(parse: Any) -> Any:
        @functools.wraps(parse)
        def counted(raw, **options):
            calls.append(raw)
            return parse(raw, **options)

        return counted

    for name in ("parse_generate_response", "parse_completions_response", "parse_chat_completions_response",
                 "parse_sglang_generate_response"):
        setattr(fake, name, counting(getattr(real, name)))
    monkeypatch.setattr(_select, "impl", fake)
    return calls


@pytest.mark.parametrize("arguments, error, message", [
    (dict(format="auto"), ValueError, "format must be one of"),
    (dict(threads=0), ValueError, r"threads must be in \[1, "),
    (dict(threads=2.0), TypeError, "threads must be an int"),
    (dict(threads=True), TypeError, "threads must be an int"),
    (dict(errors="ignore"), ValueError, "errors must be 'raise' or 'collect'"),
    (dict(topk=3), TypeError, r"unknown option for the generate parser: topk \(it takes top_k, "),
    (dict(format="sglang", require_sampling_mask=True), TypeError, "unknown option for the sglang parser"),
    (dict(top_k=0), ValueError, "top_k"),
    (dict(prompt_logprob_start=-1), ValueError, "prompt_logprob_start"),
])
def test_bad_arguments_raise_before_any_parse(monkeypatch, arguments, error, message):
    calls = _counting(monkeypatch)
    with pytest.raises(error, match=message):
        tokenwire.parse_many([BODY, BODY], **arguments)
    with pytest.raises(error, match=message):
        asyncio.run(tokenwire.aparse_many([BODY], **arguments))
    assert calls == []
    with pytest.raises(TypeError):
        tokenwire.parse_many([BODY, None])
    with pytest.raises(TypeError, match="a sequence of response bodies, not one body"):
        tokenwire.parse_many(BODY)
    assert calls == []


def test_no_body_is_started_after_a_failure(monkeypatch):
    calls = _counting(monkeypatch)
    with pytest.raises(MalformedResponseError):
        tokenwire.parse_many([BODY, b"{}", BODY, BODY], threads=1)
    assert len(calls) == 2


# --- the asyncio form --------------------------------------------------------------------------


def _gated(monkeypatch, gate: threading.Event) -> list[Any]:
    """parse_generate_response waiting for ``gate`` (set by a coroutine) before each parse."""
    calls: list[Any] = []
    real = _select.impl.parse_generate_response

    @functools.wraps(real)
    def parse(raw, **options):
        calls.append(raw)
        assert gate.wait(30), "the event loop was blocked while the bodies were parsed"
        return real(raw, **options)

    monkeypatch.setattr(_select, "impl", types.SimpleNamespace(parse_generate_response=parse))
    return calls


def test_aparse_many_leaves_the_event_loop_free(monkeypatch):
    """The parses cannot finish before a coroutine sets the gate: a parse on the event loop's
    thread would wait for it in vain."""
    gate = threading.Event()
    _gated(monkeypatch, gate)

    async def main() -> list[Any]:
        task = asyncio.create_task(tokenwire.aparse_many([BODY] * 4, threads=2))
        await asyncio.sleep(0.01)
        assert not task.done()
        gate.set()
        return await task

    results = asyncio.run(main())
    assert [r.choices[0].completion_ids.tolist() for r in results] == [[5, 6]] * 4


def test_cancelling_aparse_many_starts_no_new_body(monkeypatch):
    gate = threading.Event()
    calls = _gated(monkeypatch, gate)

    async def main() -> None:
        task = asyncio.create_task(tokenwire.aparse_many([BODY] * 50, threads=2))
        while len(calls) < 2:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    gate.set()
    for thread in threading.enumerate():
        if thread.name.startswith("tokenwire-"):
            thread.join(30)
    assert len(calls) == 2


def test_aparse_many_collects_and_raises():
    got = asyncio.run(tokenwire.aparse_many([BODY, b"[]"], errors="collect"))
    assert got[0].choices[0].completion_ids.tolist() == [5, 6] and got[1].body_index == 1
    with pytest.raises(MalformedResponseError, match="must be a JSON object"):
        asyncio.run(tokenwire.aparse_many([BODY, b"[]"]))


# --- threads ------------------------------------------------------------------------------------


def test_eight_threads_share_inputs(batch_impl):
    """Eight threads each parse the same body objects (parse_many on threads of its own) and
    collate the same responses: every result equals the single-threaded one."""
    small = [samples.build_choice(samples.evidence(200, 6, seed=s, support=True), transport="compact", mask="csr",
                                  index=s) for s in range(2)]
    raws = [samples.dumps(samples.response(small, prompt_tokens=16)), _heads_body(300)] * 3
    want = [batch_impl.parse_generate_response(raw, top_k=4) for raw in raws]
    want_batch = tokenwire.collate(want)
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def work() -> None:
        try:
            start.wait()
            got = tokenwire.parse_many(raws, top_k=4, threads=3)
            for g, w in zip(got, want):
                assert_same(g, w)
            batch = tokenwire.collate(want)
            for name, array in want_batch.arrays().items():
                np.testing.assert_array_equal(batch.arrays()[name], array, err_msg=name)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    for g, w in zip(tokenwire.parse_many(raws, top_k=4, threads=8), want):
        assert_same(g, w)


# --- the kernels, on arrays that do not fit ------------------------------------------------------


def test_kernels_agree_on_what_does_not_fit(batch_impl):
    k = batch_impl
    lengths = np.empty((1, 3), dtype=np.int64)
    for offsets, bad in (([0, 2, 1, 4], ("offsets", 0, 2)), ([-1, 0, 0, 0], ("offsets", 0, 0)),
                         ([0, 2, 3, 9], ("offsets", 0, 3)), ([0, 1, 2, 3], None)):
        assert k.ragged_lengths([np.array(offsets, np.int64)], [3], [5], lengths)[2] == bad
    assert k.ragged_lengths([np.arange(5, dtype=np.int64)], [4], [9], lengths)[2] == ("tokens", 0, None)
    with pytest.raises(ValueError):
        k.ragged_lengths([np.arange(3, dtype=np.int64)], [3], [9], lengths)
    out = np.empty((2, 2), dtype=np.int64)
    assert k.pad_rows([np.arange(2), np.arange(3)], out, 0) == 1
    with pytest.raises(TypeError):
        k.pad_rows([np.arange(2, dtype=np.int32), np.arange(1)], out, 0)
    first, lengths, _ = np.zeros(1, np.int64), np.array([[2, 3]], np.int64), None
    assert k.pad_ragged([np.arange(5)], first, lengths, np.empty((1, 2, 2), np.int64), 0) == 1
    with pytest.raises(ValueError, match="reach past the values"):
        k.pad_ragged([np.arange(4)], first, lengths, np.empty((1, 2, 3), np.int64), 0)
    odd = np.empty((1, 2), dtype="V3")  # items of any size
    k.pad_rows([np.frombuffer(b"abc", dtype="V3")], odd, np.frombuffer(b"xyz", dtype="V3")[0])
    assert odd.tobytes() == b"abcxyz"


@pytest.mark.parametrize("name", ["parse_many", "aparse_many", "collate", "parse_batch", "Batch"])
def test_docstring_examples_run(batch_impl, name):
    """The examples help() shows hold on both implementations."""
    import doctest

    test = doctest.DocTestParser().get_doctest(getattr(tokenwire, name).__doc__,
                                               {"tokenwire": tokenwire, "asyncio": asyncio}, name, None, 0)
    assert test.examples
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_out_reuses_the_arrays_of_an_earlier_batch(batch_impl):
    raws = [samples.sample("multi_choice"), samples.WORKLOADS["compact_top20_4k_mask"].responses(1)[0]]
    first = tokenwire.parse_many(raws[:1], top_k=4)
    second = tokenwire.parse_many(raws[1:] * 2, top_k=4)
    fixed = dict(width=4200, head_width=24, prompt_width=1024)
    earlier = tokenwire.collate(first + first[:0], **fixed)
    previous = earlier.arrays()
    batch = tokenwire.collate(second + second, out=earlier, **fixed)  # 4 rows, as the earlier batch
    want = tokenwire.collate(second + second, **fixed)
    for name, array in want.arrays().items():
        np.testing.assert_array_equal(batch.arrays()[name], array, err_msg=name)
    reused = {name for name, array in batch.arrays().items() if previous.get(name) is array}
    assert {"completion_ids", "mask", "completion_logprobs", "completion_top_ids", "completion_top_logprobs",
            "completion_top_lengths", "sampling_mask_present", "sampling_mask_offsets",
            "prompt_token_ids"} <= reused
    other = tokenwire.collate(second, out=batch)  # other shapes: new arrays
    assert not any(previous.get(name) is array for name, array in other.arrays().items())
    with pytest.raises(TypeError, match="out must be a Batch"):
        tokenwire.collate(second, out=batch.arrays())


# --- rows kept straight: errors skipped, routing aligned to the tokens -----------------------------


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["good", "two", "bad", "empty"]), max_size=12))
def test_collate_of_collected_errors_keeps_body_indexes(batch_impl, kinds):
    """parse_many(errors="collect") output goes to collate as it is: each row's response is the
    index of its body in the input, the errors' indexes are on the batch."""
    bodies = {"good": BODY, "two": samples.sample("multi_choice"),
              "bad": b'{"choices":[{"token_ids":[5,-1],"logprobs":{"sampled":[-0.5,-1.0]}}]}', "empty": b"{}"}
    parsed = tokenwire.parse_many([bodies[k] for k in kinds], errors="collect", threads=2)
    batch = tokenwire.collate(parsed)
    good = [i for i, k in enumerate(kinds) if k in ("good", "two")]
    want = [i for i in good for _ in range(4 if kinds[i] == "two" else 1)]
    assert batch.response.tolist() == want
    assert batch.skipped.tolist() == [i for i, k in enumerate(kinds) if k in ("bad", "empty")]
    for b, i in enumerate(want):  # each row holds its own body's tokens
        first = parsed[i].choices[batch.choice[b]].completion_ids
        assert batch.completion_ids[b, : len(first)].tolist() == first.tolist()
    assert tokenwire.collate([r for r in parsed if not isinstance(r, MalformedResponseError)]).skipped.tolist() == []


def test_routing_aligned_to_completion_tokens(batch_impl):
    """Completion token t's routing is row prompt + t - start; the last token has none; the
    fill is -1, which no expert id is (a uint8 id can be 255)."""
    rng = np.random.default_rng(4)
    choices = []
    for n, prompt, start in ((5, 3, 0), (4, 6, 2), (6, 2, 5), (3, 4, None)):
        rows = prompt + n - 1 - (start or 0)
        routing = rng.integers(0, 256, (rows, 2, 3)).astype(np.uint8)
        routing[0, 0, 0] = 255
        choices.append(tokenwire.validate(completion_ids=rng.integers(0, 50, n), completion_logprobs=np.zeros(n) - 1,
                                          routed_experts=routing, routed_experts_start=start,
                                          prompt_token_ids=rng.integers(0, 50, prompt)))
    bare = GenerateChoice(0, np.arange(4), None, routed_experts=tokenwire.RoutedExperts(np.zeros((3, 2, 3), np.uint8), 0))
    batch = tokenwire.collate([*choices, bare], routing="both", width=7)
    assert batch.routed_experts.dtype == np.int16 and (batch.routed_experts[0, 7:] == -1).all()
    assert batch.completion_routed_experts.shape == (5, 7, 2, 3)
    for b, c in enumerate(choices):
        n, offset = len(c.completion_ids), len(c.prompt_token_ids) - (c.routed_experts.start or 0)
        for t in range(7):
            row = offset + t
            has = t < n and 0 <= row < len(c.routed_experts.array)
            assert batch.completion_routed_present[b, t] == has, (b, t)
            want = c.routed_experts.array[row] if has else np.full((2, 3), -1)
            np.testing.assert_array_equal(batch.completion_routed_experts[b, t], want)
        assert not batch.completion_routed_present[b, n - 1]  # the last token is never forwarded
    assert not batch.completion_routed_present[4].any()  # no prompt: the rows cannot be placed
    tokens = tokenwire.collate(choices, routing="tokens")
    assert tokens.routed_experts is None and tokens.completion_routed_experts is not None
    # A fill the routing's dtype holds keeps it: uint8 stays one byte an entry.
    compact = tokenwire.collate(choices, routing="both", routing_fill=255, width=7)
    assert compact.routed_experts.dtype == compact.completion_routed_experts.dtype == np.uint8
    np.testing.assert_array_equal(compact.completion_routed_present, batch.completion_routed_present[:4])
    assert (compact.completion_routed_experts[~compact.completion_routed_present] == 255).all()
    with pytest.raises(ValueError, match="routing must be one of"):
        tokenwire.collate(choices, routing="aligned")
    # vLLM 0.21's split form: the choice's rows are its completion's, the prompt's apart
    split = GenerateResponse([choices[0]], None, None, np.arange(3), {},
                             prompt_routed_experts=tokenwire.RoutedExperts(np.zeros((3, 2, 3), np.uint8)))
    aligned = tokenwire.collate([split], routing="tokens")
    np.testing.assert_array_equal(aligned.completion_routed_experts[0, :4], choices[0].routed_experts.array[:4])

