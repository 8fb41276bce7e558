"""Hash flooding: inputs built to collide under a fixed hash take linear time.

Every hash table of the compiled core takes ids or keys the response chooses. Each input here
is built from the constants the tables once slotted with (fuzz/_collide.py: a fixed
multiplier's inverse, the ids whose fixed 64-bit product has its top bits zero, FNV-1a keys
that share their low bits): a table with such a hash lines them up in one probe cluster and
takes quadratic time, the keyed hashes of csrc/base/tw_hash.h do not.
Each input is parsed at size n and 4n; a linear parse takes about 4x as long, a quadratic
one 16x. The bound (8x) is a ratio of two CPU times in one process (tests/growth.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import tokenwire
import tokenwire.read._select

from .growth import BOUND, ratio as _ratio

_spec = importlib.util.spec_from_file_location(
    "_collide", Path(__file__).resolve().parent.parent / "fuzz" / "_collide.py")
collide = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(collide)

N = 2048  # candidates or keys at the small size; the large one is 4 * N


def _response(shape, ids) -> bytes:
    """One token whose candidates are ids (the sampled one first), every value distinct; a
    compact row's head drawn from all of them."""
    values = collide.distinct_values(len(ids))
    if shape is collide.compact:
        return shape(ids, values, ids[0], len(ids))
    return shape(ids, values, ids[0], values[0])


def _compact_rows(n: int) -> bytes:
    """The row checks alone (no head): the compact-row table of csrc/rules/tw_validate.c."""
    ids = collide.ids_one_cluster32(n)
    return collide.compact(ids, collide.distinct_values(n), ids[0], 0)


WIDE, KEYS = collide.ids_top_bits_zero64, collide.keys_low_bits_shared
GENERATE, CHAT = "parse_generate_response", "parse_chat_completions_response"
SGLANG, COMPLETIONS = "parse_sglang_generate_response", "parse_completions_response"
# name: (parser, its top_k, the response of n colliding ids or keys; of 2n keys, whose parse
# does more besides the table)
INPUTS = {
    "compact_rows": (GENERATE, None, _compact_rows),
    "compact_candidates": (GENERATE, 1, lambda n: _response(collide.compact, WIDE(n))),
    "native_top_logprobs": (GENERATE, 1, lambda n: _response(collide.native, WIDE(n))),
    "chat_top_logprobs": (CHAT, 1, lambda n: _response(collide.chat, WIDE(n))),
    "sglang_top_logprobs": (SGLANG, 1, lambda n: _response(collide.sglang, WIDE(n))),
    "keyed_top_logprobs": (COMPLETIONS, 1, lambda n: _response(collide.completions, KEYS(2 * n))),
}


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_colliding_inputs_parse_in_linear_time(impl, name):
    parser, top_k, build = INPUTS[name]
    parse = getattr(impl, parser)
    small, large = build(N), build(4 * N)
    parse(small, top_k=top_k)  # valid: a flooded table is slow, not wrong
    ratio = _ratio(lambda: parse(small, top_k=top_k), lambda: parse(large, top_k=top_k))
    assert ratio < BOUND, f"{name}: 4x the colliding input took {ratio:.1f}x the time"


def test_select_heads_of_colliding_compact_rows_in_linear_time(impl, monkeypatch):
    """select_heads(num_top=...) on one compact row of colliding ids (the candidates table)."""
    monkeypatch.setattr(tokenwire.read._select, "kernels", impl)

    def call(n):
        ids = np.asarray(WIDE(n), np.int64)
        lps = -np.arange(1, n + 1, dtype=np.float32) / n
        args = (ids, lps, [0, n], ids[:1], lps[:1].astype(np.float64), 1)
        return lambda: tokenwire.select_heads(*args, num_top=n)

    small, large = call(N), call(4 * N)
    ratio = _ratio(small, large)
    assert ratio < BOUND, f"select_heads: 4x the colliding row took {ratio:.1f}x the time"
