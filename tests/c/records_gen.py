"""The documents check_records.py feeds the record readers: number literals spelled every way
JSON allows (spell), and random logprobs.content arrays (Gen) written with random whitespace,
escapes and spellings (Writer), valid or mutated per rule."""

from __future__ import annotations

import math
import random
import struct
from decimal import Decimal

import numpy as np
from json_text import required_escape


def random_double(rng: random.Random) -> float:
    while True:
        k = rng.random()
        if k < 0.2:
            x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(63)))[0]
        elif k < 0.35:  # subnormals and the smallest normals
            x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(rng.choice([20, 52, 53]))))[0]
        elif k < 0.55:  # logprob-like
            x = -rng.expovariate(0.5)
        elif k < 0.7:  # float32 values (exact short-ish decimals)
            x = float(np.float32(-rng.expovariate(0.3)))
        else:
            x = rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30)
        if math.isfinite(x):
            return x


def exact_decimal(x: float) -> str:
    return format(Decimal(x), "f")


def spell(rng: random.Random, dec: Decimal | str, *, allow_int: bool = True) -> str:
    """A JSON number literal for the decimal dec (a Decimal or a digit string)."""
    d = Decimal(dec)
    sign = "-" if d.is_signed() else ""
    d = abs(d)
    t = d.as_tuple()
    digits = "".join(map(str, t.digits)).lstrip("0") or "0"
    exp = t.exponent + (len("".join(map(str, t.digits))) - len(digits) if digits != "0" else 0)
    # value = int(digits) * 10^exp
    if digits == "0":
        return sign + rng.choice(["0", "0.0", "0e0", "0.000E+5"] if allow_int else ["0.0", "0e0"])
    style = rng.randrange(5)
    if style == 0 or (style == 1 and not allow_int):
        # d.ddd e X
        e10 = exp + len(digits) - 1
        mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mant}{rng.choice('eE')}{rng.choice(['', '+'] if e10 >= 0 else [''])}{e10}"
    if style == 1 and exp >= 0 and exp < 40:
        return sign + digits + "0" * exp  # integer literal
    if style == 2:
        # plain positional (may be long)
        if exp >= 0:
            s = digits + "0" * exp + ".0" if (exp < 60) else digits + "e" + str(exp)
        else:
            k = -exp
            if k >= len(digits):
                s = "0." + "0" * (k - len(digits)) + digits
            else:
                s = digits[:-k] + "." + digits[-k:]
        if len(s) > 1500:
            s = digits + "e" + str(exp)
        return sign + s
    if style == 3:
        # digits with a shifted exponent and trailing zeros
        z = rng.randint(0, 5)
        return f"{sign}{digits}{'0' * z}e{exp - z}"
    # 0.digits e X
    e10 = exp + len(digits)
    return f"{sign}0.{digits}e{e10}"


# ---------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------


class Obj:
    """A JSON object as ordered (key, value) pairs: duplicate keys allowed."""

    def __init__(self, pairs):
        self.pairs = list(pairs)


class Num:
    """A number literal spelled exactly."""

    def __init__(self, text: str):
        self.text = text


WS = [" ", "\t", "\n", "\r"]


class Writer:
    def __init__(self, rng: random.Random, style: int):
        self.rng = rng
        self.style = style  # 0 compact, 1 spaces, 2 random whitespace
        self.escape_rate = rng.choice([0.0, 0.0, 0.05, 0.3])
        self.ascii = rng.random() < 0.5

    def ws(self) -> str:
        if self.style == 0:
            return ""
        if self.style == 1:
            return " " if self.rng.random() < 0.5 else ""
        return "".join(self.rng.choice(WS) for _ in range(self.rng.choice([0, 0, 1, 2, 5])))

    def string(self, s: str) -> str:
        out = ['"']
        for ch in s:
            o = ord(ch)
            escape = required_escape(ch)
            if escape is not None:
                out.append(escape)
            elif self.escape_rate and self.rng.random() < self.escape_rate:
                if ch == "/" and self.rng.random() < 0.5:
                    out.append("\\/")
                elif o > 0xFFFF:
                    o -= 0x10000
                    out.append(f"\\u{0xD800 + (o >> 10):04X}\\u{0xDC00 + (o & 0x3FF):04x}")
                else:
                    out.append(f"\\u{o:04x}" if self.rng.random() < 0.5 else f"\\u{o:04X}")
            elif o >= 0x80 and self.ascii:
                if o > 0xFFFF:
                    o -= 0x10000
                    out.append(f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}")
                else:
                    out.append(f"\\u{o:04x}")
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)

    def value(self, v) -> str:
        if isinstance(v, Obj):
            if not v.pairs:
                return "{" + self.ws() + "}"
            items = [self.ws() + self.string(k) + self.ws() + ":" + self.ws() + self.value(x) + self.ws()
                     for k, x in v.pairs]
            return "{" + ",".join(items) + "}"
        if isinstance(v, list):
            if not v:
                return "[" + self.ws() + "]"
            return "[" + ",".join(self.ws() + self.value(x) + self.ws() for x in v) + "]"
        if isinstance(v, Num):
            return v.text
        if isinstance(v, str):
            return self.string(v)
        if v is True:
            return "true"
        if v is False:
            return "false"
        if v is None:
            return "null"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return repr(v)
        raise TypeError(type(v))


DIGITS_UNICODE = ["\u0661\u0662", "\uff11", "\u00b2", "\u0967"]


class Gen:
    """Random content arrays; each entry carries what the spec says about it only through
    the bytes: expectations come from the reference run over json.loads."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.fault = rng.choice([0.0, 0.01, 0.05, 0.2])

    def logprob(self, positive_ok: bool = False):
        rng = self.rng
        k = rng.random()
        if k < 0.6:
            x = -rng.expovariate(0.4)
            if rng.random() < 0.3:
                x = float(np.float32(x))
            return Num(repr(x) if rng.random() < 0.7 else spell(rng, Decimal(repr(x))))
        if k < 0.7:
            return Num(rng.choice(["-1", "0", "-0", "-0.0", "0.0", "-2", "-1e-5", "-1E+1", "-9999.5",
                                   "-1e-320", "-4.9e-324", "-123456789012345678901234",
                                   "-0.000000000000000000000000000001"]))
        if k < 0.8:
            x = -rng.expovariate(0.4)
            s = format(Decimal(x), "e")
            mant, ex = s.split("e")
            mant = mant[: rng.choice([18, 19, 20, 22, 30, 60])]
            return Num(spell(rng, Decimal(mant + "e" + ex), allow_int=False))
        return Num(spell(rng, Decimal(-rng.random()).quantize(Decimal(10) ** -rng.randint(1, 25))))

    def bad_logprob(self):
        return self.rng.choice([
            None, True, False, "-0.5", "", [], [1], Obj([]), Obj([("logprob", Num("-1"))]),
            Num("-9999.0"), Num("-9999"), Num("-9999.000000000000000000001"), Num("-9.999e3"),
            Num("-99990000000000000000e-16"),
        ])

    def token_text(self, tid: int) -> str:
        rng = self.rng
        if rng.random() < 0.05:
            return "token_id:" + "0" * rng.randint(1, 30) + str(tid)
        return f"token_id:{tid}"

    def bad_token(self, tid: int):
        rng = self.rng
        return rng.choice([
            f"token_id: {tid}", f"token_id:{tid} ", f"Token_id:{tid}", f"token_id:+{tid}",
            f"token_id:-{tid}", "token_id:", f"token_id:{tid}a", f"token_id:{tid}.0",
            f"token_id:{2 ** 32}", f"token_id:{2 ** 32 + tid}", "token_id:" + "9" * rng.randint(11, 60),
            f"token_id:{rng.choice(DIGITS_UNICODE)}", f"tok_id:{tid}", f"{tid}", "",
            f"token_id:{tid}\u00e9", f"token_id\u0000:{tid}", f"token_id:{tid}\u0000",
            tid, None, True, [f"token_id:{tid}"], Obj([("token", f"token_id:{tid}")]),
        ])

    def bad_token_id(self, tid: int):
        rng = self.rng
        return rng.choice([
            -tid - 1, Num(f"{tid}.0"), Num(f"{tid}e0"), Num(f"{tid}E+0"), f"{tid}", True, False, None,
            2 ** 32, 2 ** 32 + tid, 2 ** 64 + tid, 10 ** 30, Num("-1"), [tid], Obj([]),
            Num(f"{tid}.5"),
        ])

    def id_pairs(self, tid: int, good: bool):
        """Key/value pairs naming tid (good) or breaking the id rule."""
        rng = self.rng
        form = rng.random()
        pairs = []
        if good:
            if form < 0.6:
                pairs.append(("token", self.token_text(tid)))
            elif form < 0.78:
                pairs.append(("token_id", tid if rng.random() < 0.9 else Num("-0") if tid == 0 else tid))
            elif form < 0.88:
                # llama.cpp's records: "id" beside decoded text
                pairs.append(("id", tid))
                if rng.random() < 0.5:
                    pairs.append(("token", rng.choice(["h", " the", self.bad_token(tid)])))
            else:
                # both, token_id decides; the token (and an "id") may even be wrong
                pairs.append(("token", self.token_text(tid) if rng.random() < 0.5 else self.bad_token(tid)))
                pairs.append(("token_id", tid))
                if rng.random() < 0.3:
                    pairs.append(("id", self.bad_token_id(tid)))
                if rng.random() < 0.5:
                    pairs.reverse()
            if rng.random() < 0.05:
                # an earlier occurrence that the last one replaces
                pairs.insert(0, rng.choice([("token", self.bad_token(tid)), ("token", f"token_id:{tid}")]))
        else:
            k = rng.random()
            if k < 0.4:
                pairs.append(("token", self.bad_token(tid)))
            elif k < 0.6:
                pairs.append(("token_id", self.bad_token_id(tid)))
            elif k < 0.75:
                # token_id present but bad: no fallback to a good token
                pairs.append(("token", f"token_id:{tid}"))
                pairs.append(("token_id", self.bad_token_id(tid)))
                if rng.random() < 0.5:
                    pairs.reverse()
            elif k < 0.8:
                # "id" present but bad: no fallback to a good token
                pairs.append(("token", f"token_id:{tid}"))
                pairs.append(("id", self.bad_token_id(tid)))
                if rng.random() < 0.5:
                    pairs.reverse()
            elif k < 0.88:
                # good then bad: last wins
                key = rng.choice(["token", "token_id"])
                pairs.append((key, f"token_id:{tid}" if key == "token" else tid))
                pairs.append((key, self.bad_token(tid) if key == "token" else self.bad_token_id(tid)))
            else:
                pass  # no id at all
        return pairs

    def decoy(self):
        rng = self.rng
        return rng.choice([
            ("bytes", [rng.randrange(256) for _ in range(rng.randint(0, 6))]),
            ("bytes", []),
            ("decoy", Obj([("logprob", Num("5")), ("token", "token_id:1"), ("token_id", 7),
                           ("top_logprobs", [1, 2])])),
            ("text", "a \"quoted\" [brace} \\ string " + "x" * rng.randint(0, 120)),
            ("nested", [[[Obj([("a", "]}")])]], "\\\"", Obj([]), [], "[{\"", None, True]),
            ("Token", "token_id:1"), ("logprobs", Num("1")), ("top_logprob", []),
            ("tok\u00e9n", "token_id:1"), ("token ", "x"), ("", ""),
            ("long_key_" + "k" * rng.randint(10, 80), Num("1.5e300")),
        ])

    def candidate(self, cid: int, faults: bool):
        rng = self.rng
        if faults and rng.random() < 0.03:
            return rng.choice([None, 5, "token_id:1", [], True, Num("-0.5")])
        good_id = not (faults and rng.random() < 0.04)
        pairs = self.id_pairs(cid, good_id)
        lp_kind = rng.random()
        if faults and lp_kind < 0.05:
            lp = rng.choice([self.bad_logprob(), Num("1e-5"), Num("0.5"), Num("1"), Num("0.0000010000001"),
                             Num("1e-6"), Num("1E-6"), Num("0.000001"), Num("1e-7"), Num("0"), Num("-0")])
            if lp is not None:
                pairs.append(("logprob", lp))
        else:
            pairs.append(("logprob", self.logprob()))
        if rng.random() < 0.3:
            pairs.append(self.decoy())
        if rng.random() < 0.03:
            pairs.append(("top_logprobs", [Obj([("token_id", 1), ("logprob", Num("3"))])]))
        if rng.random() < 0.04:
            key = rng.choice(["logprob", "token", "token_id"])
            pairs.insert(rng.randrange(len(pairs) + 1), (key, rng.choice([self.logprob(), "x", 1])))
        rng.shuffle(pairs) if rng.random() < 0.2 else None
        return Obj(pairs)

    def top_list(self, faults: bool):
        rng = self.rng
        k = rng.random()
        count = rng.choice([1, 2, 5, 20, 22]) if k < 0.9 else rng.choice([0, 63, 64, 65, 70, 130, 300])
        ids = rng.sample(range(0, 300000), count) if count < 300000 else []
        if faults and count > 1 and rng.random() < 0.5:
            i, j = sorted(rng.sample(range(count), 2))
            ids[j] = ids[i]  # duplicate
        return [self.candidate(c, faults) for c in ids]

    def entry(self, tid: int, want_top: bool):
        rng = self.rng
        faults = rng.random() < self.fault * 4
        if faults and rng.random() < 0.08:
            return rng.choice([None, 1, "token_id:1", [], [Obj([])], True, Num("-1.5")])
        pairs = self.id_pairs(tid, not (faults and rng.random() < 0.3))
        if faults and rng.random() < 0.3:
            lp = self.bad_logprob()
            if lp is not None:
                pairs.append(("logprob", lp))
        else:
            pairs.append(("logprob", self.logprob()))
        pairs.append(("bytes", [rng.randrange(256) for _ in range(rng.randint(0, 4))]))
        if want_top or rng.random() < 0.5:
            t = rng.random()
            if faults and t < 0.15:
                v = rng.choice([[], None, Obj([]), "x", 3])
                if v is not None:
                    pairs.append(("top_logprobs", v))
            else:
                pairs.append(("top_logprobs", self.top_list(faults)))
                if rng.random() < 0.05:
                    # replaced by a later top_logprobs (longer or shorter)
                    pairs.append(("top_logprobs", self.top_list(faults)))
                if rng.random() < 0.03:
                    pairs.insert(0, ("top_logprobs", self.top_list(True)))
        if rng.random() < 0.2:
            pairs.append(self.decoy())
        if rng.random() < 0.05:
            key = rng.choice(["logprob", "token", "token_id", "top_logprobs"])
            pairs.insert(rng.randrange(len(pairs) + 1), (key, rng.choice([self.logprob(), "x", 1, []])))
        if rng.random() < 0.3:
            rng.shuffle(pairs)
        return Obj(pairs)

    def document(self, want_top: bool):
        rng = self.rng
        n = rng.choice([0, 1, 2, 3, 5, 10, 30, 100]) if rng.random() < 0.95 else rng.choice([500, 2000])
        ids = [rng.randrange(0, 2 ** 32) if rng.random() < 0.05 else rng.randrange(0, 200000)
               for _ in range(n)]
        content = [self.entry(t, want_top) for t in ids]
        choice = Obj([("index", 0), ("text", ""), ("token_ids", ids),
                      ("logprobs", Obj([("content", content)] + ([("x", 1)] if rng.random() < 0.2 else []))),
                      ("finish_reason", "stop")])
        if rng.random() < 0.3:
            choice.pairs.reverse()
        return Obj([("request_id", "r"), ("choices", [choice])]), ids, content


def room_needed(content) -> int:
    """What tw_rec_count must report: per object entry, the longest top_logprobs array."""
    total = 0
    for e in content:
        if isinstance(e, Obj):
            lens = [len(v) for k, v in e.pairs if k == "top_logprobs" and isinstance(v, list)]
            total += max(lens, default=0)
    return total
