"""Strict base64: every length, every invalid character at every position, every path."""

from __future__ import annotations

import base64
import binascii
import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenwire import MalformedResponseError

from .conftest import _NO_CORE as NO_CORE
from .conftest import ALL_PATHS, PYTHON, _core

ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def stdlib(data: bytes) -> bytes | None:
    """What ``b64decode(validate=True)`` accepts, less what it lets through after a complete
    final quantum (``"QUJD="`` decodes there): a canonical string has a length that is a
    multiple of four."""
    if len(data) % 4:
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def ours(impl, data):
    try:
        return impl.b64decode(data).tobytes()
    except MalformedResponseError:
        return None


@pytest.fixture(params=["python", *ALL_PATHS])
def codec(request):
    """The reference, or the compiled core forced onto each of its paths."""
    if request.param == "python":
        yield PYTHON
        return
    if _core is None:
        pytest.skip(NO_CORE)
    if request.param not in _core.simd_paths():
        pytest.skip(f"this CPU cannot run the {request.param} path")
    previous = _core.set_simd_path(request.param)
    yield _core
    _core.set_simd_path(previous)


def test_every_length_round_trips(codec):
    rng = random.Random(0)
    for n in range(0, 300):
        raw = bytes(rng.randrange(256) for _ in range(n))
        text = base64.b64encode(raw)
        assert ours(codec, text) == raw
        assert ours(codec, text.decode()) == raw


def test_every_invalid_character_at_every_position(codec):
    rng = random.Random(1)
    # Lengths that exercise the scalar tail and one or two SIMD blocks of each width.
    for n in (0, 1, 2, 3, 4, 5, 31, 47, 48, 49, 96, 97, 200):
        text = bytearray(base64.b64encode(bytes(rng.randrange(256) for _ in range(n))))
        for pos in range(len(text)):
            original = text[pos]
            for byte in range(256):
                text[pos] = byte
                data = bytes(text)
                assert ours(codec, data) == stdlib(data), (n, pos, byte)
            text[pos] = original


def test_insertions_and_truncations_match_stdlib(codec):
    rng = random.Random(2)
    for n in range(0, 120):
        text = base64.b64encode(bytes(rng.randrange(256) for _ in range(n)))
        for cut in range(len(text) + 1):
            assert ours(codec, text[:cut]) == stdlib(text[:cut])
        for pos in range(0, len(text) + 1, 3):
            for extra in (b"=", b"==", b"\n", b" ", b"A", b"\\"):
                data = text[:pos] + extra + text[pos:]
                assert ours(codec, data) == stdlib(data)


@given(st.binary(max_size=3000))
def test_round_trip_property(codec, raw):
    assert ours(codec, base64.b64encode(raw)) == raw


@given(st.binary(max_size=200))
def test_arbitrary_bytes_agree_with_stdlib(codec, data):
    assert ours(codec, data) == stdlib(data)


def test_large_payload(codec):
    raw = np.random.default_rng(3).integers(0, 256, size=3 * 2**20 + 7, dtype=np.uint8).tobytes()
    text = base64.b64encode(raw)
    assert ours(codec, text) == raw
    bad = bytearray(text)
    bad[len(bad) // 2] = ord("*")
    assert ours(codec, bytes(bad)) is None


def test_decodes_into_a_caller_buffer(impl):
    out = np.zeros(16, dtype=np.uint8)
    view = impl.b64decode(b"QUJD", out)
    assert view.tobytes() == b"ABC"
    assert out[:3].tobytes() == b"ABC" and not out[3:].any()
    assert np.shares_memory(view, out)
    with pytest.raises(ValueError, match="needed"):
        impl.b64decode(b"QUJDREVG", np.zeros(2, dtype=np.uint8))


def test_refuses_a_read_only_caller_buffer(impl):
    frozen = bytes(3)
    locked = np.zeros(3, dtype=np.uint8)
    locked.flags.writeable = False
    for out in (frozen, locked, memoryview(bytearray(3)).toreadonly()):
        with pytest.raises(ValueError, match="read-only"):
            impl.b64decode(b"QUJD", out)
    assert frozen == bytes(3) and not locked.any()


def test_accepts_every_bytes_like(impl):
    for data in (b"QUJD", bytearray(b"QUJD"), memoryview(b"QUJD"), "QUJD", np.frombuffer(b"QUJD", np.uint8)):
        assert impl.b64decode(data).tobytes() == b"ABC"
    with pytest.raises(TypeError):
        impl.b64decode(12)
    with pytest.raises(MalformedResponseError):
        impl.b64decode("QUJ\u00e9")


def test_output_buffer_of_any_shape_is_its_bytes(impl):
    out = np.full((2, 5), 7, np.uint8)
    view = impl.b64decode(b"QUJD", out=out)
    assert view.shape == (3,) and view.tobytes() == b"ABC" and np.shares_memory(view, out)
    assert out.reshape(-1)[3:].tolist() == [7] * 7
    words = np.zeros(2, np.uint32)
    assert impl.b64decode(b"QUJD", out=words).tobytes() == b"ABC"
    for empty in (np.array(5, np.uint8), np.zeros((0, 3), np.uint8), bytearray()):
        assert impl.b64decode(b"", out=empty).shape == (0,)
    with pytest.raises(ValueError, match="contiguous"):
        impl.b64decode(b"QUJD", out=np.zeros(8, np.uint8)[::2])
    with pytest.raises(TypeError, match="out must be"):
        impl.b64decode(b"QUJD", out=12)
    # An object array's items are pointers: writing bytes over them would crash the interpreter.
    for items in (np.array([None] * 8, dtype=object), np.zeros(2, "i4,i4")):
        with pytest.raises(TypeError, match="plain numbers or bytes"):
            impl.b64decode(b"QUJD", out=items)


def test_argument_errors_come_before_content_errors(impl):
    """The input's type, then the output buffer, then the size the padding promises, then the
    characters: the same exception in both implementations whatever is wrong at once."""
    with pytest.raises(TypeError, match="expected str"):
        impl.b64decode(12, out=np.zeros(8, object))
    with pytest.raises(TypeError, match="C-contiguous"):
        impl.b64decode(np.frombuffer(b"QUJDQUJD", np.uint8)[::2])
    with pytest.raises(TypeError, match="plain numbers"):
        impl.b64decode(b"QUJ", out=np.zeros(8, object))
    with pytest.raises(ValueError, match="needed"):
        impl.b64decode(b"\xdb\xfe\xd0\xfe", out=np.zeros(0, np.uint8))
    with pytest.raises(MalformedResponseError):
        impl.b64decode(b"\xdb\xfe\xd0\xfe", out=np.zeros(3, np.uint8))


def test_non_ascii_str_is_invalid_base64(impl):
    for text in ("\ud800", "QUJ\udfff", "QU\u00e9D"):
        with pytest.raises(MalformedResponseError, match="invalid base64"):
            impl.b64decode(text)


def _race(data: bytearray, flip, call, rounds: int) -> None:
    """Call ``call`` ``rounds`` times while another thread runs ``flip`` on ``data`` in a loop."""
    import threading

    stop = threading.Event()

    def writer():
        while not stop.is_set():
            flip(data)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(rounds):
            call()
    finally:
        stop.set()
        thread.join()


def test_decode_of_a_buffer_rewritten_meanwhile_stays_in_bounds(impl):
    # The padding decides the output size; another thread flips it between "AA" and "==".
    # Megabytes, so that the decode runs long enough without the GIL for the writer to act.
    data = bytearray(b"A" * (1 << 21))
    out = np.full(len(data), 0x5A, np.uint8)

    def flip(buf):
        buf[-2:] = b"=="
        buf[-2:] = b"AA"

    def call():
        for target in (None, out):
            try:
                got = impl.b64decode(data, out=target)
            except MalformedResponseError:
                continue
            if target is out:
                # The padding's bytes are the only ones a stale size could spill.
                assert (out[len(got):len(got) + 8] == 0x5A).all(), "a write past the decoded size"
                out[len(got):len(got) + 8] = 0x5A

    # The reference decodes a snapshot (bytes(data)): a few rounds show it, and take seconds.
    _race(data, flip, call, 3 if impl is PYTHON else 60)


def test_encode_of_a_buffer_resized_meanwhile(impl):
    data = bytearray(b"\x01" * (1 << 16))

    def flip(buf):
        try:
            buf.extend(b"\x02\x03")
            del buf[-2:]
        except BufferError:  # the buffer is exported to the encoder
            pass

    def call():
        text = impl.b64encode(data)
        assert len(base64.b64decode(text, validate=True)) in (len(data), len(data) - 2, len(data) + 2)

    _race(data, flip, call, 400)


def signed_check(data: bytes, itemsize: int) -> tuple[int, bool]:
    """What ``b64check_signed`` must give: the stdlib's canonical decoding, its size, and
    whether a complete little-endian signed integer of ``itemsize`` bytes in it is negative."""
    decoded = stdlib(data)
    if decoded is None:
        return -1, False
    values = np.frombuffer(decoded, f"<i{itemsize}", len(decoded) // itemsize)
    return len(decoded), bool((values < 0).any())


@given(st.binary(max_size=14000), st.sampled_from([1, 2, 4, 8]), st.booleans(), st.integers(0, 40))
def test_check_signed_is_the_decoding_checked(codec, raw, itemsize, signed, prefix):
    # Sizes across the 4096-character blocks the core decodes one at a time; ids below zero or
    # not; a header before the base64 read from start.
    if not signed:
        raw = bytes(b & 0x7F for b in raw)
    text = base64.b64encode(raw)
    head = b"x:" * (prefix // 2)
    assert codec.b64check_signed(head + text, itemsize, len(head)) == signed_check(text, itemsize)
    assert codec.b64check_signed((head + text).decode(), itemsize, len(head)) == signed_check(text, itemsize)


def test_check_signed_finds_one_negative_anywhere(codec):
    # One sign bit set at each place of a 3-block decoding (each block's first, last and
    # inner integers, the tail) and nothing else: found for its width, not for wider ones
    # unless it is their sign byte.
    size = 3 * 3072 + 6
    for at in (0, 1, 3071, 3072, 3073, 6143, 6145, 9215, 9216, size - 1):
        raw = bytearray(size)
        raw[at] = 0x80
        text = base64.b64encode(bytes(raw))
        for itemsize in (1, 2, 4, 8):
            assert codec.b64check_signed(text, itemsize) == signed_check(text, itemsize), (at, itemsize)


def test_check_signed_refuses_what_decode_refuses(codec):
    rng = random.Random(7)
    for n in (0, 3, 3072, 3075, 9000):
        text = bytearray(base64.b64encode(bytes(rng.randrange(128) for _ in range(n))))
        cases = [bytes(text)]
        for pos in {0, len(text) // 2, len(text) - 1} if text else ():
            for bad in (b"=", b"-", b"\\", b"\x00", b"\xff"):
                cases.append(bytes(text[:pos] + bad + text[pos + 1:]))
        cases += [bytes(text) + b"=", bytes(text[:-1]) if text else b"A"]
        for case in cases:
            assert codec.b64check_signed(case, 2) == signed_check(case, 2), (n, case[:8])
    assert codec.b64check_signed("é" + "AAAA", 2, 1) == (3, False)  # the characters before start are not read
    assert codec.b64check_signed("AAAé", 2) == (-1, False)


def test_check_signed_arguments(impl):
    for itemsize in (0, 3, 16, True, 2.0, None):
        with pytest.raises(ValueError, match="itemsize must be 1, 2, 4 or 8"):
            impl.b64check_signed(b"AAAA", itemsize)
    for start in (-1, 5):
        with pytest.raises(ValueError, match="outside the 4"):
            impl.b64check_signed(b"AAAA", 2, start)
    with pytest.raises(TypeError, match="start must be an int"):
        impl.b64check_signed(b"AAAA", 2, 1.0)
    with pytest.raises(TypeError):
        impl.b64check_signed(12, 2)
    assert impl.b64check_signed(memoryview(b"xxAAAA")[2:], 1) == (3, False)
