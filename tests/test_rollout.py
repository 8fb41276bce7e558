"""The rollout accumulator: a trajectory appended turn by turn equals the same evidence
concatenated by hand, refuses every turn that contradicts it (and stays as it was), and a
step's trajectories become one Batch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError, Trajectory


@st.composite
def rollouts(draw):
    """Turns of a rollout: per turn, the tokens between the context and the completion (tool
    output, template), and the completion with its logprobs, maybe a mask and routing."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    with_routing = draw(st.booleans())
    with_mask = draw(st.booleans())
    first_prompt = rng.integers(0, 1000, draw(st.integers(1, 6))).tolist()
    turns = []
    for _ in range(draw(st.integers(1, 5))):
        extra = rng.integers(0, 1000, draw(st.integers(0, 4))).tolist()
        n = draw(st.integers(1, 6))
        ids = rng.integers(0, 1000, n).tolist()
        lps = (-rng.uniform(0, 3, n)).astype(np.float32).tolist()
        mask = [sorted({i, *rng.integers(0, 1000, rng.integers(0, 3)).tolist()}) for i in ids] if with_mask else None
        turns.append((extra, ids, lps, mask))
    return first_prompt, turns, with_routing, draw(st.integers(0, 3)), draw(st.booleans())


def build(kernels, first_prompt, turns, with_routing, start0, tools_apart):
    t = Trajectory(first_prompt)
    context = list(first_prompt)
    routing_end = start0
    layers, topk = 2, 3
    for extra, ids, lps, mask in turns:
        if tools_apart and extra:
            t.append_tokens(extra)
        prompt = context + extra
        routed = None
        if with_routing:
            rows = len(prompt) + len(ids) - 1 - routing_end
            routed = np.arange(rows * layers * topk, dtype=np.int32).reshape(rows, layers, topk) + 1000 * routing_end
        choice = tokenwire.validate(completion_ids=ids, completion_logprobs=np.array(lps, np.float32),
                                    sampling_mask=mask, prompt_token_ids=prompt, routed_experts=routed,
                                    routed_experts_start=routing_end if with_routing else None)
        t.append(choice)
        context = prompt + ids
        if with_routing:
            routing_end = len(context) - 1
    return t


@settings(max_examples=60, deadline=None)
@given(rollouts())
def test_trajectory_equals_concatenation_by_hand(kernels, case):
    first_prompt, turns, with_routing, start0, tools_apart = case
    if with_routing and start0 > len(first_prompt) + len(turns[0][0]) + len(turns[0][1]) - 1:
        start0 = 0
    t = build(kernels, first_prompt, turns, with_routing, start0, tools_apart)
    ids, lps, loss = list(first_prompt), [0.0] * len(first_prompt), [False] * len(first_prompt)
    rows: list[list[int]] = [[] for _ in first_prompt]
    for extra, turn_ids, turn_lps, mask in turns:
        ids += extra + turn_ids
        lps += [0.0] * len(extra) + turn_lps
        loss += [False] * len(extra) + [True] * len(turn_ids)
        rows += [[] for _ in extra] + (mask if mask is not None else [[] for _ in turn_ids])
    assert t.ids.tolist() == ids
    assert t.logprobs.tolist() == np.array(lps, np.float32).tolist()
    assert t.loss_mask.tolist() == loss
    assert t.turns == len(turns) and len(t) == len(ids)
    if any(m is not None for *_, m in turns):
        assert t.sampling_mask.to_lists() == rows
        assert t.sampling_mask_present.tolist() == [bool(r) for r in rows]
    else:
        assert t.sampling_mask is None
    if with_routing:
        routed = t.routed_experts
        assert routed.start == start0 and routed.array.shape == (len(ids) - 1 - start0, 2, 3)
        # each turn's rows are its own, in order: a row is tagged 1000 * the turn's start
        assert t.routing_end == len(ids) - 1
    # the batch: one row, the first prompt as the prompt, every later token as the completion
    batch = tokenwire.rollout_batch([t, t], pad_id=-1, routing="both")
    p = len(first_prompt) + len(turns[0][0])  # the first turn's prompt, tool tokens before it included
    assert batch.prompt_token_ids[0, :p].tolist() == ids[:p]
    assert batch.completion_ids[0, : len(ids) - p].tolist() == ids[p:]
    assert batch.loss_mask[1, : len(ids) - p].tolist() == loss[p:]
    assert batch.completion_logprobs[0, : len(ids) - p].tolist() == np.array(lps[p:], np.float32).tolist()
    if with_routing:
        present = batch.completion_routed_present[0]
        # a completion token at position q has row q - start0, the last token none
        for j in range(len(ids) - p):
            q = p + j
            assert present[j] == (start0 <= q < len(ids) - 1)
            if present[j]:
                assert (batch.completion_routed_experts[0, j] == t.routed_experts.array[q - start0]).all()


def turn(ids, lps=None, prompt=None, routed=None, start=None, mask=None):
    return tokenwire.validate(completion_ids=ids, completion_logprobs=lps if lps is not None else [-0.5] * len(ids),
                              prompt_token_ids=prompt, routed_experts=routed, routed_experts_start=start,
                              sampling_mask=mask)


def snapshot(t):
    return (t.ids.tolist(), t.logprobs.tolist(), t.loss_mask.tolist(), t.turns,
            None if t.routed_experts is None else t.routed_experts.array.tolist())


def refused(t, call, field, token, reason):
    before = snapshot(t)
    with pytest.raises(MalformedResponseError) as caught:
        call()
    assert (caught.value.field, caught.value.token) == (field, token), caught.value
    assert reason in str(caught.value)
    assert snapshot(t) == before  # a refused turn changes nothing


def routing(rows, fill=1):
    return np.full((rows, 2, 2), fill, dtype=np.uint8)


def test_contradictions_are_refused(kernels):
    t = Trajectory([1, 2, 3])
    t.append(turn([7, 8], prompt=[1, 2, 3], routed=routing(4), start=0))  # rows for positions 0..3
    assert t.routing_end == 4
    # the prompt does not extend the context: a token changed, or the prompt is shorter
    refused(t, lambda: t.append(turn([9], prompt=[1, 2, 3, 7, 5, 40])), "prompt_token_ids", 4, "does not extend")
    refused(t, lambda: t.append(turn([9], prompt=[1, 2, 3, 7])), "prompt_token_ids", 4, "ends there")
    # routing rows leaving a gap, or overlapping the trajectory's
    prompt = [1, 2, 3, 7, 8, 40]
    refused(t, lambda: t.append(turn([9, 10], prompt=prompt, routed=routing(2), start=5)), "routed_experts", 5,
            "a gap")
    refused(t, lambda: t.append(turn([9, 10], prompt=prompt, routed=routing(7), start=0)), "routed_experts", 0,
            "an overlap")
    # the right start but the wrong count, or another (layers, topk)
    refused(t, lambda: t.append(turn([9, 10], routed=routing(4), start=4), prompt_token_ids=prompt),
            "routed_experts", 4, "rows, not 3")
    refused(t, lambda: t.append(turn([9, 10], prompt=prompt, routed=np.zeros((3, 2, 3), np.uint8), start=4)),
            "routed_experts", 4, "(layers, topk)")
    t.append(turn([9, 10], prompt=prompt, routed=routing(3, 2), start=4))
    assert t.routing_end == 7 and t.routed_experts.array[:, 0, 0].tolist() == [1, 1, 1, 1, 2, 2, 2]
    wider = np.full((2, 2, 2), 300, dtype=np.int16)  # a uint8 trajectory meets int16 rows: it widens
    t.append(turn([11], prompt=[*prompt, 9, 10, 41], routed=wider, start=7))
    assert t.routed_experts.array.dtype == np.int16 and t.routed_experts.array[:, 0, 0].tolist()[-3:] == [2, 300, 300]
    with pytest.raises(ValueError, match="no logprobs"):
        t.append(tokenwire.validate(completion_ids=[3], require_logprobs=False))
    with pytest.raises(ValueError, match="one choice"):
        t.append(tokenwire.GenerateResponse([turn([1]), turn([2])], None, None, None, {}))
    with pytest.raises(TypeError):
        t.append([1, 2])
    with pytest.raises(ValueError):
        t.append_tokens([-1])


def test_a_parsed_response_is_a_turn(kernels):
    body = (b'{"prompt_token_ids":[1,2],"choices":[{"token_ids":[5,6],"logprobs":{"sampled":[-0.5,-1.0]},'
            b'"routed_experts":{"data":"AAAAAAAAAAA=","shape":[2,2,2],"dtype":"uint8","start":1}}]}')
    response = kernels.parse_generate_response(body)
    t = Trajectory()
    t.append(response)  # the response's prompt, its rows from position 1
    assert t.ids.tolist() == [1, 2, 5, 6] and t.prompt_length == 2 and t.routed_experts.start == 1
    with pytest.raises(MalformedResponseError, match="an overlap"):  # the same rows again
        t.append(response.choices[0], prompt_token_ids=[1, 2, 5, 6, 9])
    t.append(dataclasses.replace(response.choices[0], routed_experts=None), prompt_token_ids=[1, 2, 5, 6, 9])
    assert t.ids.tolist() == [1, 2, 5, 6, 9, 5, 6] and t.loss_mask.tolist() == [0, 0, 1, 1, 0, 1, 1]


def test_growth_is_amortized():
    """Appending a token at a time reallocates O(log n) times: the capacity doubles."""
    t = Trajectory([1])
    t.append(turn([2]))
    buffers = set()
    for i in range(5000):
        t.append_tokens([i % 1000])
        buffers.add(t._ids.data.ctypes.data)
    assert len(buffers) <= 12 and len(t) == 5002


def test_rollout_batch_to_torch_and_arrow(kernels):
    t = Trajectory([1, 2])
    t.append(turn([7, 8], mask=[[7], [8, 3]]))
    t.append_tokens([40, 41])
    t.append(turn([9], prompt=[1, 2, 7, 8, 40, 41]))
    batch = tokenwire.rollout_batch([t], pad_id=-1, width=6)
    assert batch.completion_ids.tolist() == [[7, 8, 40, 41, 9, -1]]
    assert batch.loss_mask.tolist() == [[True, True, False, False, True, False]]
    assert batch.sampling_mask.to_lists()[:5] == [[7], [8, 3], [], [], []]
    torch = pytest.importorskip("torch")
    assert batch.to_torch()["loss_mask"].dtype == torch.bool
    pytest.importorskip("pyarrow")
    assert batch.to_arrow().column("loss_mask").to_pylist() == [[True, True, False, False, True, False]]
    with pytest.raises(ValueError, match="no model turn"):
        tokenwire.rollout_batch([Trajectory([1])])
