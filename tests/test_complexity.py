"""Parse time grows linearly with adversarial inputs: many choices, many superseded duplicate
keys, deep nesting, long escaped strings. Each input is parsed at size n and 4n; a linear
parser takes about 4x as long, a quadratic one 16x. The bound (8x) is a ratio of two
CPU times in one process (tests/growth.py: Python's cyclic collector paused, whose full passes
over many new lists are the interpreter's cost, not ours); the sizes keep both inputs out of
the CPU caches."""

from __future__ import annotations

import os
import json

import pytest

import tokenwire

from . import growth


def _many_choices(n: int) -> bytes:
    choice = {"token_ids": [1], "logprobs": {"content": [{"token": "token_id:1", "logprob": -0.5}]}}
    return json.dumps({"choices": [choice] * n}).encode()


def _duplicate_keys(n: int) -> bytes:
    # Every choice repeats "token_ids" many times; the last occurrence wins.
    dup = ",".join(['"token_ids":[1]'] * 50)
    choice = "{" + dup + ',"logprobs":{"content":[{"token":"token_id:1","logprob":-0.5}]}}'
    return ('{"choices":[' + ",".join([choice] * (n // 50)) + "]}").encode()


def _nesting(n: int) -> bytes:
    # Deep-but-legal nesting in a payload value, many times over.
    value = "[" * 100 + "]" * 100
    return json.dumps({"choices": [{"token_ids": [1], "logprobs": {"content": [
        {"token": "token_id:1", "logprob": -0.5}]}}]}).encode()[:-1] + (
        ',"extra":[' + ",".join([value] * (n // 100)) + "]}").encode()


def _escapes(n: int) -> bytes:
    return json.dumps({"choices": [{"token_ids": [1], "logprobs": {"content": [
        {"token": "token_id:1", "logprob": -0.5, "text": "\\\"\u00e9\n" * n}]}}]}).encode()


INPUTS = {"many_choices": (_many_choices, 5000), "duplicate_keys": (_duplicate_keys, 100000),
          "nesting": (_nesting, 200000), "escapes": (_escapes, 1000000)}


def _parsing(parse, raw: bytes):
    """A call that parses ``raw``, a refusal being as good as a result."""
    def call() -> None:
        try:
            parse(raw)
        except tokenwire.MalformedResponseError:
            pass
    return call


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_parse_time_grows_linearly(impl, name):
    build, n = INPUTS[name]
    parse = impl.parse_generate_response
    ratio = growth.ratio(_parsing(parse, build(n)), _parsing(parse, build(4 * n)))
    assert ratio < growth.BOUND, f"{name}: 4x the input took {ratio:.1f}x the time"


# --- by-handle payloads: the overlap check and the path work ---------------------------------------


def _ratio(parse, build, n: int) -> float:
    """The time of ``build(4 * n)`` over ``build(n)``'s (tests/growth.py)."""
    return growth.ratio(_parsing(parse, build(n)), _parsing(parse, build(4 * n)))


def _payload_choices(root, n: int) -> bytes:
    """n choices, each reading its own one routing row of one file under ``root``: the byte
    ranges of the whole response are checked for overlaps, never re-sorted a choice."""
    rows = 6  # one row of 2 layers x top-3, uint8
    (root / "rows.bin").write_bytes(bytes(rows * n))
    choice = {"token_ids": [1], "logprobs": {"content": [{"token": "token_id:1", "logprob": -0.5}]}}
    choices = [dict(choice, index=i, payload=[["routed_experts", "rows.bin", rows * i, 0, 1, "uint8", [2, 3]]])
               for i in range(n)]
    return json.dumps({"prompt_token_ids": [5], "choices": choices}).encode()


def test_payload_overlap_check_grows_n_log_n(impl, tmp_path):
    ratio = _ratio(lambda raw: impl.parse_generate_response(raw, payload_root=tmp_path),
                   lambda n: _payload_choices(tmp_path, n), 1000)
    assert ratio < growth.BOUND, f"4x the payload choices took {ratio:.1f}x the time"


def test_payload_path_work_grows_linearly(impl, tmp_path):
    """Names that walk a deep directory tree (250 and 1,000 levels, names under the 4,096-byte
    bound): each component is looked up once, from its directory."""
    depth = 1000
    directory = os.open(tmp_path, os.O_RDONLY)
    for _ in range(depth):  # one level at a time (os.makedirs recurses a level)
        os.mkdir("d", dir_fd=directory)
        below = os.open("d", os.O_RDONLY, dir_fd=directory)
        os.close(directory)
        directory = below
    os.close(directory)
    choice = {"token_ids": [1], "logprobs": {"content": [{"token": "token_id:1", "logprob": -0.5}]}}

    def build(n: int) -> bytes:  # 10 choices, each a distinct file at depth n / 4 (names of about n / 2 bytes)
        for i in range(10):
            (tmp_path / ("d/" * (n // 4) + f"{i}.bin")).write_bytes(bytes(6))
        choices = [dict(choice, index=i, payload=[["routed_experts", "d/" * (n // 4) + f"{i}.bin", 0, 0, 1, "uint8",
                                                   [2, 3]]]) for i in range(10)]
        return json.dumps({"prompt_token_ids": [5], "choices": choices}).encode()

    try:
        ratio = _ratio(lambda raw: impl.parse_generate_response(raw, payload_root=tmp_path), build, depth)
    finally:
        _remove_chain(tmp_path)
    assert ratio < growth.BOUND, f"4x the name's length took {ratio:.1f}x the time"


def _remove_chain(root) -> None:
    """Removes ``root/d/d/...`` a level at a time, each level's child moved up before the level
    goes: pytest's own clean-up (``shutil.rmtree``) recurses a Python frame per level and a
    1,000-deep tree exhausts it."""
    level, moved = root / "d", root / "d-next"
    while level.is_dir():
        for entry in level.iterdir():
            if entry.name != "d":
                entry.unlink()
        if (level / "d").is_dir():
            os.rename(level / "d", moved)
        os.rmdir(level)
        if moved.is_dir():
            os.rename(moved, level)
