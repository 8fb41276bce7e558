"""Fuzz the base64 kernels: every path against the stdlib's strict decoder, and round trips."""

import base64
import binascii
import sys

import atheris

with atheris.instrument_imports():
    from _common import PATHS

    from tokenwire import MalformedResponseError, _core


def expected(data: bytes):
    if len(data) % 4:
        return None
    body = data.rstrip(b"=")
    if len(data) - len(body) > 2 or b"=" in body:  # the stdlib lets "0000====" through
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def test_one(data: bytes) -> None:
    want = expected(data)
    for path in PATHS:
        _core.set_simd_path(path)
        try:
            got = _core.b64decode(data).tobytes()
        except MalformedResponseError:
            got = None
        if got != want:
            raise AssertionError(f"{path}: decode {data[:80]!r} gave {got!r:.80} not {want!r:.80}")
        if _core.b64encode(data) != base64.b64encode(data):
            raise AssertionError(f"{path}: encode differs")


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one)
    atheris.Fuzz()
