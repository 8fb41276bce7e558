"""Fuzz the functions that take a caller's arrays while those arrays change under them: a gc
callback, run at a fuzzed collection point of the call, writes fuzzed values (negative,
huge, NaN, infinite, offsets out of order) into the caller's arrays during
``Ragged.to_lists``, ``select_heads`` and the writers, on every SIMD path and on the
reference kernels. Whatever the call read, it ends in MalformedResponseError, ValueError or
TypeError, or in a result that agrees with its checks: rows cut from the values, heads of
finite logprobs and distinct ids, a writer's output that the parser accepts. Never a crash."""

import sys
from pathlib import Path

import atheris
import numpy as np

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests.mutation
with atheris.instrument_imports():
    from _common import PATHS

    import tokenwire
    from tests.mutation import rewritten_at
    from tokenwire import MalformedResponseError, _core, _pycore

ALLOWED = (MalformedResponseError, ValueError, TypeError)
FLOATS = (np.nan, np.inf, -np.inf, 5.0, -1.0, -9999.0)


def under_mutation(fdp, arrays, call):
    """``call()`` while the k-th collection it runs writes fuzzed values into ``arrays``;
    an allowed error is returned, anything else propagates (and is a finding)."""
    k = fdp.ConsumeIntInRange(1, 48)
    writes = []
    for array in arrays:
        for _ in range(fdp.ConsumeIntInRange(0, 3) if array.size else 0):
            at = fdp.ConsumeIntInRange(0, array.size - 1)
            if array.dtype.kind == "f":
                value = FLOATS[fdp.ConsumeIntInRange(0, len(FLOATS) - 1)]
            else:
                value = np.array(fdp.ConsumeIntInRange(-(2**40), 2**40)).astype(array.dtype)
            writes.append((array.reshape(-1), at, value))

    def mutate():
        for flat, at, value in writes:
            flat[at] = value

    with rewritten_at(k, mutate):
        try:
            return call()
        except ALLOWED as exc:
            return exc


def lengths(fdp, rows, low, high):
    return [fdp.ConsumeIntInRange(low, high) for _ in range(rows)]


def to_lists(fdp):
    sizes = lengths(fdp, fdp.ConsumeIntInRange(0, 3000), 0, 3)
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    dtype = (np.int64, np.int32, np.float32, np.float64)[fdp.ConsumeIntInRange(0, 3)]
    values = np.arange(int(offsets[-1]) + fdp.ConsumeIntInRange(0, 3)).astype(dtype)
    got = under_mutation(fdp, [offsets], lambda: tokenwire.Ragged(offsets, values).to_lists())
    if not isinstance(got, Exception):
        for row in got:  # values[i] == i: a row is a run of consecutive values
            if row and row != list(range(int(row[0]), int(row[0]) + len(row))):
                raise AssertionError(f"a row that is not cut from the values: {row[:6]}")


def select_heads(fdp):
    sizes = lengths(fdp, fdp.ConsumeIntInRange(1, 24), 1, 6)
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    total = int(offsets[-1])
    ids = np.array(lengths(fdp, total, 0, 40), dtype=np.int64)
    logprobs = np.log(np.array(lengths(fdp, total, 1, 9), dtype=np.float64) / 10)
    sampled = ids[offsets[:-1]].copy()
    sampled_lps = logprobs[offsets[:-1]].copy()
    extra = {}
    if fdp.ConsumeBool():
        extra["num_top"] = fdp.ConsumeIntInRange(-1, 6)
        logprobs = logprobs.astype(np.float32)
    arrays = [ids, logprobs, sampled, sampled_lps]
    if fdp.ConsumeBool():
        extra["support_ids"] = sampled.astype(np.int32)
        extra["support_offsets"] = np.arange(len(sizes) + 1)
        arrays.append(extra["support_ids"])
    got = under_mutation(fdp, arrays, lambda: tokenwire.select_heads(
        ids, logprobs, offsets, sampled, sampled_lps, fdp.ConsumeIntInRange(1, 4), **extra))
    if not isinstance(got, Exception):
        top_ids, top_lps = got
        if not (np.isfinite(top_lps.values).all() and (top_lps.values <= 1e-6).all()):
            raise AssertionError("a head logprob the checks refuse")
        if any(len(set(row)) != len(row) for row in top_ids.to_lists()):
            raise AssertionError("a head that repeats an id")


def writers(fdp):
    n = fdp.ConsumeIntInRange(1, 40)
    token_ids = lengths(fdp, n, 0, 50)
    which = fdp.ConsumeIntInRange(0, 3)
    fields = {}
    if which == 0:
        packed = -np.array(lengths(fdp, n, 0, 20), dtype=(np.float32, np.float64)[fdp.ConsumeIntInRange(0, 1)]) / 4
        arrays, call = [packed], lambda: {"completion_logprobs": tokenwire.encode_packed(packed)}
    elif which == 1:
        widths = lengths(fdp, n, 1, 3)
        offsets = np.concatenate([[0], np.cumsum(widths, dtype=np.int64)])
        ids = np.array(lengths(fdp, int(offsets[-1]), 0, 60), dtype=np.int64)
        ids[offsets[:-1]] = token_ids
        lps = -np.array(lengths(fdp, len(ids), 0, 20), dtype=np.float64) / 4
        arrays = [ids, lps, offsets]
        call = lambda: {"compact_logprobs": tokenwire.encode_compact_logprobs(ids, lps, offsets, 2)}  # noqa: E731
    elif which == 2:
        ids = np.array(token_ids, dtype=np.int32)
        counts = np.ones(n, dtype=np.int32)
        fields["completion_logprobs"] = tokenwire.encode_packed(np.full(n, -0.5, dtype=np.float32))
        arrays = [ids, counts]
        call = lambda: {"sampling_mask": tokenwire.encode_sampling_mask(ids, counts, completion_ids=token_ids)}  # noqa: E731
    else:
        routing = np.array(lengths(fdp, n * 4, 0, 7), dtype=(np.uint8, np.int16, np.int32)[fdp.ConsumeIntInRange(0, 2)])
        routing = routing.reshape(n, 2, 2)[:-1] if n > 1 else routing.reshape(n, 2, 2)[:0]
        fields["completion_logprobs"] = tokenwire.encode_packed(np.full(n, -0.5, dtype=np.float32))
        arrays, call = [routing], lambda: {"routed_experts": tokenwire.encode_routed_experts(routing)}
    got = under_mutation(fdp, arrays, call)
    if not isinstance(got, Exception):  # what a writer returned, the reader must accept
        raw = tokenwire.dumps_generate_response({"choices": [{"token_ids": token_ids, **fields, **got}]}, check=False)
        tokenwire.parse_generate_response(raw)


def test_one(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    kernels = [(_core, p) for p in PATHS] + [(_pycore, None)]
    impl, path = kernels[fdp.ConsumeIntInRange(0, len(kernels) - 1)]
    if path is not None:
        _core.set_simd_path(path)
    tokenwire.read._select.kernels = impl  # what to_lists, select_heads and the writers run
    try:
        (to_lists, select_heads, writers)[fdp.ConsumeIntInRange(0, 2)](fdp)
    finally:
        tokenwire.read._select.kernels = _core


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one)
    atheris.Fuzz()
