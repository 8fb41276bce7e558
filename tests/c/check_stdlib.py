#!/usr/bin/env python3
"""Differential check of csrc/codecs/tw_base64.c against CPython's base64 module.

Builds the C file as a shared library in a temporary directory (or loads the
one given with --lib), then compares, on every available path:
  * tw_b64_encode with base64.b64encode,
  * tw_b64_decode with base64.b64decode(s, validate=True): same accept/reject
    decision and same bytes.  The one tolerated difference is CPython's
    acceptance of '=' characters after a complete final quantum (e.g.
    b"AAAA=" or b"AAAA===="; accepted by 3.11/3.12), which is not canonical
    base64 and which tw_b64_decode rejects.

Usage: python3 tests/c/check_stdlib.py [--lib PATH] [--cases N]
"""
import argparse
import base64
import binascii
import ctypes
import itertools
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "..", "..", "csrc")
SRC = [os.path.join(CSRC, "codecs", "tw_base64.c"), os.path.join(CSRC, "base", "tw_cpu.c")]
ALPHA = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
EXCESS_PAD = re.compile(rb"(?:[A-Za-z0-9+/]{4})*=+")


def build(tmpdir):
    cc = os.environ.get("CC", "cc")
    out = os.path.join(tmpdir, "libtw_base64.so")
    subprocess.check_call([cc, "-O2", "-shared", "-fPIC", "-I", CSRC, "-o", out, *SRC])
    return out


def load(path):
    lib = ctypes.CDLL(path)
    lib.tw_b64_decode.restype = ctypes.c_ssize_t
    lib.tw_b64_decode.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                  ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)]
    lib.tw_b64_decoded_size.restype = ctypes.c_ssize_t
    lib.tw_b64_decoded_size.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.tw_b64_encode.restype = ctypes.c_size_t
    lib.tw_b64_encode.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int]
    lib.tw_b64_encoded_size.restype = ctypes.c_size_t
    lib.tw_b64_encoded_size.argtypes = [ctypes.c_size_t]
    lib.tw_path_available.restype = ctypes.c_int
    lib.tw_path_available.argtypes = [ctypes.c_int]
    lib.tw_path_name.restype = ctypes.c_char_p
    lib.tw_path_name.argtypes = [ctypes.c_int]
    return lib


def expected_err_pos(s):
    """The header's definition of err_pos, transcribed."""
    n = len(s)
    for i, c in enumerate(s):
        if c in ALPHA:
            continue
        if c == 0x3D and (i == n - 1 or (i == n - 2 and s[n - 1] == 0x3D)):
            continue
        return i
    return n


class Checker:
    def __init__(self, lib):
        self.lib = lib
        self.paths = [p for p in (1, 2, 3, 4) if lib.tw_path_available(p)]
        self.cases = 0
        self.tolerated = 0
        self.failures = []

    def fail(self, msg):
        if len(self.failures) < 20:
            print("FAIL:", msg)
        self.failures.append(msg)

    def decode(self, s):
        self.cases += 1
        try:
            ref = base64.b64decode(s, validate=True)
        except binascii.Error:
            ref = None
        cap = self.lib.tw_b64_decoded_size(s, len(s))
        buf = ctypes.create_string_buffer(max(cap, 0) + 1)
        for p in self.paths:
            err = ctypes.c_size_t(12345)
            r = self.lib.tw_b64_decode(s, len(s), buf, max(cap, 0), p, ctypes.byref(err))
            name = self.lib.tw_path_name(p).decode()
            if r >= 0:
                got = buf.raw[:r]
                if ref is None:
                    self.fail(f"{name}: accepted {s!r}, stdlib rejects")
                elif got != ref:
                    self.fail(f"{name}: {s!r} -> {got!r}, stdlib {ref!r}")
                elif cap != r:
                    self.fail(f"{name}: decoded_size {cap} != {r} for {s!r}")
            else:
                if ref is not None:
                    if EXCESS_PAD.fullmatch(s):
                        self.tolerated += 1
                    else:
                        self.fail(f"{name}: rejected {s!r}, stdlib gives {ref!r}")
                if err.value != expected_err_pos(s):
                    self.fail(f"{name}: err_pos {err.value} != {expected_err_pos(s)} for {s!r}")

    def encode(self, data):
        self.cases += 1
        ref = base64.b64encode(data)
        n = self.lib.tw_b64_encoded_size(len(data))
        for p in self.paths:
            buf = ctypes.create_string_buffer(n + 1)
            r = self.lib.tw_b64_encode(data, len(data), buf, p)
            if r != len(ref) or buf.raw[:r] != ref:
                self.fail(f"encode path {p} len {len(data)} differs")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib")
    ap.add_argument("--cases", type=int, default=200000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)

    with tempfile.TemporaryDirectory(prefix="tw_b64_") as tmp:
        lib = load(args.lib or build(tmp))
        ck = Checker(lib)
        print("python", sys.version.split()[0], "paths",
              [lib.tw_path_name(p).decode() for p in ck.paths])

        # Every string of length <= 6 over a small alphabet that covers all
        # classes (alphabet, '=', whitespace, other ASCII, high bytes).
        small = [b"A", b"Q", b"/", b"+", b"=", b"!", b"\n", b"\x80", b"z"]
        for n in range(7):
            for t in itertools.product(small, repeat=n):
                ck.decode(b"".join(t))

        # Encoder, lengths 0..300 and random larger ones.
        for n in list(range(301)) + [rng.randrange(300, 5000) for _ in range(300)]:
            ck.encode(rng.randbytes(n))

        # Random valid strings with mutations at random places.
        specials = b"=\x00\x80\xff@[`{:/+,-._* \n\r\tAZaz09\x7f"
        for _ in range(args.cases):
            n = rng.choice((rng.randrange(64), rng.randrange(900)))
            s = bytearray(base64.b64encode(rng.randbytes(n)))
            for _ in range(rng.randrange(4)):
                if not s:
                    break
                at = rng.choice((rng.randrange(len(s)), len(s) - 1 - rng.randrange(min(8, len(s))),
                                 rng.randrange(min(300, len(s)))))
                s[at] = rng.choice((rng.randrange(256), rng.choice(ALPHA),
                                    rng.choice(specials), rng.choice(specials)))
            r = rng.randrange(20)
            if r == 0 and s:
                del s[-rng.randrange(1, 4):]
            elif r == 1:
                s += bytes([rng.choice(b"=A\n")]) * rng.randrange(1, 5)
            ck.decode(bytes(s))

    print(f"{ck.cases} cases, {ck.tolerated} tolerated (stdlib accepts excess '=' after a "
          f"complete quantum), {len(ck.failures)} failures")
    return 1 if ck.failures else 0


if __name__ == "__main__":
    sys.exit(main())
