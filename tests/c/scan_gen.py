"""The documents check_scan.py feeds the scanner: response-like JSON (Gen) written with random
whitespace, escapes, duplicate keys and decoys, tricky numbers (NUMBERS) and strings, nesting
around orjson's depth limit; random mutations and truncations (mutate), sample-like responses
(sample_like) and the package's samples (full_samples)."""

from __future__ import annotations

import random
import sys

import clib
from json_text import required_escape

ROOT = clib.ROOT

T_DIGITS = str((2**54 - 1) * 2**970)
NUMBERS = [
    "0",
    "-0",
    "1",
    "-1",
    "7",
    "42",
    "151935",
    "4294967295",
    "4294967296",
    "-5",
    "0.0",
    "-0.0",
    "1.5",
    "-2.25",
    "1e5",
    "1E5",
    "1e-5",
    "1E+5",
    "-1.5e-7",
    "0e0",
    "0E-0",
    "2.5e+10",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "123456789012345678901234567890",
    "1e308",
    "1e309",
    "-1e309",
    "1e-400",
    "1e-99999999999",
    "0e99999999999",
    "1.7976931348623157e308",
    "1.7976931348623158e308",
    "1.7976931348623159e308",
    "-1.7976931348623159e308",
    T_DIGITS,
    str(int(T_DIGITS) - 1),
    str(int(T_DIGITS) + 1),
    T_DIGITS[0] + "." + T_DIGITS[1:] + "e308",
    "0.0000" + T_DIGITS + "e313",
    "0.0000" + str(int(T_DIGITS) - 1) + "e313",
    str(int(T_DIGITS) - 1) + ".999999999999999999999",
    T_DIGITS + ".0",
    "1" + "0" * 308,
    "1" + "0" * 309,
    "9" * 308,
    "9" * 309,
    "0." + "0" * 400 + "1",
    "-0.000000001e-5",
    "17976931348623158079e289",
    "17976931348623158080e289",
    "1797693134862315807937e287",
]
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
KEYS_CHOICE = [
    "index",
    "text",
    "token_ids",
    "logprobs",
    "completion_logprobs",
    "compact_logprobs",
    "sampling_mask",
    "kept_tokens",
    "routed_experts",
    "finish_reason",
    "stop_reason",
    "data",
    "ids",
    "counts",
    "offsets",
    "content",
]
KEYS_SUB = [
    "data",
    "offsets",
    "ids",
    "counts",
    "content",
    "shape",
    "dtype",
    "format",
    "num_top_logprobs",
    "token_ids",
    "start",
    "choices",
]
KEYS_TOP = [
    "request_id",
    "choices",
    "usage",
    "prompt_token_ids",
    "prompt_routed_experts",
    "kv_transfer_params",
    "token_ids",
    "data",
]


class Gen:
    def __init__(self, rng: random.Random):
        self.r = rng

    def ws(self) -> str:
        r = self.r
        if r.random() < 0.8:
            return ""
        return "".join(r.choice(" \t\n\r") for _ in range(r.randint(1, 3)))

    def number(self, tricky: float = 0.03) -> str:
        r = self.r
        if r.random() < tricky:
            return r.choice(NUMBERS)
        x = r.random()
        if x < 0.4:
            return str(r.randint(0, 200_000))
        if x < 0.55:
            return repr(r.uniform(-30, 0))
        if x < 0.62:
            return f"{r.uniform(-1, 1):.3e}"
        if x < 0.8:
            return str(r.randint(-(2**70), 2**70))
        return r.choice(["0", "-0", "0.0", "-0.0", "1E+2", "0e0"])

    def b64(self) -> str:
        r = self.r
        n = r.choice([0, 4, 8, 12, 40, 100, 400, 1500])
        s = "".join(r.choice(B64) for _ in range(n))
        if n and r.random() < 0.3:
            s = s[:-1] + "="
        return s

    def text(self) -> str:
        r = self.r
        pool = [
            "a",
            "b",
            "token_id:",
            "é",
            "漢",
            "😀",
            "\n",
            '"',
            "\\",
            "/",
            "\x00",
            "\x1f",
            "\u2028",
            "\ufffe",
            "\U0010ffff",
            "\ud7ff",
            "\ue000",
            " ",
            "\t",
            "data",
        ]
        return "".join(r.choice(pool) for _ in range(r.randint(0, 12)))

    def string(self, s: str) -> str:
        """s as a JSON string with random (valid) escaping."""
        r = self.r
        out = ['"']
        mode = r.random()
        for ch in s:
            o = ord(ch)
            escape = required_escape(ch, r)
            if escape is not None:
                out.append(escape)
            elif mode < 0.15 or (mode < 0.5 and r.random() < 0.1):
                if o > 0xFFFF:
                    o -= 0x10000
                    out.append(f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04X}")
                elif ch == "/" and r.random() < 0.5:
                    out.append("\\/")
                else:
                    out.append(f"\\u{o:04x}")
            elif ch == "/" and r.random() < 0.3:
                out.append("\\/")
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)

    def int_array(self) -> str:
        r = self.r
        n = r.choice([0, 1, 2, 3, 5, 20])
        items = []
        for _ in range(n):
            x = r.random()
            items.append(str(r.randint(0, 151_935)) if x < 0.9 else self.number())
        sep = "," if r.random() < 0.7 else self.ws() + "," + self.ws()
        return "[" + self.ws() + sep.join(items) + self.ws() + "]"

    def scalar(self) -> str:
        r = self.r
        x = r.random()
        if x < 0.15:
            return r.choice(["null", "true", "false"])
        if x < 0.45:
            return self.number()
        if x < 0.7:
            return self.string(self.b64())
        return self.string(self.text())

    def any(self, depth: int) -> str:
        r = self.r
        x = r.random()
        if depth > 4 or x < 0.5:
            return self.scalar()
        if x < 0.65:
            return self.int_array()
        if x < 0.8:
            return self.array([self.any(depth + 1) for _ in range(r.randint(0, 4))])
        return self.obj(
            [
                (r.choice(KEYS_SUB + KEYS_CHOICE), self.any(depth + 1))
                for _ in range(r.randint(0, 4))
            ]
        )

    def key(self, name: str) -> str:
        if self.r.random() < 0.1:
            # escape one character of the key
            i = self.r.randrange(len(name)) if name else 0
            if name:
                return '"' + name[:i] + f"\\u{ord(name[i]):04x}" + name[i + 1 :] + '"'
        return self.string(name)

    def obj(self, items) -> str:
        parts = [
            self.ws() + self.key(k) + self.ws() + ":" + self.ws() + v + self.ws() for k, v in items
        ]
        return "{" + ",".join(parts) + (self.ws() if not parts else "") + "}"

    def array(self, items) -> str:
        return "[" + ",".join(self.ws() + v + self.ws() for v in items) + "]"

    def field_value(self, key: str, depth: int) -> str:
        """A value for a key of a choice: mostly the right shape, sometimes not."""
        r = self.r
        x = r.random()
        if x < 0.15:
            return self.any(depth + 1)
        if key in ("token_ids", "offsets"):
            return self.int_array()
        if key == "sampling_mask" and r.random() < 0.4:
            return self.array([self.int_array() for _ in range(r.randint(0, 4))])
        if key == "routed_experts" and r.random() < 0.3:
            return self.string(self.b64())
        if key == "kept_tokens":
            return self.obj(
                [
                    (k, self.string(self.b64()) if r.random() < 0.8 else self.any(9))
                    for k in r.sample(["ids", "counts", "data", "ids"], r.randint(0, 4))
                ]
            )
        if key == "logprobs":
            if r.random() < 0.3:
                return "null"
            entries = [
                self.obj(
                    [
                        ("token", self.string(f"token_id:{r.randint(0, 99)}")),
                        ("logprob", self.number()),
                        ("token_ids", self.int_array()),
                        ("compact_logprobs", self.obj([("data", self.string("x"))])),
                    ]
                )
                for _ in range(r.randint(0, 3))
            ]
            return self.obj(
                [("content", self.array(entries))]
                + [("data", self.string(self.b64()))] * r.randint(0, 1)
            )
        if key in ("completion_logprobs", "compact_logprobs", "routed_experts"):
            if r.random() < 0.1:
                return "null"
            keys = ["data", "shape", "dtype", "offsets", "format", "data", "num_top_logprobs"]
            items = []
            for k in r.sample(keys, r.randint(0, len(keys))):
                if k == "data":
                    items.append((k, self.string(self.b64()) if r.random() < 0.9 else self.any(9)))
                elif k in ("offsets", "shape"):
                    items.append((k, self.int_array()))
                else:
                    items.append((k, self.scalar()))
            return self.obj(items)
        if key == "sampling_mask":
            items = []
            for k in r.sample(["ids", "counts", "ids", "data"], r.randint(0, 4)):
                inner = [
                    ("data", self.string(self.b64())),
                    ("shape", self.int_array()),
                    ("dtype", self.string("int32")),
                ]
                r.shuffle(inner)
                items.append(
                    (k, self.obj(inner[: r.randint(0, 3)]) if r.random() < 0.9 else self.any(9))
                )
            return self.obj(items)
        return self.any(depth + 1)

    def choice(self) -> str:
        r = self.r
        if r.random() < 0.08:
            return self.any(2)
        keys = r.sample(KEYS_CHOICE, r.randint(0, len(KEYS_CHOICE)))
        if r.random() < 0.9 and "token_ids" not in keys:
            keys.append("token_ids")
        r.shuffle(keys)
        if r.random() < 0.3 and keys:
            keys.append(r.choice(keys))  # a duplicate key
        return self.obj([(k, self.field_value(k, 1)) for k in keys])

    def document(self) -> str:
        r = self.r
        if r.random() < 0.05:
            return self.ws() + self.any(0) + self.ws()
        keys = r.sample(KEYS_TOP, r.randint(1, len(KEYS_TOP)))
        if "choices" not in keys and r.random() < 0.9:
            keys.append("choices")
        if r.random() < 0.2:
            keys.append(r.choice(keys))
        r.shuffle(keys)
        items = []
        for k in keys:
            if k == "choices":
                v = (
                    self.array([self.choice() for _ in range(r.randint(0, 4))])
                    if r.random() < 0.93
                    else self.any(1)
                )
            elif k == "prompt_token_ids":
                v = self.int_array()
            elif k == "usage":
                v = self.obj(
                    [
                        ("prompt_tokens", self.number()),
                        ("token_ids", self.int_array()),
                        ("choices", self.array([self.choice()])),
                    ]
                )
            else:
                v = self.any(1)
            items.append((k, v))
        return self.ws() + self.obj(items) + self.ws()

    def deep(self) -> str:
        r = self.r
        depth = r.choice([1022, 1023, 1024, 1025, 1026, 3000])
        opens, closes = [], []
        for _ in range(depth):
            if r.random() < 0.5:
                opens.append("[")
                closes.append("]")
            else:
                opens.append('{"choices":')
                closes.append("}")
        inner = r.choice(["1", "[]", "{}", '"x"', "[1]"])
        return "".join(opens) + inner + "".join(reversed(closes))


MUT_BYTES = b'{}[],:"\\/ \t\n\r0123456789-+.eEtrufalsn\x00\x1f\x7f\x80\xbf\xc0\xc3\xa9\xed\xa0\xef\xbb\xf0\xf4\x90\xff'


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        kind = rng.random()
        at = rng.randrange(len(b) + 1)
        byte = rng.choice(MUT_BYTES) if rng.random() < 0.8 else rng.randrange(256)
        if kind < 0.3 and at < len(b):
            b[at] = byte
        elif kind < 0.55:
            b.insert(at, byte)
        elif kind < 0.75 and at < len(b):
            del b[at]
        elif kind < 0.85:
            del b[at:]
        elif kind < 0.93 and len(b) > 2:
            j = rng.randrange(len(b))
            lo, hi = sorted((at, j))
            b[at:at] = b[lo : min(hi, lo + 64)]
        else:
            snippet = rng.choice(
                [
                    b"\\u",
                    b"\\ud800",
                    b"\\udc00",
                    b"\\u0041",
                    b'\\"',
                    b"e309",
                    b".",
                    b"-",
                    b"00",
                    b",",
                    b",]",
                    b",}",
                    b'"a":',
                    b"null",
                    b"\xed\xa0\x80",
                    b"\xf4\x90\x80\x80",
                    b"\xc0\xaf",
                    b"1e-999",
                ]
            )
            b[at:at] = snippet
    return bytes(b)


def sample_like(rng: random.Random) -> list[bytes]:
    """Small responses built the way the samples are (tokenwire.samples)."""
    sys.path.insert(0, str(ROOT / "src"))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from tokenwire import samples as S
    docs = []
    for seed in range(6):
        ev = S.evidence(12, 3, seed=seed, support=True)
        for transport in ("native", "packed", "compact"):
            for mask in (None, "list", "csr"):
                choice = S.build_choice(
                    ev,
                    transport=transport,
                    mask=mask,
                    routed=S.routing(11, layers=2, topk=2, seed=seed),
                    routed_form=("dict", "npy")[seed % 2],
                )
                if seed == 5:
                    choice["kept_tokens"] = {
                        "ids": S.b64(b"\x01\x00\x00\x00"),
                        "counts": S.b64(b"\x01\x00\x00\x00"),
                    }
                docs.append(S.dumps(S.response([choice, choice], prompt_tokens=8, seed=seed)))
    return docs


def full_samples() -> list[tuple[str, bytes]]:
    sys.path.insert(0, str(ROOT / "src"))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from tokenwire import samples as S
    return [(name, S.sample(name)) for name in S.SAMPLES]
