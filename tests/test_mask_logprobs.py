"""prime-rl's inline ``sampling_mask_logprobs`` on the generate endpoint: the sampler's logprob
of every kept id, renormalized over the kept set, rows aligned with ``sampling_mask`` (list or
packed CSR form, zero counts included), a row the server could not capture -9999 throughout;
laid out as prime-rl's generate handler writes it (the mask's float32 logprob bits split
from its ids, each value a float32 written as a JSON number), on both implementations and
every SIMD path, with the writer's round trip."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

import tokenwire
from tokenwire import MalformedResponseError, samples

MARKER = -9999.0


def renormalized(weights: list[float]) -> list[float]:
    """A row as the server computes it: log_softmax over the kept set, in float32."""
    w = np.asarray(weights, dtype=np.float64)
    return np.log(w / w.sum()).astype(np.float32).tolist()


def response(mask: Any, rows: Any, ids: list[int], *, absent: bool = False, **extra: Any) -> bytes:
    """A generate response of one choice with ``ids``, native sampled logprobs, ``mask`` as its
    ``sampling_mask`` and ``rows`` as its ``sampling_mask_logprobs`` (``absent``: no key)."""
    choice = {"index": 0, "token_ids": ids,
              "logprobs": {"content": [{"token": f"token_id:{i}", "logprob": -0.5} for i in ids]},
              "finish_reason": "stop", **extra}
    if mask is not None:
        choice["sampling_mask"] = mask
    if not absent:
        choice["sampling_mask_logprobs"] = rows
    return tokenwire.dumps_generate_response({"request_id": "r", "choices": [choice], "prompt_token_ids": [1, 2, 3]}, check=False)


def csr(rows: list[list[int]]) -> dict[str, Any]:
    """vLLM's packed CSR form of a list-form mask (prime-rl's encoder: int32 ids and counts)."""
    return tokenwire.encode_sampling_mask(np.array([i for r in rows for i in r], dtype=np.int64),
                                          np.array([len(r) for r in rows], dtype=np.int64))


IDS = [5, 9, 7, 11]
MASK = [[5, 8], [9], [], [11, 3, 4]]  # token 2 without replay (an empty row, a zero count)
ROWS = [renormalized([3, 1]), [0.0], [], renormalized([1, 1, 2])]


def fails(impl, body: bytes, match: str, token: int | None = None, field: str = "sampling_mask_logprobs") -> None:
    with pytest.raises(MalformedResponseError, match=match) as info:
        impl.parse_generate_response(body)
    assert (info.value.choice, info.value.field, info.value.token) == (0, field, token)


@pytest.mark.parametrize("form", ["lists", "csr"])
def test_rows_as_sent(impl, simd, form):
    mask = MASK if form == "lists" else csr(MASK)
    choice = impl.parse_generate_response(response(mask, ROWS, IDS)).choices[0]
    got = choice.sampling_mask_logprobs
    assert got.values.dtype == np.float32
    assert np.array_equal(got.offsets, choice.sampling_mask.offsets)
    assert got.to_lists() == [np.float32(r).tolist() if r else [] for r in ROWS]
    assert choice.sampling_mask_present.tolist() == [True, True, False, True]
    assert "sampling_mask_logprobs" not in choice.raw


def test_a_row_not_captured_is_the_marker_throughout(impl):
    rows = [renormalized([3, 1]), [0.0], [], [MARKER] * 3]
    choice = impl.parse_generate_response(response(MASK, rows, IDS)).choices[0]
    assert choice.sampling_mask_logprobs[3].tolist() == [MARKER] * 3


def test_absent_and_null_leave_none(impl):
    for body in (response(MASK, None, IDS), response(MASK, None, IDS, absent=True)):
        assert impl.parse_generate_response(body).choices[0].sampling_mask_logprobs is None


def test_a_marker_beside_values_still_normalizes(impl):
    # -9999 is a zero probability: a row of one kept id at 0.0 and the marker sums to 1.
    rows = [[0.0, MARKER], [0.0], [], renormalized([1, 1, 2])]
    assert impl.parse_generate_response(response(MASK, rows, IDS)).choices[0].sampling_mask_logprobs is not None


BROKEN = [
    pytest.param(ROWS[:3], "must be a list of 4 rows, one per sampling mask row", None, id="a_row_short"),
    pytest.param(ROWS + [[]], "must be a list of 4 rows", None, id="a_row_more"),
    pytest.param({"data": "AAAA"}, "must be a list of 4 rows", None, id="not_a_list"),
    pytest.param([ROWS[0], [0.0, 0.0], [], ROWS[3]], "row must be a list of 1 logprobs", 1, id="row_wider_than_mask"),
    pytest.param([ROWS[0], [0.0], [0.0], ROWS[3]], "row must be a list of 0 logprobs", 2, id="values_on_an_absent_row"),
    pytest.param([ROWS[0], 0.0, [], ROWS[3]], "row must be a list of 1 logprobs", 1, id="row_not_a_list"),
    pytest.param([ROWS[0], [0.0], [], [-1.0, -1.0, -1.0]], r"must normalize over their sampling mask row \(probabilities "
                 r"sum to 1.10", 3, id="not_normalized"),
    pytest.param([ROWS[0], [0.5], [], ROWS[3]], r"support logprob cannot be positive \(0.5\)", 1, id="positive"),
    pytest.param([ROWS[0], ["0.0"], [], ROWS[3]], "support logprob must be a number", 1, id="a_string"),
    pytest.param([ROWS[0], [True], [], ROWS[3]], "support logprob must be a number", 1, id="a_bool"),
    pytest.param([ROWS[0], [None], [], ROWS[3]], "support logprob must be a number", 1, id="null"),
    pytest.param([[MARKER, MARKER + 1], [0.0], [], ROWS[3]], "or be -9999.0 throughout", 0, id="marker_broken"),
]


@pytest.mark.parametrize("rows, match, token", BROKEN)
def test_broken_rows_fail_at_their_row(impl, simd, rows, match, token):
    fails(impl, response(MASK, rows, IDS), match, token)


def test_rows_need_the_mask(impl):
    fails(impl, response(None, [[0.0]] * 4, IDS), "needs the sampling_mask its rows are aligned with")


def test_overflowing_numbers_are_invalid_json(impl):
    body = response(MASK, ROWS, IDS).replace(b"[0.0]", b"[1e999]", 1)
    with pytest.raises(MalformedResponseError, match="invalid JSON"):
        impl.parse_generate_response(body)


def test_inline_and_by_handle_are_one_form_only(impl, tmp_path):
    # The by-handle mask logprobs (payload) beside inline rows: refused, with or without the files.
    choice = json.loads(response(None, [[0.0]] * 4, IDS))["choices"][0]
    n, prompt = len(IDS), 3
    file = tmp_path / "p.bin"
    # prime-rl's ragged_bytes: n + 1 absolute file offsets (uint32), then the values.
    def ragged(at: int, values: np.ndarray) -> bytes:
        offsets = at + 4 * (n + 1) + 4 * np.arange(n + 1)
        return offsets.astype("<u4").tobytes() + values.tobytes()

    blob = ragged(0, np.array(IDS, dtype="<i4"))
    lps = ragged(len(blob), np.zeros(n, dtype="<f4"))
    file.write_bytes(blob + lps)
    choice["payload"] = [["sampling_mask", str(file), 0, prompt, n, "uint32", []],
                         ["sampling_mask_logprobs", str(file), len(blob), prompt, n, "uint32", []]]
    choice["sampling_mask"] = None
    body = json.dumps({"choices": [choice], "prompt_token_ids": [1, 2, 3]}).encode()
    for root in (None, str(tmp_path)):
        with pytest.raises(MalformedResponseError, match=r"sent both by handle \(payload\[1\]\) and inline"):
            impl.parse_generate_response(body, payload_root=root)


def test_the_plain_response_keeps_them_out_of_raw(impl):
    body = samples.dumps(samples.response([samples.build_choice(samples.evidence(4, 3, seed=1))]))
    doc = json.loads(body)
    doc["choices"][0]["sampling_mask"] = [[i] for i in doc["choices"][0]["token_ids"]]
    doc["choices"][0]["sampling_mask_logprobs"] = [[0.0]] * 4
    choice = impl.parse_generate_response(json.dumps(doc).encode()).choices[0]
    assert choice.sampling_mask_logprobs.to_lists() == [[0.0]] * 4
    assert "sampling_mask_logprobs" not in choice.raw


# --- the writer ----------------------------------------------------------------------------------


@st.composite
def mask_rows(draw):
    """Rows of a mask with their renormalized logprobs: flat and peaked weights, absent rows,
    rows the server did not capture, widths 0..6."""
    rows, values = [], []
    for _ in range(draw(st.integers(0, 8))):
        width = draw(st.sampled_from([0, 1, 1, 2, 3, 6]))
        kind = draw(st.sampled_from(["flat", "peaked", "marker"])) if width else "absent"
        if kind == "marker":
            row = [MARKER] * width
        elif kind == "flat":
            row = renormalized([1.0] * width)
        elif kind == "peaked":
            row = renormalized([1000.0] + [draw(st.floats(0.001, 1.0)) for _ in range(width - 1)])
        else:
            row = []
        rows.append(row)
        values += row
    return rows, values


@given(data=mask_rows())
def test_writer_round_trip(impl, data):
    rows, values = data
    counts = [len(r) for r in rows]
    written = tokenwire.encode_sampling_mask_logprobs(np.array(values, dtype=np.float32), counts)
    assert written == rows
    ids = list(range(10, 10 + len(rows)))
    mask = [[ids[t]] + list(range(1000, 1000 + w - 1)) if w else [] for t, w in enumerate(counts)]
    choice = impl.parse_generate_response(response(csr(mask), written, ids)).choices[0]
    assert choice.sampling_mask_logprobs.to_lists() == rows
    assert choice.sampling_mask_logprobs.lengths().tolist() == counts


def test_writer_refuses_what_the_reader_refuses():
    with pytest.raises(ValueError, match="counts add up to 3 but there are 2 logprobs"):
        tokenwire.encode_sampling_mask_logprobs([0.0, 0.0], [1, 2])
    with pytest.raises(MalformedResponseError, match="must normalize"):
        tokenwire.encode_sampling_mask_logprobs([-1.0, -1.0], [2])
    with pytest.raises(MalformedResponseError, match="cannot be positive"):
        tokenwire.encode_sampling_mask_logprobs([0.5], [1])
    with pytest.raises(TypeError):
        tokenwire.encode_sampling_mask_logprobs(["x"], [1])


# --- the writer of teacher scores (vLLM's prompt_token_id_logprobs) ------------------------------


def test_teacher_scores_writer_round_trip(impl):
    scores = np.array([[-0.5, -1.5, -np.inf], [-0.25, -3.0, -4.0]], dtype=np.float32)
    blob = tokenwire.encode_teacher_scores(scores)
    assert np.array_equal(np.load(io.BytesIO(base64.b64decode(str(blob)))), scores)
    body = samples.dumps(samples.response([samples.build_choice(samples.evidence(2, 3, seed=2))], prompt_tokens=3))
    doc = json.loads(body)
    doc["prompt_token_id_logprobs"] = str(blob)
    got = impl.parse_generate_response(json.dumps(doc).encode(), prompt_logprob_start=0).prompt_token_id_logprobs
    assert np.array_equal(got, scores)


def test_teacher_scores_writer_refuses_what_the_reader_refuses():
    with pytest.raises(MalformedResponseError, match="NaN"):
        tokenwire.encode_teacher_scores(np.full((2, 2), np.nan))
    with pytest.raises(MalformedResponseError, match="positive log probability"):
        tokenwire.encode_teacher_scores(np.ones((1, 2)))
    assert tokenwire.encode_teacher_scores(np.ones((1, 2)), logits=True)
    with pytest.raises(TypeError, match=r"\(rows, K\)"):
        tokenwire.encode_teacher_scores(np.zeros(3))
