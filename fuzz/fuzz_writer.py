"""Fuzz the writers: arrays from raw bytes, encoded, serialized, parsed back."""

import sys

import atheris
import numpy as np

with atheris.instrument_imports():
    import tokenwire
    from tokenwire import MalformedResponseError


def test_one(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    rows = fdp.ConsumeIntInRange(0, 8)
    lengths = [fdp.ConsumeIntInRange(1, 40) for _ in range(rows)]
    total = sum(lengths)
    ids = np.array([fdp.ConsumeIntInRange(0, 50) for _ in range(total)], dtype=np.uint32)
    values = np.array([-fdp.ConsumeFloatInRange(0.0, 20.0) for _ in range(total)], dtype=np.float32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    try:
        field = tokenwire.encode_compact_logprobs(ids, values, offsets, fdp.ConsumeIntInRange(-1, 30))
    except MalformedResponseError:
        return  # the readers would refuse it too (repeated ids with different values)
    firsts = [int(ids[o]) for o in offsets[:-1]]
    raw = tokenwire.dumps_generate_response({"choices": [{"token_ids": firsts, "compact_logprobs": field}]})
    got = tokenwire.parse_generate_response(raw).choices[0].completion_logprobs
    expected = [values[o] for o in offsets[:-1]]
    if got.tolist() != [float(v) for v in expected]:
        raise AssertionError("round trip changed the sampled logprobs")


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one)
    atheris.Fuzz()
