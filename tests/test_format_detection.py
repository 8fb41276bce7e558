"""``--format auto`` decides a record's format by its parsed keys: on records of every format,
spelled with ``\\u`` escapes in keys and strings and with their keys in any order, the verdict
of ``tokenwire.audit`` (and of ``tokenwire check``) is the one the parser of the detected
format gives on the same bytes."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import tokenwire
from tokenwire.auditing import _formats

from . import openai_strategies as ostr
from .test_cli import MUTATIONS, _compact, _native, _packed, check, write


def _string(text: str, rng: random.Random, share: float) -> str:
    """A JSON string with about ``share`` of its characters written as ``\\uXXXX``."""
    out = []
    for ch in text:
        if rng.random() < share and ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(json.dumps(ch, ensure_ascii=False)[1:-1])
    return '"' + "".join(out) + '"'


def spelled(value: Any, rng: random.Random) -> str:
    """``value`` as JSON with every object's keys shuffled, most keys and some strings escaped."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return "{" + ",".join(f"{_string(k, rng, 0.4)}:{spelled(v, rng)}" for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(spelled(v, rng) for v in value) + "]"
    if isinstance(value, str):
        return _string(value, rng, 0.1)
    return json.dumps(value)


def _openai(shape: ostr.Format, ev: ostr.Evidence, change: str, amount: int) -> Any:
    doc = shape.build([ev])
    choice = shape.choices(doc)[0]
    if change == "usage":
        shape.set_usage(doc, len(ev.ids) + amount)
    elif change == "null logprob" and ev.ids:
        shape.set_value(choice, amount % len(ev.ids), None)
    elif change == "no ids":
        shape.strip_ids(choice)
    elif change == "object" and isinstance(doc, dict) and "object" in doc:
        doc["object"] = {"chat.completion": "text_completion"}.get(doc["object"], "chat.completion")
    return doc


_GENERATE = [_packed(), _native(), _compact("csr"), *(m()[0] for m in MUTATIONS)]


@st.composite
def records(draw) -> Any:
    if draw(st.booleans()):
        return copy.deepcopy(draw(st.sampled_from(_GENERATE)))
    shape = draw(st.sampled_from(ostr.FORMATS))
    change = draw(st.sampled_from(["none", "usage", "null logprob", "no ids", "object"]))
    amount = draw(st.sampled_from([-2, -1, 1, 2, 2**40]))
    return _openai(shape, draw(ostr.evidences(max_tokens=6)), change, amount)


def expected(raw: bytes) -> tuple[str | None, bool, str | None]:
    """(format, valid, message) by the parser of the format the parsed keys name."""
    document = json.loads(raw)
    fmt = next((f for f in _formats.FORMATS.values() if f.detect(document)), None)
    if fmt is None:
        return None, False, None
    try:
        fmt.validate(raw, _formats.ParseOptions())
    except tokenwire.MalformedResponseError as exc:
        return fmt.name, False, exc.reason
    return fmt.name, True, None


def _verdict(verdict: Any) -> tuple[str | None, bool, str | None]:
    message = verdict["message"] if isinstance(verdict, dict) else verdict.message
    valid = verdict["valid"] if isinstance(verdict, dict) else verdict.valid
    fmt = verdict["format"] if isinstance(verdict, dict) else verdict.format
    return fmt, valid, None if fmt is None else message


@given(records(), st.randoms(use_true_random=False))
def test_audit_is_the_detected_formats_parser_on_any_spelling(document, rng):
    raw = spelled(document, rng).encode()
    assert json.loads(raw) == document
    assert _verdict(tokenwire.audit(raw)) == expected(raw)


def test_check_is_the_detected_formats_parser_on_any_spelling(tmp_path, capsys):
    rng = random.Random(34)
    raws = []
    for i, shape in enumerate(ostr.FORMATS * 6):
        ev = ostr.evidence([5 + i % 7, 9, 11 + i % 3], [-0.5, -1.0, -2.0])
        change = ["none", "usage", "null logprob", "no ids", "object"][i % 5]
        raws.append(spelled(_openai(shape, ev, change, [1, -1, 2**40][i % 3]), rng).encode())
    raws += [spelled(doc, rng).encode() for doc in _GENERATE]
    path = write(tmp_path / "spelled.jsonl", raws)
    out = tmp_path / "verdicts.jsonl"
    status, _, _ = check(capsys, path, "--records", str(out))
    assert status == 1
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [_verdict(row) for row in rows] == [expected(raw) for raw in raws]
