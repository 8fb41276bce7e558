"""MoE routing replay (``routed_experts``): the shape rule, its cost against a hostile shape,
and the Arrow export of every routing array the readers accept."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError

from . import growth
from .test_complexity import _parsing

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
import tokenwire.arrow  # noqa: E402  (needs pyarrow)

HUGE = 2**63 - 1


def _npy(shape_text: str, data: bytes, descr: str = "|u1") -> str:
    """A version 2 ``.npy`` file whose header names the shape ``shape_text`` as written."""
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}".encode()
    return base64.b64encode(b"\x93NUMPY\x02\x00" + len(header).to_bytes(4, "little") + header + data).decode()


def _response(routed: Any) -> bytes:
    return json.dumps({"choices": [{"token_ids": [], "logprobs": {"content": []}, "routed_experts": routed}]}).encode()


def _huge_shape(n: int, form: str) -> bytes:
    """n dimensions of 2**63 - 1 each over 3 bytes of data (about 20 bytes a dimension)."""
    if form == "dict":
        return _response({"data": "AAAA", "shape": [HUGE] * n, "dtype": "uint8"})
    return _response(_npy("(" + ", ".join([str(HUGE)] * n) + ",)", b"\0\0\0"))


@pytest.mark.parametrize("form", ["dict", "npy"])
def test_a_shape_of_many_huge_dimensions_costs_linear_time(impl, form):
    """A shape's length is checked before its product: 4x the dimensions may not take 16x
    the time (a product of n dimensions of 2**63 - 1 is an int of 63n bits)."""
    small, large = _huge_shape(6000, form), _huge_shape(24000, form)
    parse = impl.parse_generate_response
    ratio = growth.ratio(_parsing(parse, small), _parsing(parse, large))
    assert ratio < growth.BOUND, f"4x the dimensions took {ratio:.1f}x the time"
    with pytest.raises(MalformedResponseError) as err:
        impl.parse_generate_response(large)
    # A .npy header that long is refused by its length before it is parsed.
    where = "routed_experts.shape" if form == "dict" else "routed_experts"
    assert (err.value.choice, err.value.field, err.value.token) == (0, where, None)
    assert len(str(err.value)) < 300  # the message does not spell out the shape


def test_a_long_npy_header_is_refused_before_it_is_read(impl):
    header_pad = " " * 20000
    raw = _response(_npy("(1, 1, 1)" + header_pad, b"\0"))
    with pytest.raises(MalformedResponseError, match="header is longer than 10000 bytes") as err:
        impl.parse_generate_response(raw)
    assert (err.value.choice, err.value.field) == (0, "routed_experts")
    # Under that length, a shape of many dimensions is refused by its length alone.
    with pytest.raises(MalformedResponseError, match="must be \\[rows, layers, topk\\]") as err:
        impl.parse_generate_response(_huge_shape(400, "npy"))
    assert (err.value.choice, err.value.field) == (0, "routed_experts.shape")


ROUTED = {"uint8": "|u1", "uint16": "<u2", "int16": "<i2", "int32": "<i4"}


def _routed_field(shape: list[int], dtype: str, form: str) -> tuple[Any, bytes]:
    """``routed_experts`` of ``shape`` in ``form`` (built without numpy, which cannot shape
    every one of them), and its data."""
    count = 1
    for d in shape:
        count *= d
    data = (np.arange(count) % 7).astype(ROUTED[dtype]).tobytes()
    if form == "npy":
        text = "(" + "".join(f"{d}, " for d in shape) + ")"
        return _npy(text, data, ROUTED[dtype]), data
    return {"data": base64.b64encode(data).decode(), "shape": shape, "dtype": dtype, "start": 2}, data


def _exported(response: Any) -> list[Any]:
    """The routing of each choice as record_batch, table and a Parquet round trip give it."""
    batch = tokenwire.arrow.record_batch(response)
    table = tokenwire.arrow.table(response)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    back = pq.read_table(io.BytesIO(buffer.getvalue()))
    return [batch.column("routed_experts").to_pylist(), table.column("routed_experts").to_pylist(),
            back.column("routed_experts").to_pylist(), response.to_arrow().column("routed_experts").to_pylist()]


SHAPES = st.lists(st.integers(0, 4), min_size=1, max_size=4) | st.lists(
    st.sampled_from([0, 1, 2, 2**31 - 1, 2**31, 2**40]), min_size=1, max_size=4)


def _trainable(shape: list[int], dtype: str) -> bool:
    """(rows, layers, topk) with layers and topk in [1, 2**31), of at most 2**63 - 1 bytes
    (a zero row count makes none: the rows' bytes are counted as if there were one)."""
    if len(shape) != 3 or not (1 <= shape[1] < 2**31 and 1 <= shape[2] < 2**31):
        return False
    return max(shape[0], 1) * shape[1] * shape[2] * np.dtype(ROUTED[dtype]).itemsize <= 2**63 - 1


@settings(max_examples=150)
@given(shape=SHAPES, dtype=st.sampled_from(sorted(ROUTED)), form=st.sampled_from(["dict", "npy"]))
def test_every_accepted_routing_exports(impl, shape, dtype, form):
    """What the readers accept, the Arrow export takes (record_batch, table, Parquet): a
    routing array is (rows, layers, topk) with at least one layer and one expert per token;
    any other shape is refused at routed_experts.shape."""
    count = 1
    for d in shape:
        count *= d
    if count > 1 << 14:
        return  # not built: its bytes would be sent
    field, data = _routed_field(shape, dtype, form)
    try:
        response = impl.parse_generate_response(_response(field))
    except MalformedResponseError as exc:
        assert not _trainable(shape, dtype), f"{shape} refused: {exc}"
        assert (exc.choice, exc.field, exc.token) == (0, "routed_experts.shape", None)
        return
    routed = response.choices[0].routed_experts
    assert routed.array.shape == tuple(shape)
    expected = np.frombuffer(data, ROUTED[dtype]).reshape(shape).tolist()
    for column in _exported(response):
        assert column == [expected]
    assert _trainable(shape, dtype), f"{shape} accepted"


def test_routing_of_zero_rows_exports_with_its_layers_and_topk(impl):
    field, _ = _routed_field([0, 3, 2], "uint16", "dict")
    response = impl.parse_generate_response(_response(field))
    batch = tokenwire.arrow.record_batch(response)
    assert batch.column("routed_experts").type == pa.large_list(pa.list_(pa.list_(pa.uint16(), 2), 3))
    assert batch.column("routed_experts").to_pylist() == [[]]


@pytest.mark.parametrize("shape", [[4], [2, 3], [2, 0, 2], [2, 2, 0], [0, 0, 0], [1, 2, 3, 1], [0, 1, 2**31], [0, 2**31, 1]])
@pytest.mark.parametrize("form", ["dict", "npy"])
def test_routing_a_trainer_cannot_replay_is_refused(impl, shape, form):
    field, _ = _routed_field(shape, "uint8", form)
    with pytest.raises(MalformedResponseError, match=r"routed_experts shape must be \[rows, layers, topk\]") as err:
        impl.parse_generate_response(_response(field))
    assert (err.value.choice, err.value.field, err.value.token) == (0, "routed_experts.shape", None)


@pytest.mark.parametrize("shape", [(4,), (2, 3), (2, 0, 2), (2, 2, 0), (1, 2, 3, 1)])
def test_routing_built_by_hand_that_cannot_export_names_the_field(shape):
    """A response built by hand (not by a reader) with routing of another shape is refused
    by the export with a ValueError naming routed_experts, never a crash inside pyarrow."""
    response = tokenwire.parse_generate_response(_response(_routed_field([1, 1, 1], "uint8", "dict")[0]))
    response.choices[0].routed_experts.array = np.zeros(shape, np.uint8)
    for export in (tokenwire.arrow.record_batch, tokenwire.arrow.table):
        with pytest.raises(ValueError, match=r"routed_experts of shape .* cannot be exported"):
            export(response)


def test_routing_of_different_entry_shapes_is_refused_by_both_exports(impl):
    """Choices whose routing has different (layers, topk) cannot share one column: record_batch
    and table refuse them alike, naming the field (table once widened them to another type)."""
    first = impl.parse_generate_response(_response(_routed_field([2, 3, 4], "uint8", "dict")[0]))
    second = impl.parse_generate_response(_response(_routed_field([2, 3, 5], "uint8", "dict")[0]))
    for export in (tokenwire.arrow.record_batch, tokenwire.arrow.table):
        with pytest.raises(ValueError, match=r"routed_experts of different \(layers, topk\)"):
            export([first, second])
    same = impl.parse_generate_response(_response(_routed_field([5, 3, 4], "uint8", "dict")[0]))
    assert tokenwire.arrow.table([first, same]).num_rows == 2
