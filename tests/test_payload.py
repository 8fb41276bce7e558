"""prime-rl's by-handle payloads (``payload`` segments, rows in files under its ``payload_dir``):
the segments' structure without a file, and with ``payload_root`` the rows read from files
inside that directory only, on both implementations (the ``impl`` fixture).

Files are laid out as prime-rl's server lays them out: fixed-width rows as C-contiguous
arrays, ragged rows (the masks) as ``ragged_bytes`` does (``rows + 1`` uint32 absolute file
offsets, then the values); segments are sent as msgspec's array-like structs send them,
``[field, file, offset, pos, rows, dtype, shape]``."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError, PayloadSegment
from tokenwire.rules import generate as rules

PROMPT = [11, 12, 13, 14]
IDS = [7, 8, 9]
LAYERS, TOPK = 2, 3
NAME = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0.bin"
KEYS = ("field", "file", "offset", "pos", "rows", "dtype", "shape")
# The mask of each completion token (row 1: no support recorded) and its sampler logprobs.
MASK = [[7, 3], [], [9, 2, 8]]
MASK_LOGPROBS = [[-0.25, -1.5], [], [-0.5, -2.0, -3.0]]


def ragged_bytes(rows: list[list[float]], dtype: str, offset: int) -> bytes:
    """Ragged rows laid out to be written at byte ``offset`` of a file: ``len(rows) + 1``
    uint32 absolute start offsets, then the values."""
    values = np.array([v for row in rows for v in row], dtype=dtype)
    counts = np.array([len(row) for row in rows], dtype=np.int64)
    starts = offset + 4 * (len(rows) + 1) + values.itemsize * np.concatenate([[0], np.cumsum(counts)])
    return starts.astype("<u4").tobytes() + values.tobytes()


def _routing(rows: int, dtype: str = "uint8", first: int = 0) -> np.ndarray:
    return ((np.arange(rows * LAYERS * TOPK) + first) % 64).astype(dtype).reshape(rows, LAYERS, TOPK)


def _server_file(directory: Any, name: str = NAME, file: str | None = None,
                 ) -> tuple[list[list[Any]], dict[str, np.ndarray]]:
    """Write a choice's rows as the server lays them out (routing, its weights, the mask and
    its logprobs, back to back in one file) and return the segments (``file`` as sent: the
    file's absolute path by default) and the arrays."""
    p, n = len(PROMPT), len(IDS)
    file = os.path.join(str(directory), name) if file is None else file
    routed_rows = p + n - 1  # every routed position: the last completion token is not routed
    routing = _routing(routed_rows)
    weights = (np.arange(routed_rows * LAYERS * TOPK, dtype=np.float32) / 64).reshape(routed_rows, LAYERS, TOPK)
    segments, blob = [], b""
    for field, array in (("routed_experts", routing), ("routed_expert_weights", weights)):
        segments.append([field, file, len(blob), 0, len(array), str(array.dtype), [LAYERS, TOPK]])
        blob += array.tobytes()
    for field, rows, dtype in (("sampling_mask", MASK, "<i4"), ("sampling_mask_logprobs", MASK_LOGPROBS, "<f4")):
        segments.append([field, file, len(blob), p, len(rows), "uint32", []])
        blob += ragged_bytes(rows, dtype, len(blob))
    with open(os.path.join(directory, name), "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    return segments, {"routed_experts": routing, "routed_expert_weights": weights}


def _body(segments: Any, *, prompt: bool = True, **choice: Any) -> bytes:
    document: dict[str, Any] = {
        "request_id": "r1",
        "choices": [{"index": 0, "token_ids": IDS, "logprobs": {"content": [
            {"token": f"token_id:{t}", "logprob": -0.5} for t in IDS]},
            "routed_experts": None, "sampling_mask": None, "payload": segments, "finish_reason": "stop", **choice}],
        "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": len(IDS)},
    }
    if prompt:
        document["prompt_token_ids"] = PROMPT
    return json.dumps(document).encode()


def _fails(impl, body: bytes, **kwargs: Any) -> MalformedResponseError:
    with pytest.raises(MalformedResponseError) as err:
        impl.parse_generate_response(body, **kwargs)
    return err.value


def _write(path: Any, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_segments_are_validated_and_exposed_without_reading_a_file(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    os.remove(tmp_path / NAME)  # nothing is opened without payload_root
    expected = tuple(PayloadSegment(*s[:6], tuple(s[6])) for s in segments)
    for prompt in (True, False):  # the prompt length from prompt_token_ids, or usage.prompt_tokens
        for sent in (segments, [dict(zip(KEYS, s)) for s in segments]):  # msgspec's array form, or objects
            choice = impl.parse_generate_response(_body(sent, prompt=prompt)).choices[0]
            assert choice.payload == expected
            assert choice.routed_experts is None and choice.sampling_mask is None
            assert choice.sampling_mask_logprobs is None and choice.routed_expert_weights is None
            assert "payload" not in choice.raw
    assert [s.nbytes for s in expected] == [36, 144, 16, 16]  # a ragged segment: rows + 1 offsets
    assert impl.parse_generate_response(_body(None)).choices[0].payload is None


def test_rows_are_read_under_payload_root(impl, tmp_path):
    segments, arrays = _server_file(tmp_path)
    choice = impl.parse_generate_response(_body(segments), payload_root=tmp_path).choices[0]
    routed = choice.routed_experts
    assert routed.start == 0 and routed.array.dtype == np.uint8
    assert np.array_equal(routed.array, arrays["routed_experts"])
    assert choice.routed_expert_weights.dtype == np.float32
    assert np.array_equal(choice.routed_expert_weights, arrays["routed_expert_weights"])
    assert choice.sampling_mask.to_lists() == MASK
    assert choice.sampling_mask_present.tolist() == [True, False, True]  # a zero-width row: no replay
    assert choice.sampling_mask_logprobs.to_lists() == MASK_LOGPROBS
    assert tokenwire.parse_generate_response(_body(segments), payload_root=str(tmp_path)).choices[0] \
        .sampling_mask.to_lists() == MASK


def test_the_arrays_are_owned_not_mapped(impl, tmp_path):
    """The rows are copies the result owns: a file truncated or rewritten after the parse
    changes nothing (a mapping would fault on the truncated pages)."""
    segments, arrays = _server_file(tmp_path)
    choice = impl.parse_generate_response(_body(segments), payload_root=tmp_path).choices[0]
    os.truncate(tmp_path / NAME, 0)
    with open(tmp_path / NAME, "wb") as f:
        f.write(b"\xff" * 4096)
    assert np.array_equal(choice.routed_experts.array, arrays["routed_experts"])
    assert np.array_equal(choice.routed_expert_weights, arrays["routed_expert_weights"])
    assert choice.sampling_mask.to_lists() == MASK and choice.sampling_mask_logprobs.to_lists() == MASK_LOGPROBS


def test_a_file_shrunk_after_it_was_opened(tmp_path):
    """A short read (the file shrank since it was opened and sized) fails at the segment."""
    _server_file(tmp_path)
    files = rules.PayloadFiles(str(tmp_path))
    evidence = rules.extract_choice(0, {"token_ids": IDS}, None)
    try:
        file = files.open(NAME, evidence, "payload[0]")
        os.truncate(tmp_path / NAME, 10)
        with pytest.raises(MalformedResponseError) as err:
            files.read(file, [(0, 8), (8, 36)], evidence, ["payload[0]", "payload[1]"])
    finally:
        files.close()
    assert err.value.field == "payload[1]" and "past the end" in err.value.reason


@pytest.mark.parametrize("how", ["relative", "absolute", "dotted"])
def test_a_file_named_relative_to_the_root_or_by_a_path_inside_it(impl, tmp_path, how):
    (tmp_path / "sub").mkdir()
    file = {"relative": f"sub/{NAME}", "absolute": str(tmp_path / "sub" / NAME),
            "dotted": str(tmp_path / "sub" / ".." / "sub" / NAME)}[how]
    segments, arrays = _server_file(tmp_path / "sub", file=file)
    choice = impl.parse_generate_response(_body(segments), payload_root=tmp_path).choices[0]
    assert np.array_equal(choice.routed_experts.array, arrays["routed_experts"])


def test_a_segment_past_the_end_of_its_file(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    size = os.path.getsize(tmp_path / NAME)
    os.truncate(tmp_path / NAME, size - 1)  # the last mask logprob's last byte
    err = _fails(impl, _body(segments), payload_root=tmp_path)
    assert (err.choice, err.field, err.token) == (0, "payload[3]", 2) and "past the end" in err.reason
    os.truncate(tmp_path / NAME, segments[3][2] + 8)  # into the mask logprobs' offsets
    err = _fails(impl, _body(segments), payload_root=tmp_path)
    assert (err.choice, err.field, err.token) == (0, "payload[3]", None) and "past the end" in err.reason


@pytest.mark.parametrize("name", ["", 7, None, ["a.bin"], "a\0b.bin", "a/" * 2048 + "b.bin"])
def test_a_file_that_is_not_a_path(impl, tmp_path, name):
    segments, _ = _server_file(tmp_path)
    segments[0][1] = name
    err = _fails(impl, _body(segments))  # refused before any file is read
    assert (err.choice, err.field) == (0, "payload[0].file")


@pytest.mark.parametrize("name", ["../x.bin", "/etc/passwd", "..", ".", "sub/../../x.bin"])
def test_a_file_outside_the_root(impl, tmp_path, name):
    root = tmp_path / "root"
    root.mkdir()
    segments, _ = _server_file(tmp_path, name="x.bin")
    segments[0][1] = name
    err = _fails(impl, _body(segments), payload_root=root)
    assert (err.choice, err.field) == (0, "payload[0].file") and "outside payload_root" in err.reason
    segments[0][1] = str(tmp_path / "x.bin")  # an absolute path beside the root
    err = _fails(impl, _body(segments), payload_root=root)
    assert (err.choice, err.field) == (0, "payload[0].file") and "outside payload_root" in err.reason


def test_a_symlink_out_of_the_root(impl, tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    segments, _ = _server_file(outside, file=NAME)
    os.symlink(outside / NAME, root / NAME)
    err = _fails(impl, _body(segments), payload_root=root)
    assert (err.choice, err.field) == (0, "payload[0].file") and "outside payload_root" in err.reason
    os.symlink(outside, root / "dir")  # a directory link out of the root, then a name under it
    err = _fails(impl, _body([[s[0], f"dir/{NAME}", *s[2:]] for s in segments]), payload_root=root)
    assert (err.choice, err.field) == (0, "payload[0].file") and "outside payload_root" in err.reason
    (root / "d").mkdir()
    os.symlink(root / "d", root / "link")  # a link inside the root, to a directory: not a file
    err = _fails(impl, _body([[s[0], "link", *s[2:]] for s in segments]), payload_root=root)
    assert (err.choice, err.field) == (0, "payload[0].file") and "not a regular file" in err.reason


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_waiting_for_a_writer(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    err = _fails(impl, _body([["routed_experts", "fifo", *segments[0][2:]]]), payload_root=tmp_path)
    assert (err.choice, err.field) == (0, "payload[0].file") and "not a regular file" in err.reason


def test_overlapping_segments(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    segments[3][2] = segments[2][2] + 12  # the mask logprobs' offsets start on the mask's last offset
    err = _fails(impl, _body(segments))
    assert (err.choice, err.field) == (0, "payload[3]") and "overlap" in err.reason
    two = json.loads(_body(segments[:1]))
    two["choices"].append(dict(two["choices"][0], index=1))  # a second choice on the same rows
    err = _fails(impl, json.dumps(two).encode())
    assert (err.choice, err.field) == (1, "payload[0]") and "overlap choices[0].payload[0]" in err.reason


def test_values_that_overlap_another_segment(impl, tmp_path):
    """Only the offsets are trusted: values pointing into another segment's bytes (here the
    mask's offsets pointing into the routing rows, or into its own offsets) fail."""
    segments, _ = _server_file(tmp_path)
    mask_at = segments[2][2]
    for start in (0, mask_at):
        _write(tmp_path / NAME, mask_at, np.array([start, start + 8, start + 8, start + 20], dtype="<u4").tobytes())
        err = _fails(impl, _body(segments), payload_root=tmp_path)
        assert (err.choice, err.field) == (0, "payload[2]") and "overlap" in err.reason


@pytest.mark.parametrize(("bounds", "token", "reason"), [
    ((8, 4, 4, 16), 0, "decrease"), ((0, 8, 4, 16), 1, "decrease"),
    ((0, 6, 6, 18), 0, "4-byte"), ((0, 8, 8, 10**6), 2, "past the end"),
])
def test_offsets_that_are_not_rows(impl, tmp_path, bounds, token, reason):
    segments, _ = _server_file(tmp_path)
    values_at = segments[2][2] + 16
    _write(tmp_path / NAME, segments[2][2], np.array([values_at + b for b in bounds], dtype="<u4").tobytes())
    err = _fails(impl, _body(segments), payload_root=tmp_path)
    assert (err.choice, err.field, err.token) == (0, "payload[2]", token) and reason in err.reason


@pytest.mark.parametrize(("index", "key", "value"), [
    (0, "dtype", "float32"), (0, "dtype", "uint32"), (1, "dtype", "float16"), (1, "dtype", "uint8"),
    (2, "dtype", "int64"), (2, "dtype", "uint8"), (3, "dtype", "float64"),
    (0, "shape", [LAYERS]), (0, "shape", [LAYERS, 0]), (1, "shape", [LAYERS, TOPK + 1]),
    (2, "shape", [3]), (2, "shape", [1, 1]), (3, "shape", [True]), (3, "shape", None),
])
def test_a_dtype_or_row_shape_that_is_not_the_fields(impl, tmp_path, index, key, value):
    segments, _ = _server_file(tmp_path)
    segments[index][KEYS.index(key)] = value
    err = _fails(impl, _body(segments))
    assert (err.choice, err.field) == (0, f"payload[{index}].{key}")


def test_an_empty_completion(impl, tmp_path):
    """No completion token: a mask segment of no rows is its one closing offset, which must
    still lie inside the file."""
    (tmp_path / NAME).write_bytes(np.array([4], dtype="<u4").tobytes())
    body = json.loads(_body([["sampling_mask", NAME, 0, len(PROMPT), 0, "uint32", []]]))
    body["choices"][0].update(token_ids=[], logprobs={"content": []})
    choice = impl.parse_generate_response(json.dumps(body).encode(), payload_root=tmp_path).choices[0]
    assert choice.sampling_mask.to_lists() == []
    (tmp_path / NAME).write_bytes(np.array([8], dtype="<u4").tobytes())
    err = _fails(impl, json.dumps(body).encode(), payload_root=tmp_path)
    assert (err.field, err.token) == ("payload[0]", None) and "past the end" in err.reason


def test_ragged_rows_may_be_declared_one_offset_wide(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    for mask in (["uint32", [1]], ["int32", []], ["float32", [1]]):  # 4-byte rows: the offsets' only reading
        segments[2][5:], segments[3][5:] = mask, ["float32", [1]]
        choice = impl.parse_generate_response(_body(segments), payload_root=tmp_path).choices[0]
        assert choice.sampling_mask.to_lists() == MASK and choice.sampling_mask_logprobs.to_lists() == MASK_LOGPROBS


def test_int32_mask_rows_one_wide_are_ambiguous(impl, tmp_path):
    """int32 rows of shape [1] are 4 bytes a row as CSR offsets are, and also what the padded
    writer declares when no row keeps more than one id: refused, naming both readings."""
    segments, _ = _server_file(tmp_path)
    segments[2][5:] = ["int32", [1]]
    err = _fails(impl, _body(segments))
    assert (err.choice, err.field, err.token) == (0, "payload[2].shape", None)
    assert "ambiguous" in err.reason and "padded with -1" in err.reason and "uint32 []" in err.reason


@pytest.mark.parametrize(("index", "change", "where"), [
    (0, {"rows": 5}, "rows"), (0, {"pos": 1}, "rows"), (1, {"rows": 5}, "rows"), (1, {"pos": 1, "rows": 5}, "pos"),
    (2, {"rows": 2}, "rows"), (2, {"pos": 3}, "rows"), (2, {"pos": 5, "rows": 2}, "pos"), (3, {"rows": 4}, "rows"),
])
def test_rows_that_do_not_match_the_lengths(impl, tmp_path, index, change, where):
    segments, _ = _server_file(tmp_path)
    for key, value in change.items():
        segments[index][KEYS.index(key)] = value
    err = _fails(impl, _body(segments))
    assert (err.choice, err.field) == (0, f"payload[{index}].{where}")


def test_no_prompt_length(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    body = json.loads(_body(segments, prompt=False))
    del body["usage"]
    assert _fails(impl, json.dumps(body).encode()).field == "payload[0].pos"


def test_a_field_split_over_segments(impl, tmp_path):
    """prime-rl's P/D router stitches the prefill worker's routing rows (one file) before the
    decode worker's (another, maybe wider ids): the segments tile the positions in order."""
    p, n = len(PROMPT), len(IDS)
    prefill, decode = _routing(p, "uint8"), _routing(n - 1, "uint16", first=300)
    (tmp_path / "p.bin").write_bytes(prefill.tobytes())
    (tmp_path / "d.bin").write_bytes(b"\0" * 6 + decode.tobytes())
    segments = [["routed_experts", "p.bin", 0, 0, p, "uint8", [LAYERS, TOPK]],
                ["routed_experts", "d.bin", 6, p, n - 1, "uint16", [LAYERS, TOPK]]]
    routed = impl.parse_generate_response(_body(segments), payload_root=tmp_path).choices[0].routed_experts
    assert routed.start == 0 and routed.array.dtype == np.uint16
    assert np.array_equal(routed.array, np.concatenate([prefill, decode]))
    for change, where in (((3, p + 1), "pos"), ((3, p - 1), "pos"), ((6, [LAYERS, 1]), "shape")):
        broken = [list(s) for s in segments]
        broken[1][change[0]] = change[1]
        assert _fails(impl, _body(broken)).field == f"payload[1].{where}"


@pytest.mark.parametrize(("change", "where"), [
    ({0: "routed_expert_ids"}, "payload[1].field"),
    ({0: "routed_experts", 5: "uint8"}, "payload[1].pos"),  # a second routing segment on the same rows
    ({2: True}, "payload[1].offset"),
    ({4: False}, "payload[1].rows"),
    ({2: -4}, "payload[1].offset"),
    ({3: 2**63}, "payload[1].pos"),
    ({2: 2**63 - 8}, "payload[1]"),
])
def test_unknown_duplicate_or_non_int_members(impl, tmp_path, change, where):
    segments, _ = _server_file(tmp_path)
    for key, value in change.items():
        segments[1][key] = value
    assert _fails(impl, _body(segments)).field == where


def test_payload_and_segments_of_the_wrong_type(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    assert _fails(impl, _body({"field": "routed_experts"})).field == "payload"
    assert _fails(impl, _body([["routed_experts"]])).field == "payload[0]"
    assert _fails(impl, _body([segments[0] + [None]])).field == "payload[0]"
    assert _fails(impl, _body(["routed_experts"])).field == "payload[0]"


def test_a_field_both_by_handle_and_inline(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    err = _fails(impl, _body(segments, sampling_mask=[[7], [8], [9]]))
    assert (err.choice, err.field) == (0, "sampling_mask") and "by handle" in err.reason
    assert _fails(impl, _body(segments[2:3], kept_tokens={"ids": "", "counts": ""})).field == "kept_tokens"
    assert _fails(impl, _body(segments[2:], sampling_mask_logprobs=[[0.0]])).field == "sampling_mask_logprobs"
    assert _fails(impl, _body(segments[:2], routed_expert_weights=[])).field == "routed_expert_weights"


@pytest.mark.parametrize(("row", "broken"), [(2, [9, 2, 9]), (0, [7, -3]), (2, [2, 8, 1]), (0, [3, 3])])
def test_mask_rows_are_checked_as_inline_masks(impl, tmp_path, row, broken):
    """A repeated id, a negative one, a row without the sampled id: at the segment and token."""
    mask = [list(r) for r in MASK]
    mask[row] = broken
    segments, _ = _server_file(tmp_path)
    _write(tmp_path / NAME, segments[2][2], ragged_bytes(mask, "<i4", segments[2][2]))
    err = _fails(impl, _body(segments[:3]), payload_root=tmp_path)
    assert (err.choice, err.field, err.token) == (0, "payload[2]", row)


@pytest.mark.parametrize(("rows", "row", "reason"), [
    ([[-0.25, -1.5], [], [-0.5, -2.0]], 2, "values for 3 mask ids"),
    ([[-0.25, -1.5], [-1.0], [-0.5, -2.0]], 1, "values for 0 mask ids"),
    ([[-0.25, float("nan")], [], [-0.5, -2.0, -3.0]], 0, "finite"),
    ([[-0.25, -1.5], [], [-0.5, -2.0, 0.5]], 2, "at most 1e-6"),
])
def test_mask_logprob_rows_match_the_mask(impl, tmp_path, rows, row, reason):
    segments, _ = _server_file(tmp_path)
    blob = ragged_bytes(rows, "<f4", segments[3][2])
    with open(tmp_path / NAME, "r+b") as f:
        f.truncate(segments[3][2])
        f.seek(segments[3][2])
        f.write(blob)
    err = _fails(impl, _body(segments), payload_root=tmp_path)
    assert (err.choice, err.field, err.token) == (0, "payload[3]", row) and reason in err.reason


def test_weights_are_finite_and_beside_the_routing(impl, tmp_path):
    segments, arrays = _server_file(tmp_path)
    assert _fails(impl, _body(segments[1:])).field == "payload[0].field"  # weights without routing
    weights = arrays["routed_expert_weights"].copy()
    weights[4, 1, 2] = np.inf
    _write(tmp_path / NAME, segments[1][2], weights.tobytes())
    err = _fails(impl, _body(segments), payload_root=tmp_path)
    assert (err.choice, err.field, err.token) == (0, "payload[1]", 4) and "finite" in err.reason


def test_signed_routing_ids_are_never_negative(impl, tmp_path):
    routing = _routing(len(PROMPT) + len(IDS) - 1, "int16")
    routing[3, 0, 1] = -1
    (tmp_path / NAME).write_bytes(routing.tobytes())
    segments = [["routed_experts", NAME, 0, 0, len(routing), "int16", [LAYERS, TOPK]]]
    err = _fails(impl, _body(segments), payload_root=tmp_path)
    assert (err.choice, err.field, err.token) == (0, "payload[0]", 3) and "negative" in err.reason


def test_routing_alone_and_a_missing_file(impl, tmp_path):
    segments, arrays = _server_file(tmp_path)
    choice = impl.parse_generate_response(_body(segments[:1]), payload_root=tmp_path).choices[0]
    assert np.array_equal(choice.routed_experts.array, arrays["routed_experts"]) and choice.sampling_mask is None
    err = _fails(impl, _body([["routed_experts", "missing.bin", *segments[0][2:]]]), payload_root=tmp_path)
    assert (err.choice, err.field) == (0, "payload[0].file") and "cannot be opened" in err.reason
    assert _fails(impl, _body(segments[3:])).field == "payload[0].field"  # logprobs without the mask


def test_payload_root_must_be_a_path(impl):
    with pytest.raises(TypeError):
        impl.parse_generate_response(_body(None), payload_root=b"/tmp")


def test_heads_read_the_mask_by_handle_as_inline(impl, tmp_path):
    """With ``top_k`` the by-handle mask is the heads' support, as the same mask inline."""
    segments, _ = _server_file(tmp_path)
    # Each token's candidates; over a recorded support they normalize (row 1 has none).
    candidates = {7: {7: 0.75, 3: 0.25, 5: 0.01}, 8: {8: 0.5, 4: 0.2, 6: 0.1}, 9: {9: 0.5, 2: 0.3, 8: 0.2}}
    content = [{"token": f"token_id:{t}", "logprob": float(np.log(candidates[t][t])), "top_logprobs": [
        {"token": f"token_id:{i}", "logprob": float(np.log(p))} for i, p in candidates[t].items()]} for t in IDS]
    by_handle = impl.parse_generate_response(_body(segments, logprobs={"content": content}), top_k=1,
                                             payload_root=tmp_path).choices[0]
    sent = impl.parse_generate_response(_body(None, logprobs={"content": content}, sampling_mask=MASK),
                                        top_k=1).choices[0]
    assert by_handle.sampling_mask.to_lists() == sent.sampling_mask.to_lists() == MASK
    assert by_handle.completion_top_ids.to_lists() == sent.completion_top_ids.to_lists()
    assert by_handle.completion_top_logprobs.to_lists() == sent.completion_top_logprobs.to_lists()


@pytest.mark.parametrize("how", ["hard link", "rename"])
def test_one_file_under_two_names_overlaps(impl, tmp_path, how):
    """Byte ranges are keyed by the file (device and inode), not by its name: a second choice
    reading the same rows through a hard link, or through the name the file was renamed to
    after the first choice read it, overlaps the first."""
    segments, _ = _server_file(tmp_path)
    two = json.loads(_body(segments[:1]))
    if how == "hard link":
        os.link(tmp_path / NAME, tmp_path / "other.bin")
        other = "other.bin"
    else:  # the same name, a different file each time it is opened: a rename in between
        other = NAME.replace(".bin", ".renamed.bin")
        two["choices"][0]["payload"][0][1] = NAME
    two["choices"].append(dict(two["choices"][0], index=1, payload=[[segments[0][0], other, *segments[0][2:]]]))
    body = json.dumps(two).encode()
    if how == "rename":
        real_open = rules.PayloadFiles._open

        def open_then_rename(self, name, real, c, at):
            file = real_open(self, name, real, c, at)
            if name == NAME:
                os.rename(tmp_path / NAME, tmp_path / other)
            return file

        rules.PayloadFiles._open = open_then_rename
    try:
        err = _fails(impl, body, payload_root=tmp_path)
    finally:
        if how == "rename":
            rules.PayloadFiles._open = real_open
    assert (err.choice, err.field) == (1, "payload[0]") and "overlap choices[0].payload[0]" in err.reason


def test_names_resolve_as_realpath_resolves_them(tmp_path):
    """The payload files' names are resolved a component at a time from each directory's
    descriptor (linear in the name), to what os.path.realpath gives: links relative and
    absolute, to directories and files, dangling, ``..`` after a link, after a missing
    directory and after a file; a loop of links fails as a malformed response."""
    from tokenwire.rules.payload import PayloadFiles, _resolve

    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.bin").write_bytes(b"x")
    os.symlink("a/b", root / "rel")
    os.symlink(root / "a", root / "abs")
    os.symlink("b/f.bin", root / "a" / "file")
    os.symlink("missing/x", root / "dangling")
    os.symlink("../..", root / "a" / "b" / "up")
    os.symlink("loop2", root / "loop1")
    os.symlink("loop1", root / "loop2")
    names = ["a/b/f.bin", "rel/f.bin", "abs/b/f.bin", "a/file", "dangling", "rel/../b/f.bin", "missing/../a",
             "a/b/f.bin/../f.bin", "a/b/up/a", "a/b/up/../x", "./a//b/./f.bin", str(root / "rel" / "f.bin"),
             "/", "..", "../root/a", "rel/up/rel/up/abs"]
    for name in names:
        assert _resolve(str(root), name) == os.path.realpath(os.path.join(root, name)), name
    with pytest.raises(OSError):
        _resolve(str(root), "loop1/x")
    files = PayloadFiles(str(root))
    with pytest.raises(MalformedResponseError) as err:
        files.open("loop1/x", rules.extract_choice(0, {"token_ids": IDS}, None), "payload[0]")
    assert err.value.field == "payload[0].file" and "cannot be resolved" in err.value.reason


# --- prime-rl's other mask layout: int32 rows of kept ids padded with -1 to the widest row -------


def padded_rows(rows: list[list[int]], width: int | None = None) -> np.ndarray:
    """Mask rows as prime-rl's server writes them by handle: an int32 ``[len(rows), widest]``
    array, each row's kept ids then -1 (a row without a support: -1 throughout)."""
    widest = max((len(r) for r in rows), default=0) if width is None else width
    out = np.full((len(rows), widest), -1, dtype="<i4")
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def _padded_file(directory: Any, rows: list[list[int]], logprobs: list[list[float]] | None = None,
                 width: int | None = None) -> list[list[Any]]:
    """The mask rows padded with -1 (and, when given, their logprobs as CSR after them) in one
    file, and their segments."""
    array = padded_rows(rows, width)
    segments = [["sampling_mask", NAME, 0, len(PROMPT), len(rows), "int32", [array.shape[1]]]]
    blob = array.tobytes()
    if logprobs is not None:
        segments.append(["sampling_mask_logprobs", NAME, len(blob), len(PROMPT), len(rows), "uint32", []])
        blob += ragged_bytes(logprobs, "<f4", len(blob))
    (directory / NAME).write_bytes(blob)
    return segments


def test_padded_mask_rows_as_the_server_writes_them(impl, tmp_path):
    segments = _padded_file(tmp_path, MASK, MASK_LOGPROBS)
    choice = impl.parse_generate_response(_body(segments)).choices[0]  # no file read
    padded = choice.payload[0]
    assert padded.padded and not padded.ragged and (padded.row_bytes, padded.nbytes) == (12, 36)
    assert not choice.payload[1].padded and choice.sampling_mask is None
    choice = impl.parse_generate_response(_body(segments), payload_root=tmp_path).choices[0]
    assert choice.sampling_mask.to_lists() == MASK and choice.sampling_mask.values.dtype == np.int32
    assert choice.sampling_mask_present.tolist() == [True, False, True]  # a row of -1 only: no replay
    assert choice.sampling_mask_logprobs.to_lists() == MASK_LOGPROBS
    # The same rows as CSR read alike.
    (tmp_path / "csr").mkdir(exist_ok=True)
    csr, _ = _server_file(tmp_path / "csr", name="csr.bin", file="csr.bin")
    same = impl.parse_generate_response(_body(csr[2:]), payload_root=tmp_path / "csr").choices[0]
    assert same.sampling_mask.to_lists() == choice.sampling_mask.to_lists()


def test_padded_rows_wider_than_the_widest_or_of_no_width(impl, tmp_path):
    segments = _padded_file(tmp_path, MASK, width=5)
    assert impl.parse_generate_response(_body(segments), payload_root=tmp_path).choices[0].sampling_mask.to_lists() == MASK
    segments = _padded_file(tmp_path, [[], [], []], width=0)  # no support anywhere: zero-byte rows
    choice = impl.parse_generate_response(_body(segments), payload_root=tmp_path).choices[0]
    assert choice.payload[0].nbytes == 0 and choice.sampling_mask.to_lists() == [[], [], []]
    assert not choice.sampling_mask_present.any()


def test_padded_segments_of_two_widths_tile_the_mask(impl, tmp_path):
    """A mask split over segments: each its own width, or one padded and one CSR."""
    first, second = padded_rows(MASK[:1]), padded_rows(MASK[1:])
    (tmp_path / NAME).write_bytes(first.tobytes() + second.tobytes())
    segments = [["sampling_mask", NAME, 0, len(PROMPT), 1, "int32", [2]],
                ["sampling_mask", NAME, 8, len(PROMPT) + 1, 2, "int32", [3]]]
    assert impl.parse_generate_response(_body(segments), payload_root=tmp_path).choices[0].sampling_mask.to_lists() == MASK
    blob = first.tobytes() + ragged_bytes(MASK[1:], "<i4", 8)
    (tmp_path / NAME).write_bytes(blob)
    segments[1][5:] = ["uint32", []]
    assert impl.parse_generate_response(_body(segments), payload_root=tmp_path).choices[0].sampling_mask.to_lists() == MASK


@pytest.mark.parametrize(("row", "values", "reason"), [
    (2, [9, -2, -1], "holds -2, a value below the -1 padding"),
    (0, [7, -1, 3], "holds 3, an id after its -1 padding"),
    (1, [-1, 5, -1], "holds 5, an id after its -1 padding"),
    (2, [9, 2, -7], "holds -7, a value below the -1 padding"),
])
def test_padded_rows_that_are_not_ids_then_padding(impl, tmp_path, row, values, reason):
    """A padded row is its kept ids, then -1 to its end: a value below -1 or an id after the
    padding fails at the segment and the row's completion token."""
    segments = _padded_file(tmp_path, MASK)
    array = padded_rows(MASK)
    array[row] = values
    (tmp_path / NAME).write_bytes(array.tobytes())
    err = _fails(impl, _body(segments), payload_root=tmp_path)
    assert (err.choice, err.field, err.token) == (0, "payload[0]", row) and reason in err.reason


@pytest.mark.parametrize(("row", "broken"), [(2, [9, 2, 9]), (2, [2, 8, 1]), (0, [3, 3])])
def test_padded_rows_are_checked_as_inline_masks(impl, tmp_path, row, broken):
    """A repeated id, a row without the sampled id: the support rule of every mask form."""
    mask = [list(r) for r in MASK]
    mask[row] = broken
    segments = _padded_file(tmp_path, mask)
    err = _fails(impl, _body(segments), payload_root=tmp_path)
    assert (err.choice, err.field, err.token) == (0, "payload[0]", row)
    assert "Invalid recorded sampling support" in err.reason


@pytest.mark.parametrize(("shape", "reason"), [
    ([True], "[width]"), ([-2], "[width]"), ([2**31], "[width]"), ([1], "ambiguous"),
])
def test_padded_widths_that_are_not_widths(impl, tmp_path, shape, reason):
    segments = _padded_file(tmp_path, MASK)
    segments[0][6] = shape
    err = _fails(impl, _body(segments))
    assert (err.field, reason in err.reason) == ("payload[0].shape", True)


def test_padded_rows_past_the_end_of_the_file(impl, tmp_path):
    segments = _padded_file(tmp_path, MASK)
    (tmp_path / NAME).write_bytes((tmp_path / NAME).read_bytes()[:-4])
    err = _fails(impl, _body(segments), payload_root=tmp_path)
    assert err.field == "payload[0]" and "past the end" in err.reason


@st.composite
def _masks(draw) -> tuple[list[list[int]], int]:
    """Completion ids' supports (each holding its token's id, or empty) and a padded width."""
    rows = []
    for t in IDS:
        others = draw(st.lists(st.integers(0, 50).filter(lambda v: v != t), max_size=4, unique=True))
        rows.append([] if draw(st.integers(0, 3)) == 0 else draw(st.permutations([t, *others])))
    widest = max(len(r) for r in rows)
    return rows, draw(st.sampled_from([w for w in (widest, widest + 1, widest + 3) if w != 1] or [0]))


@given(_masks())
def test_padded_and_csr_layouts_read_alike(impl, case):
    """Any supports, written padded (at any width past the widest but 1) and as CSR, read back
    as the same rows on both layouts."""
    rows, width = case
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        padded = _padded_file(root, rows, width=width)
        got = impl.parse_generate_response(_body(padded), payload_root=root).choices[0].sampling_mask
        assert got.to_lists() == rows
        (root / "csr.bin").write_bytes(ragged_bytes(rows, "<i4", 0))
        csr = [["sampling_mask", "csr.bin", 0, len(PROMPT), len(rows), "uint32", []]]
        again = impl.parse_generate_response(_body(csr), payload_root=root).choices[0].sampling_mask
        assert np.array_equal(again.offsets, got.offsets) and np.array_equal(again.values, got.values)
