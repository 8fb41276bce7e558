"""tokenwire.validate and the engine adapters: evidence handed over in process meets the
parsers' rules. The same evidence written as a generate response (by the writer, or by hand
where the writer would refuse it) and parsed gives the same verdict at the same place; the
adapters read objects built as vLLM's and SGLang's classes declare them."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError, samples


def b64(array: np.ndarray) -> str:
    return tokenwire.b64encode(np.ascontiguousarray(array).view(np.uint8).reshape(-1)).decode()


# --- the same evidence through the parser and through validate -----------------------------------

# Where the parser and validate name the same evidence.
KEYWORD = {"token_ids": "completion_ids", "completion_logprobs": "completion_logprobs",
           "logprobs.content": "completion_top_logprobs", "logprobs": "completion_logprobs",
           "sampling_mask": "sampling_mask", "routed_experts": "routed_experts",
           "weight_versions": "weight_versions"}


def keyword(wire: str | None) -> str | None:
    if wire is None:
        return None
    if wire in KEYWORD:
        return KEYWORD[wire]
    return KEYWORD[wire.split(".")[0]]


FAULTS = ("none", "id_negative", "id_big", "lp_nan", "lp_sentinel", "lp_inf", "lp_short", "cand_dup", "cand_nan",
          "cand_positive", "cand_missing", "head_disagree", "cand_few", "mask_no_sampled", "mask_repeat",
          "mask_negative", "mask_short", "route_big", "route_negative", "spans_gap")


@st.composite
def evidence(draw):
    n = draw(st.integers(1, 12))
    k = draw(st.sampled_from([None, 1, 2]))
    with_mask = draw(st.booleans())
    with_routing = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ids = rng.integers(0, 1000, n)
    width = 5
    cands, cand_lps, lps, mask = [], [], [], []
    for t in range(n):
        others = rng.choice(np.setdiff1d(np.arange(1000), [ids[t]]), width - 1, replace=False)
        row = [int(ids[t]), *map(int, others)]
        probs = rng.dirichlet(np.ones(width + 1))[:width]
        row_lps = [float(np.float32(math.log(p))) for p in probs]
        order = rng.permutation(width)
        cands.append([row[i] for i in order])
        cand_lps.append([row_lps[i] for i in order])
        lps.append(row_lps[0])
        if with_mask:
            kept = sorted(range(width), key=lambda i: -row_lps[i])[: rng.integers(1, 3)]
            if 0 not in kept:
                kept = [0, *kept[1:]]
            mass = sum(math.exp(row_lps[i]) for i in kept)
            for i in kept:  # renormalized over the kept set, as processed logprobs are
                cand_lps[-1][list(order).index(i)] = float(np.float32(row_lps[i] - math.log(mass)))
            if 0 in kept:
                lps[-1] = cand_lps[-1][list(order).index(0)]
            mask.append([row[i] for i in kept])
    ev = {"ids": [int(i) for i in ids], "lps": np.array(lps, dtype=np.float32), "k": k,
          "cands": cands, "cand_lps": cand_lps, "mask": mask if with_mask else None,
          "routing": rng.integers(0, 8, (n + 3 - 1, 2, 2)).astype(np.int32) if with_routing else None,
          "prompt": [1, 2, 3], "spans": [{"version": "v1", "start": 0, "end": n}]}
    fault = draw(st.sampled_from(FAULTS))
    t = draw(st.integers(0, n - 1))
    if fault == "id_negative":
        ev["ids"][t] = -1
    elif fault == "id_big":
        ev["ids"][t] = 2**32
    elif fault.startswith("lp_"):
        if fault == "lp_short":
            ev["lps"] = ev["lps"][:-1]
        else:
            ev["lps"][t] = {"lp_nan": np.nan, "lp_sentinel": -9999.0, "lp_inf": -np.inf}[fault]
    elif fault == "cand_dup":
        ev["cands"][t][1] = ev["cands"][t][0]
    elif fault == "cand_nan":
        ev["cand_lps"][t][2] = float("nan")
    elif fault == "cand_positive":
        ev["cand_lps"][t][2] = 0.5
    elif fault == "cand_missing":
        ev["cands"][t], ev["cand_lps"][t] = [], []
    elif fault == "cand_few":
        ev["cands"][t], ev["cand_lps"][t] = ev["cands"][t][:2], ev["cand_lps"][t][:2]
    elif fault == "head_disagree":
        at = ev["cands"][t].index(ev["ids"][t]) if ev["ids"][t] in ev["cands"][t] else 0
        ev["cand_lps"][t][at] -= 0.5
    elif fault.startswith("mask_") and with_mask:
        if fault == "mask_no_sampled":
            ev["mask"][t] = [i for i in ev["cands"][t] if i != ev["ids"][t]][:1]
        elif fault == "mask_repeat":
            ev["mask"][t] = ev["mask"][t] + ev["mask"][t][:1]
        elif fault == "mask_negative":
            ev["mask"][t] = [-3, *ev["mask"][t]]
        else:
            ev["mask"] = ev["mask"][:-1]
    elif fault.startswith("route_") and with_routing:
        ev["routing"][min(t, len(ev["routing"]) - 1), 1, 0] = 8 if fault == "route_big" else -1
    elif fault == "spans_gap":
        ev["spans"] = [{"version": "v1", "start": 0, "end": max(n - 1, 0)}]
    return ev


def written(encode, by_hand):
    """A field as the writer encodes it, or by hand where the value breaks a rule (the writer
    refuses those: the parser is to meet them)."""
    try:
        return encode()
    except ValueError:  # MalformedResponseError, or a negative mask id refused as an argument
        return by_hand()


def response_of(ev: dict[str, Any]) -> bytes:
    """The evidence as a generate response, serialized by the writer."""
    lps = ev["lps"]
    choice: dict[str, Any] = {"index": 0, "token_ids": ev["ids"], "completion_logprobs": written(
        lambda: tokenwire.encode_packed(lps), lambda: {"dtype": "float32", "shape": [len(lps)], "data": b64(lps)})}
    if ev["k"] is not None:
        choice["logprobs"] = {"content": [
            {"token": f"token_id:{i}", "logprob": float(lp),
             "top_logprobs": [{"token_id": a, "logprob": b if b == b else "NaN"} for a, b in zip(row, row_lps)]}
            for i, lp, row, row_lps in zip(ev["ids"], ev["lps"].tolist() + [0.0] * len(ev["ids"]), ev["cands"],
                                           ev["cand_lps"])]}
        if any(not math.isfinite(x) for x in ev["lps"].tolist()):
            for record, x in zip(choice["logprobs"]["content"], ev["lps"].tolist()):
                record["logprob"] = x if math.isfinite(x) else -1.0
    if ev["mask"] is not None:
        values = np.array([i for row in ev["mask"] for i in row], dtype=np.int32)
        counts = np.array([len(row) for row in ev["mask"]], dtype=np.int32)
        choice["sampling_mask"] = written(
            lambda: tokenwire.encode_sampling_mask(values, counts),
            lambda: {"ids": {"dtype": "int32", "shape": [len(values)], "data": b64(values)},
                     "counts": {"dtype": "int32", "shape": [len(counts)], "data": b64(counts)}})
    if ev["routing"] is not None:
        routing = ev["routing"]
        choice["routed_experts"] = written(
            lambda: tokenwire.encode_routed_experts(routing, start=0),
            lambda: {"data": b64(routing), "shape": list(routing.shape), "dtype": "int32", "start": 0})
    choice["weight_versions"] = ev["spans"]
    return tokenwire.dumps_generate_response({"prompt_token_ids": ev["prompt"], "choices": [choice]}, check=False)


def outcome(call):
    try:
        return "ok", call()
    except MalformedResponseError as exc:
        return "error", exc


@settings(max_examples=150, deadline=None)
@given(evidence(), st.sampled_from(["list", "numpy"]))
def test_validate_agrees_with_the_parser(kernels, ev, form):
    def parse():
        return kernels.parse_generate_response(response_of(ev), top_k=ev["k"], num_experts=8).choices[0]

    def given_arrays():
        arrays = (lambda x: x) if form == "list" else np.array
        heads = {} if ev["k"] is None else {
            "completion_top_ids": [arrays(r) for r in ev["cands"]],
            "completion_top_logprobs": [arrays(r) for r in ev["cand_lps"]], "top_k": ev["k"]}
        return tokenwire.validate(
            completion_ids=ev["ids"] if form == "list" else np.array(ev["ids"]),
            completion_logprobs=ev["lps"], sampling_mask=ev["mask"], routed_experts=ev["routing"],
            routed_experts_start=None if ev["routing"] is None else 0, num_experts=8,
            weight_versions=ev["spans"], **heads)

    if any(i < 0 or i >= 2**32 for i in ev["ids"]) and form == "numpy":
        form = "list"  # an id beyond int64/uint32 as a numpy array is the caller's dtype, not evidence
    want, got = outcome(parse), outcome(given_arrays)
    assert want[0] == got[0], (want, got)
    if want[0] == "error":
        a, b = want[1], got[1]
        assert (a.choice, keyword(a.field), a.token) == (b.choice, b.field, b.token), (a, b)
        assert a.reason == b.reason
        return
    a, b = want[1], got[1]
    assert a.completion_ids.tolist() == b.completion_ids.tolist()
    assert a.completion_logprobs.tolist() == b.completion_logprobs.tolist()
    for name in ("completion_top_ids", "completion_top_logprobs", "sampling_mask"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None)
        if x is not None:
            assert x.offsets.tolist() == y.offsets.tolist() and x.values.tolist() == y.values.tolist()
    if ev["routing"] is not None:
        assert np.array_equal(a.routed_experts.array, b.routed_experts.array)
        assert a.routed_experts.start == b.routed_experts.start == 0
    assert a.weight_versions == b.weight_versions


# --- a malformed case per rule, located at the keyword ---------------------------------------------


def fails(call, field, token=None, reason=None):
    with pytest.raises(MalformedResponseError) as caught:
        call()
    assert (caught.value.field, caught.value.token) == (field, token), caught.value
    if reason is not None:
        assert reason in caught.value.reason
    return caught.value


def test_each_rule_located(kernels):
    ids, lps = [5, 6, 7], [-0.5, -1.0, -0.25]
    v = tokenwire.validate
    fails(lambda: v(completion_ids=[5, -1, 7], completion_logprobs=lps), "completion_ids", 1)
    fails(lambda: v(completion_ids=np.array([5, 6, 2**32]), completion_logprobs=lps), "completion_ids", 2)
    fails(lambda: v(completion_ids=[5, 6.5, 7], completion_logprobs=lps), "completion_ids", 1)
    fails(lambda: v(completion_ids=ids), "completion_logprobs", None, "require_logprobs")
    assert v(completion_ids=ids, require_logprobs=False).completion_logprobs is None
    fails(lambda: v(completion_ids=ids, completion_logprobs=lps[:2]), "completion_logprobs", None)
    fails(lambda: v(completion_ids=ids, completion_logprobs=[-0.5, math.nan, 0.0]), "completion_logprobs", 1)
    fails(lambda: v(completion_ids=ids, completion_logprobs=[-0.5, -1.0, -9999.0]), "completion_logprobs", 2)
    # mask: the sampled id, a repeat, a negative id, the row count
    fails(lambda: v(completion_ids=ids, completion_logprobs=lps, sampling_mask=[[5], [9], [7]]), "sampling_mask", 1)
    fails(lambda: v(completion_ids=ids, completion_logprobs=lps, sampling_mask=[[5], [6, 6], [7]]), "sampling_mask", 1)
    fails(lambda: v(completion_ids=ids, completion_logprobs=lps, sampling_mask=[[5], [6]]), "sampling_mask", None)
    fails(lambda: v(completion_ids=ids, completion_logprobs=lps, sampling_mask=[[5], [-2, 6], [7]]), "sampling_mask", 1)
    fails(lambda: v(completion_ids=ids, completion_logprobs=lps, require_sampling_mask=True), "sampling_mask")
    # routing: expert ids, the row count against the prompt
    routing = np.zeros((4, 2, 2), dtype=np.uint8)
    assert v(completion_ids=ids, completion_logprobs=lps, routed_experts=routing, prompt_token_ids=[1, 2],
             routed_experts_start=0, num_experts=4).routed_experts.array.shape == (4, 2, 2)
    fails(lambda: v(completion_ids=ids, completion_logprobs=lps, routed_experts=routing, prompt_token_ids=[1, 2, 3]),
          "routed_experts", None, "rows")
    bad = routing.copy()
    bad[2, 1, 0] = 4
    fails(lambda: v(completion_ids=ids, completion_logprobs=lps, routed_experts=bad, num_experts=4), "routed_experts", 2)
    fails(lambda: v(completion_ids=ids, completion_logprobs=lps, routed_experts=bad.astype(np.int64) - 5),
          "routed_experts", 0)
    fails(lambda: v(completion_ids=ids, completion_logprobs=lps, routed_experts=np.zeros((4, 2), np.int32)),
          "routed_experts", None)
    held = tokenwire.RoutedExperts(routing, start=1)  # a RoutedExperts brings its start
    assert v(completion_ids=ids, completion_logprobs=lps, routed_experts=held, prompt_token_ids=[1, 2, 3]
             ).routed_experts.start == 1
    fails(lambda: v(completion_ids=ids, completion_logprobs=lps, prompt_token_ids=[1, -2]), "prompt_token_ids", 1)
    fails(lambda: v(completion_ids=ids, completion_logprobs=lps, weight_versions=[("v", 0, 2)]), "weight_versions")
    # heads: candidates' ids and values, the count, too few, the sampled value disagreeing
    rows = [[5, 1, 2, 3], [6, 1, 2, 3], [7, 1, 2, 3]]
    row_lps = [[-0.5, -2.5, -3.0, -3.5], [-1.0, -2.5, -3.0, -3.5], [-0.25, -2.5, -3.0, -3.5]]
    ok = v(completion_ids=ids, completion_logprobs=lps, completion_top_ids=rows, completion_top_logprobs=row_lps,
           top_k=2)
    assert ok.completion_top_ids.to_lists() == [[5, 1], [6, 1], [7, 1]]

    def heads(r, lp, k=2, **more):
        return lambda: v(completion_ids=ids, completion_logprobs=lps, completion_top_ids=r,
                         completion_top_logprobs=lp, top_k=k, **more)

    fails(heads([rows[0], [6, 6, 2, 3], rows[2]], row_lps), "completion_top_logprobs", 1, "Duplicate")
    fails(heads(rows, [row_lps[0], row_lps[1], [-0.25, 0.5, -3.0, -3.5]]), "completion_top_logprobs", 2, "positive")
    fails(heads(rows, [row_lps[0], [-1.0, math.nan, -3.0, -3.5], row_lps[2]]), "completion_top_logprobs", 1, "finite")
    fails(heads([rows[0], [6, -1, 2, 3], rows[2]], row_lps), "completion_top_logprobs", 1, "token id")
    fails(heads([rows[0], [], rows[2]], [row_lps[0], [], row_lps[2]]), "completion_top_logprobs", 1, "Missing")
    fails(heads(rows[:2], row_lps[:2]), "completion_top_logprobs", None)
    fails(heads(rows, [row_lps[0], [-1.2, -2.5, -3.0, -3.5], row_lps[2]]), "completion_top_logprobs", 1, "disagree")
    fails(heads(rows, row_lps, k=3), "completion_top_logprobs", 0, "fewer")
    # -inf is a filtered candidate (the JSON's -9999): dropped from the head
    filtered = v(completion_ids=ids, completion_logprobs=lps, completion_top_ids=rows, top_k=2,
                 completion_top_logprobs=[[-0.5, -np.inf, -3.0, -3.5], row_lps[1], row_lps[2]])
    assert filtered.completion_top_ids[0].tolist() == [5, 2]
    # the head is exactly the recorded support
    masked = v(completion_ids=ids, completion_logprobs=[0.0, -1.0, -0.25], top_k=2, sampling_mask=[[5], [], []],
               completion_top_ids=rows, completion_top_logprobs=[[0.0, -2.5, -3.0, -3.5], row_lps[1], row_lps[2]])
    assert masked.completion_top_ids.to_lists() == [[5], [6, 1], [7, 1]]


def test_arguments_checked(kernels):
    with pytest.raises(ValueError, match="top_k"):
        tokenwire.validate(completion_ids=[1], completion_logprobs=[-1.0], completion_top_ids=[[1]],
                           completion_top_logprobs=[[-1.0]])
    with pytest.raises(ValueError, match="go together"):
        tokenwire.validate(completion_ids=[1], completion_logprobs=[-1.0], completion_top_ids=[[1]], top_k=1)
    with pytest.raises(TypeError):
        tokenwire.validate(completion_ids=np.array([1.0]), completion_logprobs=[-1.0])
    with pytest.raises(ValueError):
        tokenwire.validate(completion_ids=np.zeros((2, 2), np.int64), completion_logprobs=[-1.0])
    with pytest.raises(ValueError):
        tokenwire.validate(completion_ids=[1], completion_logprobs=[-1.0], top_k=0)
    with pytest.raises(TypeError):
        tokenwire.validate([1], [-1.0])  # keywords only


def test_the_result_owns_its_arrays(kernels):
    """What validate returns is its own: the caller writing its arrays afterwards (or another
    thread, meanwhile) changes nothing checked."""
    ids, lps, routing = np.array([5, 6, 7]), np.array([-0.5, -1.0, -0.25], np.float32), np.zeros((4, 2, 2), np.uint8)
    choice = tokenwire.validate(completion_ids=ids, completion_logprobs=lps, routed_experts=routing,
                                prompt_token_ids=np.array([1, 2]), num_experts=4)
    ids[:], lps[:], routing[:] = -1, np.nan, 99
    assert choice.completion_ids.tolist() == [5, 6, 7] and choice.completion_logprobs.tolist() == [-0.5, -1.0, -0.25]
    assert not choice.routed_experts.array.any()


def test_docstring_example(kernels):
    import doctest

    test = doctest.DocTestParser().get_doctest(tokenwire.validate.__doc__, {"tokenwire": tokenwire}, "validate", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert test.examples and runner.summarize(verbose=False).failed == 0


def test_torch_tensors(kernels):
    torch = pytest.importorskip("torch")
    choice = tokenwire.validate(completion_ids=torch.tensor([3, 4]),
                                completion_logprobs=torch.tensor([-0.5, -1.5], dtype=torch.bfloat16),
                                routed_experts=torch.zeros((2, 1, 2), dtype=torch.int64), num_experts=2)
    assert choice.completion_ids.tolist() == [3, 4]
    assert choice.completion_logprobs.dtype == np.float32
    assert choice.routed_experts.array.dtype == np.int32
    fails(lambda: tokenwire.validate(completion_ids=torch.tensor([3, 4]),
                                     completion_logprobs=torch.tensor([-0.5, float("nan")])), "completion_logprobs", 1)


def test_torch_not_imported():
    import subprocess
    import sys

    code = ("import sys, tokenwire; tokenwire.validate(completion_ids=[1], completion_logprobs=[-1.0]); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- vLLM: objects built as vllm/outputs.py and vllm/logprobs.py declare them -------------------
# (tokenwire.samples' VllmCompletionOutput, VllmRequestOutput, VllmFlatLogprobs, VllmLogprob)


def compact_body(ids, rows, num_logprobs, prompt):
    """The same rows written by the writer as compact logprobs (vLLM's flat storage)."""
    flat = [(i, lp) for row in rows for i, lp, _ in row]
    offsets = np.cumsum([0] + [len(row) for row in rows])
    field_ = tokenwire.encode_compact_logprobs([i for i, _ in flat], [lp for _, lp in flat], offsets, num_logprobs)
    return tokenwire.dumps_generate_response({"prompt_token_ids": prompt,
                                              "choices": [{"token_ids": ids, "compact_logprobs": field_}]})


@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("top_k", [None, 2])
def test_vllm_output_agrees_with_compact_rows(kernels, flat, top_k):
    ids, rows = samples.vllm_rows(40, 5, seed=7)
    routing = np.random.default_rng(7).integers(0, 16, (3 + 40 - 1, 4, 2)).astype(np.int16)
    out = samples.vllm_output(40, flat=flat, rows=(ids, rows), routing=routing)
    out.finish_reason = "stop"
    request = samples.VllmRequestOutput("r1", "p", [1, 2, 3], None, [out], True)
    response = tokenwire.validate_vllm_output(request, top_k=top_k, num_logprobs=5, num_experts=16)
    choice = response.choices[0]
    parsed = kernels.parse_generate_response(compact_body(ids, rows, 5, [1, 2, 3]), top_k=top_k).choices[0]
    assert response.request_id == "r1" and response.prompt_token_ids.tolist() == [1, 2, 3]
    assert choice.completion_ids.tolist() == ids
    assert choice.completion_logprobs.tolist() == parsed.completion_logprobs.tolist()
    assert choice.finish_reason == "stop" and choice.routed_experts.array.shape == (42, 4, 2)
    if top_k is not None:
        assert choice.completion_top_ids.to_lists() == parsed.completion_top_ids.to_lists()
        assert choice.completion_top_logprobs.to_lists() == parsed.completion_top_logprobs.to_lists()
    # one CompletionOutput alone: its choice
    alone = tokenwire.validate_vllm_output(out, prompt_token_ids=[1, 2, 3], top_k=top_k, num_logprobs=5)
    assert alone.completion_logprobs.tolist() == choice.completion_logprobs.tolist()


@pytest.mark.parametrize("flat", [False, True])
def test_vllm_output_faults(kernels, flat):
    ids, rows = samples.vllm_rows(12, 3, seed=3)
    cumulative = math.fsum(row[0][1] for row in rows)

    def check(rows_, ids_=ids, cumulative_=cumulative, routed=None, **options):
        out = samples.vllm_output(len(rows_), flat=flat, rows=(ids_, rows_), routing=routed)
        out.index, out.cumulative_logprob = 2, cumulative_
        return lambda: tokenwire.validate_vllm_output(out, **options)

    # the sampled token's logprob missing at position 4 (a loop reading 0.0 there)
    missing = [list(r) for r in rows]
    missing[4] = [e for e in missing[4] if e[0] != ids[4]] or [(ids[4] + 1, -1.0, 1)]
    error = fails(check(missing), "logprobs", 4, "sampled-token evidence")
    assert error.choice == 2
    # fewer positions than tokens (a loop cutting both to the shorter)
    fails(check(rows[:-1]), "logprobs", None, "positions")
    fails(check(rows, cumulative_=cumulative - 1.0), "cumulative_logprob", None)
    positive = [list(r) for r in rows]
    positive[6][1] = (positive[6][1][0], 0.5, 1)
    fails(check(positive), "logprobs", 6)
    fails(check(rows, ids_=[*ids[:3], -1, *ids[4:]]), "token_ids", 3)
    if flat:  # vLLM's flat storage lists the sampled id twice when it is in the top: one value
        twice = [list(r) for r in rows]
        twice[8] = [*twice[8], (ids[8], twice[8][0][1] - 0.5, 1)]
        fails(check(twice), "logprobs", 8, "Repeated compact logprobs disagree")
    routed = np.zeros((3 + 12 - 1, 2, 2), dtype=np.int32)
    routed[5, 0, 1] = 99
    fails(check(rows, routed=routed, num_experts=8, prompt_token_ids=[1, 2, 3]), "routed_experts", 5)
    fails(check(rows, routed=routed[:-1], prompt_token_ids=[1, 2, 3]), "routed_experts", None, "rows")
    out = samples.VllmCompletionOutput(0, "", ids, None, None)
    fails(lambda: tokenwire.validate_vllm_output(out), "logprobs", None, "SamplingParams")
    assert tokenwire.validate_vllm_output(out, require_logprobs=False).completion_logprobs is None
    with pytest.raises(ValueError, match="num_logprobs"):
        tokenwire.validate_vllm_output(out, top_k=2)


# --- SGLang: meta_info as its TokenizerManager builds it -------------------------------------------


def sglang_output(rng, n, k):
    ids = [int(i) for i in rng.choice(5000, n)]
    triples, tops = [], []
    for i in ids:
        others = rng.choice(np.setdiff1d(np.arange(5000), [i]), k + 1, replace=False)
        row_ids = [i, *map(int, others)]
        values = np.sort(np.log(rng.dirichlet(np.ones(k + 3))).astype(np.float32))[::-1][: k + 2].tolist()
        triples.append((values[0], i, None))  # SGLang builds tuples: (logprob, token_id, text)
        tops.append([(v, j, None) for v, j in zip(values, row_ids)])
    meta = {"id": "abc", "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": 4,
            "completion_tokens": n, "output_token_logprobs": triples, "output_top_logprobs": tops}
    return {"text": "", "output_ids": ids, "meta_info": meta}


@pytest.mark.parametrize("top_k", [None, 2])
def test_sglang_meta_info_agrees_with_the_parser(kernels, top_k):
    out = sglang_output(np.random.default_rng(11), 30, 3)
    routing = np.random.default_rng(1).integers(0, 8, (4 + 30 - 1, 2, 4)).astype(np.int32)
    out["meta_info"]["routed_experts"] = routing
    choice = tokenwire.validate_sglang_meta_info(out, top_k=top_k, num_experts=8, routed_experts_shape=(2, 4))
    wire = json.loads(json.dumps({**out, "meta_info": {**out["meta_info"], "routed_experts": b64(routing)}}))
    parsed = kernels.parse_sglang_generate_response(json.dumps(wire), top_k=top_k, num_experts=8,
                                                    routed_experts_shape=(2, 4)).choices[0]
    assert choice.completion_ids.tolist() == parsed.completion_ids.tolist() == out["output_ids"]
    assert choice.completion_logprobs.tolist() == parsed.completion_logprobs.tolist()
    assert np.array_equal(choice.routed_experts.array, routing)
    assert choice.finish_reason == "stop"
    if top_k is not None:
        assert choice.completion_top_ids.to_lists() == parsed.completion_top_ids.to_lists()
    # the meta_info alone, with the ids beside it
    alone = tokenwire.validate_sglang_meta_info(out["meta_info"], output_ids=np.array(out["output_ids"]),
                                                top_k=top_k, routed_experts_shape=(2, 4))
    assert alone.completion_ids.tolist() == out["output_ids"]


def test_sglang_meta_info_faults(kernels):
    out = sglang_output(np.random.default_rng(5), 10, 2)
    meta = out["meta_info"]
    ids = out["output_ids"]
    bad = dict(meta, output_token_logprobs=[*meta["output_token_logprobs"][:3], (math.nan, ids[3], None),
                                            *meta["output_token_logprobs"][4:]])
    fails(lambda: tokenwire.validate_sglang_meta_info(bad, output_ids=ids), "meta_info.output_token_logprobs", 3)
    other = [*ids[:6], ids[6] + 1, *ids[7:]]
    error = fails(lambda: tokenwire.validate_sglang_meta_info(meta, output_ids=other, index=3), "output_ids", 6)
    assert error.choice == 3
    short = dict(meta, output_token_logprobs=meta["output_token_logprobs"][:-1])
    with pytest.raises(MalformedResponseError):
        tokenwire.validate_sglang_meta_info(short, output_ids=ids)
    mask = dict(meta, output_token_sampling_mask=[[i] for i in ids[:5]] + [[ids[5] + 1]] + [[i] for i in ids[6:]])
    fails(lambda: tokenwire.validate_sglang_meta_info(mask, output_ids=ids), "meta_info.output_token_sampling_mask", 5)
    routed = dict(meta, routed_experts=np.full((4 + 10 - 1, 1, 2), 9, dtype=np.int32))
    fails(lambda: tokenwire.validate_sglang_meta_info(routed, output_ids=ids, num_experts=8,
                                                      routed_experts_shape=(1, 2)), "meta_info.routed_experts", 0)
    fails(lambda: tokenwire.validate_sglang_meta_info(dict(meta, routed_experts=routed["routed_experts"][1:]),
                                                      output_ids=ids, routed_experts_shape=(1, 2)),
          "meta_info.routed_experts")
    with pytest.raises(TypeError):
        tokenwire.validate_sglang_meta_info([meta])
