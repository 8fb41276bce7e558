"""Fuzz the functions that take a caller's arrays: select_heads, the writers and b64decode's
``out``, with mismatched lengths, shapes and dtypes. Either both implementations return the
same thing, or both raise the same class, and that class is MalformedResponseError,
ValueError or TypeError (never a crash, an IndexError or an OverflowError)."""

import sys

import atheris
import numpy as np

with atheris.instrument_imports():
    from _common import PATHS

    import tokenwire
    from tokenwire import MalformedResponseError, _core, _pycore

DTYPES = (np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32,
          np.float64, np.bool_, np.complex64, object)
ALLOWED = (MalformedResponseError, ValueError, TypeError)


def array(fdp, dtype_choice=True) -> object:
    """An array of a fuzzed dtype, length and shape (or a plain list, or a scalar)."""
    size = fdp.ConsumeIntInRange(0, 12)
    dtype = DTYPES[fdp.ConsumeIntInRange(0, len(DTYPES) - 1)] if dtype_choice else np.int64
    kind = fdp.ConsumeIntInRange(0, 9)
    if kind == 0:
        return fdp.ConsumeIntInRange(-3, 3)  # a scalar
    if kind == 1:  # big values, as Python ints
        return [fdp.ConsumeIntInRange(-(2**64), 2**70) for _ in range(size)]
    values = [fdp.ConsumeIntInRange(-2, 20) if fdp.ConsumeBool() else -fdp.ConsumeProbability() * 4
              for _ in range(size)]
    out = np.array(values).astype(dtype) if dtype is not object else np.array(values, dtype=object)
    if kind == 2 and size % 2 == 0 and size:
        out = out.reshape(2, -1)  # 2-D
    if kind == 3:
        out = out[::2]  # not contiguous
    return out


def offsets(fdp, total) -> object:
    if fdp.ConsumeBool():
        return array(fdp)
    n = fdp.ConsumeIntInRange(0, 4)
    cuts = sorted(fdp.ConsumeIntInRange(0, max(total, 0)) for _ in range(n))
    return [0, *cuts, total] if fdp.ConsumeBool() else [0, *cuts]


def outcome(call):
    try:
        result = call()
    except ALLOWED as exc:
        return ("error", type(exc).__name__)
    return ("ok", result)


def both(call, describe):
    """The outcome on the compiled core (each SIMD path) and on the reference; they must agree."""
    seen = []
    for impl, path in [(_core, p) for p in PATHS] + [(_pycore, None)]:
        if path is not None:
            _core.set_simd_path(path)
        tokenwire.read._select.kernels = impl  # the kernels select_heads and the writers run
        got = outcome(call)
        seen.append((got[0], got[1]) if got[0] == "error" else ("ok", describe(got[1])))
    tokenwire.read._select.kernels = _core
    if any(s != seen[0] for s in seen):
        raise AssertionError(f"implementations disagree: {seen}")


def ragged(r):
    return (r.offsets.tobytes(), r.values.tobytes())


def field_bytes(field):
    return tokenwire.dumps_generate_response(field, check=False)


def test_one(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    which = fdp.ConsumeIntInRange(0, 5)
    if which == 0:
        ids, lps = array(fdp), array(fdp)
        total = len(ids) if hasattr(ids, "__len__") else 0
        args = (ids, lps, offsets(fdp, total), array(fdp), array(fdp), fdp.ConsumeIntInRange(-1, 4))
        kw = {}
        if fdp.ConsumeBool():
            kw["num_top"] = fdp.ConsumeIntInRange(-3, 2**64) if fdp.ConsumeBool() else fdp.ConsumeIntInRange(-2, 5)
        if fdp.ConsumeBool():
            kw["support_ids"], kw["support_offsets"] = array(fdp), offsets(fdp, fdp.ConsumeIntInRange(0, 6))
        both(lambda: tokenwire.select_heads(*args, **kw), lambda r: (ragged(r[0]), ragged(r[1])))
    elif which == 1:
        ids, lps = array(fdp), array(fdp)
        total = len(ids) if hasattr(ids, "__len__") else 0
        top = fdp.ConsumeIntInRange(-2, 2**64) if fdp.ConsumeBool() else np.int64(fdp.ConsumeIntInRange(-2, 4))
        bounds = offsets(fdp, total)
        extra = {"completion_ids": array(fdp)} if fdp.ConsumeBool() else {}
        both(lambda: tokenwire.encode_compact_logprobs(ids, lps, bounds, top, **extra), field_bytes)
    elif which == 2:
        ids, counts = array(fdp), array(fdp)
        extra = {"completion_ids": array(fdp)} if fdp.ConsumeBool() else {}
        both(lambda: tokenwire.encode_sampling_mask(ids, counts, **extra), field_bytes)
    elif which == 3:
        routing, start = array(fdp), (fdp.ConsumeIntInRange(-2, 2**64) if fdp.ConsumeBool() else None)
        both(lambda: tokenwire.encode_routed_experts(routing, start), field_bytes)
    elif which == 4:
        values = array(fdp)
        both(lambda: tokenwire.encode_packed(values), field_bytes)
    else:
        text = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 16))
        out = array(fdp)
        def decode():
            target = np.array(out, copy=True) if isinstance(out, np.ndarray) else out
            return tokenwire.read._select.kernels.b64decode(text, out=target)

        both(decode, lambda r: (r.shape, r.tobytes()))


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one)
    atheris.Fuzz()
