"""``Ragged`` slicing and its Arrow, padded and torch forms; ``tokenwire.arrow`` record batches.

Every parse runs on both implementations (``impl``); pyarrow and torch tests skip when the
optional package is absent."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
import tokenwire.arrow
from tokenwire import Ragged, samples

DTYPES = [np.int32, np.int64, np.uint32, np.float32, np.float64]


def _multi(impl):
    return impl.parse_generate_response(samples.sample("multi_choice"), top_k=4)


def _moe(impl):
    ev = samples.evidence(24, 5, seed=8)
    routed = samples.routing(8 + 24 - 1 - 7, layers=3, topk=2, experts=300)  # uint16, from position 7
    choice = samples.build_choice(ev, transport="compact", routed=routed, routed_start=7)
    return impl.parse_generate_response(samples.dumps(samples.response([choice], prompt_tokens=8)), top_k=3)


def _raggeds(response):
    for choice in response.choices:
        for r in (choice.completion_top_ids, choice.completion_top_logprobs, choice.sampling_mask):
            if r is not None:
                yield r


rows = st.lists(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=6), max_size=12)


# --- slicing -------------------------------------------------------------------------------------


@given(rows=rows, start=st.none() | st.integers(-15, 15), stop=st.none() | st.integers(-15, 15),
       step=st.none() | st.integers(-4, 4).filter(bool))
def test_slicing_matches_list_slicing(rows, start, stop, step):
    ragged = Ragged.from_lists(rows, np.int64)
    part = ragged[start:stop:step]
    assert isinstance(part, Ragged)
    assert part.to_lists() == rows[start:stop:step]
    assert [r.tolist() for r in part] == rows[start:stop:step]
    assert part.lengths().tolist() == [len(r) for r in rows[start:stop:step]]
    if step in (None, 1):
        assert part.values is ragged.values  # a view: the values are shared


def test_slices_of_parsed_rows(impl):
    for ragged in _raggeds(_multi(impl)):
        lists = ragged.to_lists()
        for start, stop in [(0, 2), (5, 9), (-3, None), (100, 200), (7, 3)]:
            assert ragged[start:stop].to_lists() == lists[start:stop]
        assert ragged[1:9][2:4].to_lists() == lists[3:5]
        assert ragged[np.int64(3)].tolist() == lists[3]


def test_index_errors():
    ragged = Ragged.from_lists([[1], [2, 3]], np.int32)
    with pytest.raises(IndexError):
        ragged[2]
    with pytest.raises(TypeError):
        ragged["0"]


# --- padded --------------------------------------------------------------------------------------


@given(rows=rows, fill=st.integers(-5, 5))
def test_padded_matches_lists(rows, fill):
    ragged = Ragged.from_lists(rows, np.int64)
    padded, lengths = ragged.to_padded(fill=fill)
    width = max((len(r) for r in rows), default=0)
    assert padded.shape == (len(rows), width) and padded.dtype == np.int64
    assert lengths.tolist() == [len(r) for r in rows]
    assert padded.tolist() == [r + [fill] * (width - len(r)) for r in rows]


def test_padded_parsed_rows(impl):
    for ragged in _raggeds(_multi(impl)):
        lists = ragged.to_lists()
        padded, lengths = ragged.to_padded(8, fill=-1)
        assert padded.dtype == ragged.values.dtype and padded.shape == (len(lists), 8)
        assert [row[:n] for row, n in zip(padded.tolist(), lengths.tolist())] == lists
        assert all(v == -1 for row, n in zip(padded.tolist(), lengths.tolist()) for v in row[n:])
        assert ragged[3:6].to_padded(8, fill=-1)[0].tolist() == padded[3:6].tolist()


def test_padded_refuses_to_cut():
    ragged = Ragged.from_lists([[1], [2, 3, 4]], np.int32)
    with pytest.raises(ValueError, match="row 1 has 3 values, more than width 2"):
        ragged.to_padded(2)
    logprobs = Ragged.from_lists([[-0.5], []], np.float32)
    assert logprobs.to_padded(2, fill=-np.inf)[0].tolist() == [[-0.5, -np.inf], [-np.inf, -np.inf]]


# --- Arrow ---------------------------------------------------------------------------------------


@pytest.fixture
def pa():
    return pytest.importorskip("pyarrow")


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_to_arrow_shares_memory(impl, pa):
    for ragged in _raggeds(_multi(impl)):
        arrow = ragged.to_arrow()
        assert isinstance(arrow, pa.LargeListArray)
        assert arrow.buffers()[1].address == _address(ragged.offsets)
        assert arrow.values.buffers()[1].address == _address(ragged.values)
        assert arrow.to_pylist() == ragged.to_lists()
        part = ragged[2:5]
        assert part.to_arrow().buffers()[1].address == _address(ragged.offsets) + 2 * 8
        assert part.to_arrow().to_pylist() == ragged.to_lists()[2:5]


def test_arrow_c_interface(impl, pa):
    ragged = _multi(impl).choices[1].sampling_mask
    imported = pa.array(ragged)  # through __arrow_c_array__
    assert imported.type == pa.large_list(pa.int32())
    assert imported.to_pylist() == ragged.to_lists()
    assert imported.values.buffers()[1].address == _address(ragged.values)


@given(rows=rows)
def test_arrow_matches_lists(rows):
    pa = pytest.importorskip("pyarrow")
    for dtype in DTYPES:
        typed = [[dtype(v) if np.dtype(dtype).kind == "f" else v % 2**31 for v in r] for r in rows]
        ragged = Ragged.from_lists(typed, dtype)
        assert pa.array(ragged).to_pylist() == ragged.to_lists()


def test_to_arrow_needs_pyarrow(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"pip install 'tokenwire\[arrow\]'"):
        Ragged.from_lists([[1]], np.int32).to_arrow()


def test_record_batch_columns(impl, pa):
    response = _multi(impl)
    batch = response.to_arrow()
    assert batch.num_rows == 4
    assert batch.schema.names == list(tokenwire.arrow.SCHEMA_FIELDS)
    assert batch.column("choice").to_pylist() == [0, 1, 2, 3]
    assert batch.column("finish_reason").to_pylist() == ["stop", "length", "stop", "length"]
    for row, choice in enumerate(response.choices):
        assert batch.column("completion_ids")[row].as_py() == choice.completion_ids.tolist()
        assert batch.column("completion_logprobs")[row].as_py() == choice.completion_logprobs.tolist()
        assert batch.column("completion_top_ids")[row].as_py() == choice.completion_top_ids.to_lists()
        assert batch.column("sampling_mask")[row].as_py() == choice.sampling_mask.to_lists()
        assert batch.column("prompt_token_ids")[row].as_py() == response.prompt_token_ids.tolist()
    assert batch.column("routed_experts").null_count == 4


def test_record_batch_routing_and_zero_copy(impl, pa):
    response = _moe(impl)
    (choice,) = response.choices
    batch = tokenwire.arrow.record_batch([response])
    routed = batch.column("routed_experts")
    assert routed.type == pa.large_list(pa.list_(pa.list_(pa.uint16(), 2), 3))
    assert routed[0].as_py() == choice.routed_experts.array.tolist()
    assert batch.column("routed_experts_start").to_pylist() == [7]
    # One choice: the columns are the parsed arrays themselves.
    ids = batch.column("completion_ids")
    assert ids.values.buffers()[1].address == _address(choice.completion_ids)
    entries = routed.values.values.values
    assert entries.buffers()[1].address == _address(choice.routed_experts.array)
    heads = batch.column("completion_top_logprobs")
    assert heads.values.values.buffers()[1].address == _address(choice.completion_top_logprobs.values)


def test_record_batch_nulls_and_many_responses(impl, pa):
    plain = impl.parse_generate_response(samples.sample("native_8k"))
    batch = tokenwire.arrow.record_batch([_multi(impl), plain, _moe(impl)])
    assert batch.num_rows == 6
    assert batch.column("completion_top_ids").null_count == 1
    assert batch.column("sampling_mask").null_count == 2
    assert batch.column("routed_experts").null_count == 5
    assert batch.column("completion_ids")[4].as_py() == plain.choices[0].completion_ids.tolist()
    assert batch.column("completion_top_ids")[5].as_py() == _moe(impl).choices[0].completion_top_ids.to_lists()


def test_table_shares_memory(impl, pa):
    responses = [_multi(impl), _moe(impl)]
    table = tokenwire.arrow.table(responses)
    assert table.num_rows == 5 and table.column("completion_ids").num_chunks == 5
    assert table.to_pylist() == tokenwire.arrow.record_batch(responses).to_pylist()
    choices = [c for r in responses for c in r.choices]
    for chunk, choice in zip(table.column("completion_top_ids").chunks, choices):
        assert chunk.values.values.buffers()[1].address == _address(choice.completion_top_ids.values)
    assert tokenwire.arrow.table([]).num_rows == 0
    mixed = tokenwire.arrow.table([responses[0], impl.parse_generate_response(samples.sample("native_8k"))])
    assert mixed.schema.field("completion_logprobs").type == pa.large_list(pa.float64())  # float32 widened
    assert mixed.column("completion_top_ids").null_count == 1


def test_parquet_round_trip(impl, pa, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    response = _multi(impl)
    ragged = response.choices[2].completion_top_logprobs
    pq.write_table(pa.table({"head": ragged.to_arrow()}), tmp_path / "heads.parquet")
    assert pq.read_table(tmp_path / "heads.parquet").column("head").to_pylist() == ragged.to_lists()
    batch = tokenwire.arrow.record_batch([response, _moe(impl)])
    pq.write_table(pa.Table.from_batches([batch]), tmp_path / "rollouts.parquet")
    back = pq.read_table(tmp_path / "rollouts.parquet")
    assert back.to_pylist() == pa.Table.from_batches([batch]).to_pylist()


# --- torch ---------------------------------------------------------------------------------------


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_to_torch_jagged(impl, torch):
    for ragged in _raggeds(_multi(impl)):
        nested = ragged.to_torch()
        assert nested.is_nested and nested.layout == torch.jagged
        assert [row.tolist() for row in nested.unbind()] == ragged.to_lists()
        assert nested.values().data_ptr() == _address(ragged.values)  # no copy
        part = ragged[3:7]
        assert [row.tolist() for row in part.to_torch().unbind()] == ragged.to_lists()[3:7]


def test_to_torch_padded(impl, torch):
    for ragged in _raggeds(_multi(impl)):
        padded, lengths = ragged.to_torch("padded", width=6, fill=-1)
        assert padded.shape == (len(ragged), 6)
        assert [row[:n] for row, n in zip(padded.tolist(), lengths.tolist())] == ragged.to_lists()
    with pytest.raises(ValueError, match="layout"):
        ragged.to_torch("strided")


def test_to_torch_needs_torch(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"pip install 'tokenwire\[torch\]'"):
        Ragged.from_lists([[1]], np.int32).to_torch()
