"""prime-rl's by-handle payloads (``payload`` segments, rows in ``<payload_dir>/<uuid>.bin``):
the segments' structure without a file, and with ``payload_root`` the rows read from files
inside that directory only, on both implementations (the ``impl`` fixture)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest

import tokenwire
from tokenwire import MalformedResponseError, PayloadSegment

PROMPT = [11, 12, 13, 14]
IDS = [7, 8, 9]
LAYERS, TOPK = 2, 3
NAME = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0.bin"


def _server_file(directory: Any, name: str = NAME) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """Write a choice's rows as the server lays them out (routing, then the padded mask, then
    its logprobs, back to back in one file) and return the segments and the arrays."""
    p, n = len(PROMPT), len(IDS)
    routed_rows = p + n - 1  # every routed position: the last completion token is not routed
    routing = (np.arange(routed_rows * LAYERS * TOPK) % 64).astype(np.uint8).reshape(routed_rows, LAYERS, TOPK)
    mask = np.array([[7, 3, -1], [-1, -1, -1], [9, 2, 8]], dtype=np.int32)  # row 1: no support recorded
    mask_logprobs = np.where(mask >= 0, -0.5, -np.inf).astype(np.float32)
    segments, offset, blob = [], 0, b""
    for field, array, pos in (("routed_experts", routing, p + n - 1 - routed_rows), ("sampling_mask", mask, p),
                              ("sampling_mask_logprobs", mask_logprobs, p)):
        segments.append({"field": field, "file": name, "offset": offset, "pos": pos, "rows": len(array),
                         "dtype": str(array.dtype), "shape": list(array.shape[1:])})
        blob += array.tobytes()
        offset += array.nbytes
    with open(os.path.join(directory, name), "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    return segments, {"routed_experts": routing, "sampling_mask": mask, "sampling_mask_logprobs": mask_logprobs}


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


def test_segments_are_validated_and_exposed_without_reading_a_file(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    os.remove(tmp_path / NAME)  # nothing is opened without payload_root
    for prompt in (True, False):  # the prompt length from prompt_token_ids, or usage.prompt_tokens
        choice = impl.parse_generate_response(_body(segments, prompt=prompt)).choices[0]
        assert choice.payload == tuple(PayloadSegment(s["field"], s["file"], s["offset"], s["pos"], s["rows"],
                                                      s["dtype"], tuple(s["shape"])) for s in segments)
        assert choice.routed_experts is None and choice.sampling_mask is None
        assert choice.sampling_mask_logprobs is None and "payload" not in choice.raw
    assert impl.parse_generate_response(_body(None)).choices[0].payload is None


def test_rows_are_read_under_payload_root(impl, tmp_path):
    segments, arrays = _server_file(tmp_path)
    response = impl.parse_generate_response(_body(segments), payload_root=tmp_path)
    choice = response.choices[0]
    routed = choice.routed_experts
    assert routed.start == 0 and np.array_equal(routed.array, arrays["routed_experts"])
    assert not routed.array.flags.writeable and not routed.array.flags.owndata  # the file's mapping
    assert choice.sampling_mask.to_lists() == [[7, 3], [], [9, 2, 8]]
    assert choice.sampling_mask_present.tolist() == [True, False, True]
    assert choice.sampling_mask_logprobs.to_lists() == [[-0.5, -0.5], [], [-0.5, -0.5, -0.5]]
    assert tokenwire.parse_generate_response(_body(segments), payload_root=str(tmp_path)).choices[0] \
        .sampling_mask.to_lists() == choice.sampling_mask.to_lists()


def test_a_segment_past_the_end_of_its_file(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    os.truncate(tmp_path / NAME, os.path.getsize(tmp_path / NAME) - 1)
    err = _fails(impl, _body(segments), payload_root=tmp_path)
    assert (err.choice, err.field, err.token) == (0, "payload[2]", None)
    assert "past the end" in err.reason


@pytest.mark.parametrize("name", ["../x.bin", "/etc/passwd", "..", "sub/x.bin", "", 7])
def test_a_file_name_that_is_not_a_plain_name(impl, tmp_path, name):
    segments, _ = _server_file(tmp_path)
    segments[0]["file"] = name
    err = _fails(impl, _body(segments))  # refused before any file is read
    assert (err.choice, err.field) == (0, "payload[0].file")


def test_a_symlink_out_of_the_root(impl, tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    segments, _ = _server_file(outside)
    os.symlink(outside / NAME, root / NAME)
    err = _fails(impl, _body(segments), payload_root=root)
    assert (err.choice, err.field) == (0, "payload[0].file") and "outside payload_root" in err.reason
    (root / "d").mkdir()
    os.symlink(root / "d", root / "link")  # a link inside the root, to a directory: not a file
    err = _fails(impl, _body([dict(s, file="link") for s in segments]), payload_root=root)
    assert (err.choice, err.field) == (0, "payload[0].file") and "not a regular file" in err.reason


def test_overlapping_segments(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    segments[2]["offset"] -= 4
    err = _fails(impl, _body(segments))
    assert (err.choice, err.field) == (0, "payload[2]") and "overlap" in err.reason


@pytest.mark.parametrize(("index", "key", "value"), [
    (0, "dtype", "float32"), (1, "dtype", "int64"), (2, "dtype", "int32"),
    (0, "shape", [LAYERS]), (1, "shape", [3, 1]), (1, "shape", [0]),
])
def test_a_dtype_or_row_shape_that_is_not_the_fields(impl, tmp_path, index, key, value):
    segments, _ = _server_file(tmp_path)
    segments[index][key] = value
    err = _fails(impl, _body(segments))
    assert (err.choice, err.field) == (0, f"payload[{index}].{key}")


@pytest.mark.parametrize(("index", "change"), [(0, {"rows": 5}), (0, {"pos": 1}), (1, {"rows": 2}),
                                               (1, {"pos": 3}), (2, {"rows": 4})])
def test_rows_that_do_not_match_the_lengths(impl, tmp_path, index, change):
    segments, _ = _server_file(tmp_path)
    segments[index].update(change)
    err = _fails(impl, _body(segments))
    assert (err.choice, err.field) == (0, f"payload[{index}].rows")


def test_no_prompt_length(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    body = json.loads(_body(segments, prompt=False))
    del body["usage"]
    assert _fails(impl, json.dumps(body).encode()).field == "payload[0].pos"


@pytest.mark.parametrize(("change", "where"), [
    ({"field": "routed_expert_ids"}, "payload[1].field"),
    ({"field": "routed_experts"}, "payload[1].field"),  # a duplicate
    ({"offset": True}, "payload[1].offset"),
    ({"rows": False}, "payload[1].rows"),
    ({"offset": -4}, "payload[1].offset"),
])
def test_unknown_duplicate_or_non_int_fields(impl, tmp_path, change, where):
    segments, _ = _server_file(tmp_path)
    segments[1].update(change)
    assert _fails(impl, _body(segments)).field == where


def test_payload_and_segments_of_the_wrong_type(impl):
    assert _fails(impl, _body({"field": "routed_experts"})).field == "payload"
    assert _fails(impl, _body([["routed_experts"]])).field == "payload[0]"


def test_a_field_both_by_handle_and_inline(impl, tmp_path):
    segments, _ = _server_file(tmp_path)
    err = _fails(impl, _body(segments, sampling_mask=[[7], [8], [9]]))
    assert (err.choice, err.field) == (0, "sampling_mask") and "by handle" in err.reason
    assert _fails(impl, _body(segments[1:2], kept_tokens={"ids": "", "counts": ""})).field == "kept_tokens"
    assert _fails(impl, _body(segments[1:], sampling_mask_logprobs=[[0.0]])).field == "sampling_mask_logprobs"


def test_mask_rows_are_checked_as_inline_masks(impl, tmp_path):
    segments, arrays = _server_file(tmp_path)
    mask = arrays["sampling_mask"].copy()
    for row, broken in ((2, [9, -1, 8]), (0, [7, -2, -1]), (2, [2, 8, -1])):  # padding inside, -2, no sampled id
        mask[:] = arrays["sampling_mask"]
        mask[row] = broken
        with open(tmp_path / NAME, "r+b") as f:
            f.seek(segments[1]["offset"])
            f.write(mask.tobytes())
        err = _fails(impl, _body(segments), payload_root=tmp_path)
        assert (err.choice, err.field, err.token) == (0, "payload[1]", row)


def test_routing_alone_and_a_missing_file(impl, tmp_path):
    segments, arrays = _server_file(tmp_path)
    choice = impl.parse_generate_response(_body(segments[:1]), payload_root=tmp_path).choices[0]
    assert np.array_equal(choice.routed_experts.array, arrays["routed_experts"]) and choice.sampling_mask is None
    err = _fails(impl, _body([dict(segments[0], file="missing.bin")]), payload_root=tmp_path)
    assert (err.choice, err.field) == (0, "payload[0].file") and "cannot be opened" in err.reason
    assert _fails(impl, _body(segments[2:])).field == "payload[0].shape"  # logprobs without the mask


def test_payload_root_must_be_a_path(impl):
    with pytest.raises(TypeError):
        impl.parse_generate_response(_body(None), payload_root=b"/tmp")


def test_heads_read_the_mask_by_handle_as_inline(impl, tmp_path):
    """With ``top_k`` the by-handle mask is the heads' support, as the same mask inline."""
    segments, arrays = _server_file(tmp_path)
    # Each token's candidates; over a recorded support they normalize (row 1 has none).
    candidates = {7: {7: 0.75, 3: 0.25, 5: 0.01}, 8: {8: 0.5, 4: 0.2, 6: 0.1}, 9: {9: 0.5, 2: 0.3, 8: 0.2}}
    content = [{"token": f"token_id:{t}", "logprob": float(np.log(candidates[t][t])), "top_logprobs": [
        {"token": f"token_id:{i}", "logprob": float(np.log(p))} for i, p in candidates[t].items()]} for t in IDS]
    inline = [[int(i) for i in row if i >= 0] for row in arrays["sampling_mask"]]
    by_handle = impl.parse_generate_response(_body(segments, logprobs={"content": content}), top_k=1,
                                             payload_root=tmp_path).choices[0]
    sent = impl.parse_generate_response(_body(None, logprobs={"content": content}, sampling_mask=inline),
                                        top_k=1).choices[0]
    assert by_handle.sampling_mask.to_lists() == sent.sampling_mask.to_lists() == inline
    assert by_handle.completion_top_ids.to_lists() == sent.completion_top_ids.to_lists()
    assert by_handle.completion_top_logprobs.to_lists() == sent.completion_top_logprobs.to_lists()
