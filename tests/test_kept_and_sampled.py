"""prime-rl's ``kept_tokens`` (zero counts: no kept set) and vLLM's ``logprobs.sampled``
(``return_token_logprobs``), on both implementations, through the writer and the drop-in."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError, samples
from tokenwire.compat import renderers as compat


def prime_rl_kept_tokens(rows: list[list[int]], num_tokens: int) -> dict[str, str] | None:
    """``kept_tokens`` laid out as prime-rl's sampling-replay server writes it: the rows cut
    or padded with empty rows to the completion's tokens (stop trimming leaves fewer tokens
    than sampling steps), ``counts`` int32 per token (0: no kept set), ``ids`` the rows'
    int32 concatenation, each as bare base64 of the raw bytes; None when no row has ids."""
    rows = [np.asarray(r, dtype=np.int32) for r in rows[:num_tokens]]
    rows += [np.empty(0, dtype=np.int32)] * (num_tokens - len(rows))
    counts = np.array([len(r) for r in rows], dtype=np.int32)
    if not int(counts.sum()):
        return None
    ids = np.concatenate(rows).astype(np.int32)
    return {
        "ids": base64.b64encode(ids.tobytes()).decode("ascii"),
        "counts": base64.b64encode(counts.tobytes()).decode("ascii"),
    }


def entry(token: int, logprob: float, top: list[tuple[int, float]]) -> dict[str, Any]:
    return {
        "token": f"token_id:{token}",
        "logprob": logprob,
        "top_logprobs": [{"token": f"token_id:{i}", "logprob": p} for i, p in top],
    }


L = math.log
# Four tokens of native records, each with a head of at least 3 candidates. Token 0's
# processed distribution is {5: .5, 9: .5}, token 2's {7: 1}: the kept sets renormalize.
TOKENS = [5, 6, 7, 8]
CONTENT = [
    entry(5, L(0.5), [(5, L(0.5)), (9, L(0.5)), (1, -9999.0)]),
    entry(6, L(0.6), [(6, L(0.6)), (2, L(0.3)), (3, L(0.1)), (4, -20.0)]),
    entry(7, 0.0, [(7, 0.0), (2, -9999.0), (3, -9999.0)]),
    entry(8, L(0.5), [(8, L(0.5)), (1, L(0.3)), (2, -9999.0)]),
]
SAMPLED = [e["logprob"] for e in CONTENT]


def body(kept: Any = None, *, content: Any = CONTENT, sampled: Any = None, extra: Any = None) -> bytes:
    logprobs: dict[str, Any] = {"content": content}
    if sampled is not None:
        logprobs["sampled"] = sampled
    choice: dict[str, Any] = {"index": 0, "token_ids": list(TOKENS), "logprobs": logprobs, "finish_reason": "stop"}
    if kept is not None:
        choice["kept_tokens"] = kept
    choice.update(extra or {})
    return json.dumps({"request_id": "r", "choices": [choice]}).encode()


def fails(impl, raw: bytes, top_k: int | None = None) -> MalformedResponseError:
    with pytest.raises(MalformedResponseError) as info:
        impl.parse_generate_response(raw, top_k=top_k)
    return info.value


# --- kept_tokens -------------------------------------------------------------------------------


_support_rows = st.lists(
    st.tuples(st.lists(st.integers(0, 40), max_size=60), st.integers(-1, 41)), min_size=1, max_size=40
)


@settings(max_examples=150)
@given(rows=_support_rows, absent_ok=st.booleans())
def test_first_bad_support_is_the_reference(impl, rows, absent_ok):
    """The support-row kernel against the reference's, empty rows absent (kept_tokens) or bad
    (sampling_mask), rows short and long enough for each vector and scalar branch."""
    from tokenwire.kernels import python as reference

    lengths = [len(ids) for ids, _ in rows]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.array([i for ids, _ in rows for i in ids], dtype=np.int32)
    sampled = np.array([s for _, s in rows], dtype=np.int64)  # -1, 41: never in a row
    support = tokenwire.Ragged(offsets, values)
    want = reference.first_bad_support(sampled, support, len(rows), absent_ok=absent_ok)
    assert impl.first_bad_support(sampled, support, len(rows), absent_ok=absent_ok) == want


def test_zero_counts_in_the_middle(impl):
    kept = prime_rl_kept_tokens([[5, 9], [], [7], []], 4)
    choice = impl.parse_generate_response(body(kept)).choices[0]
    assert choice.sampling_mask.to_lists() == [[5, 9], [], [7], []]
    assert choice.sampling_mask_present.tolist() == [True, False, True, False]
    assert choice.sampling_mask_present.dtype == np.bool_
    # With a head: a kept set is the head; a token without one takes the top-k rule.
    choice = impl.parse_generate_response(body(kept), top_k=1).choices[0]
    assert choice.completion_top_ids.to_lists() == [[5, 9], [6], [7], [8]]
    assert choice.completion_top_logprobs.to_lists() == [[L(0.5), L(0.5)], [L(0.6)], [0.0], [L(0.5)]]


def test_zero_padded_tail(impl):
    # Six sampling steps, four tokens left after stop trimming; and two steps for four tokens.
    for rows in ([[5, 9], [6, 2, 3], [7], [8, 1], [11], [12]], [[5, 9], [6, 2, 3]]):
        kept = prime_rl_kept_tokens(rows, 4)
        choice = impl.parse_generate_response(body(kept)).choices[0]
        expected = [r for r in rows[:4]] + [[]] * (4 - min(len(rows), 4))
        assert choice.sampling_mask.to_lists() == expected
        assert choice.sampling_mask_present.tolist() == [bool(r) for r in expected]
    choice = impl.parse_generate_response(body(prime_rl_kept_tokens([[5, 9], [6, 2, 3]], 4)), top_k=1).choices[0]
    assert choice.completion_top_ids.to_lists() == [[5, 9], [6, 2, 3], [7], [8]]


def test_every_row_present(impl):
    kept = prime_rl_kept_tokens([[9, 5], [6, 2, 3], [7], [8, 1]], 4)
    choice = impl.parse_generate_response(body(kept)).choices[0]
    assert choice.sampling_mask_present.all()
    # Token 3's kept set {8, 1} carries .8 of the processed mass: it does not normalize.
    error = fails(impl, body(kept), top_k=1)
    assert (error.field, error.token) == ("logprobs.content", 3)
    assert error.reason == "Sampler probabilities must normalize over the recorded support"


def test_no_row_present(impl):
    # prime-rl sends no field then; counts of zeros alone are read as that.
    kept = {"ids": "", "counts": base64.b64encode(np.zeros(4, np.int32).tobytes()).decode()}
    choice = impl.parse_generate_response(body(kept)).choices[0]
    assert choice.sampling_mask.to_lists() == [[], [], [], []]
    assert not choice.sampling_mask_present.any()
    # Every head by the top-k rule, as without the field: token 0's two candidates tie at
    # the first place, so a head of one is refused, and a head of two has too few.
    for k in (1, 2, 3):
        with_kept, without = fails(impl, body(kept), top_k=k), fails(impl, body(), top_k=k)
        assert (with_kept.field, with_kept.token, with_kept.reason) == (without.field, without.token, without.reason)


def test_kept_set_wider_than_the_candidates(impl):
    # Token 1's kept set has an id (11) the head lists no logprob for.
    kept = prime_rl_kept_tokens([[5, 9], [6, 2, 3, 11], [7], []], 4)
    choice = impl.parse_generate_response(body(kept)).choices[0]  # no head: nothing to support
    assert choice.sampling_mask[1].tolist() == [6, 2, 3, 11]
    error = fails(impl, body(kept), top_k=1)
    assert (error.choice, error.field, error.token) == (0, "kept_tokens", 1)
    assert error.reason.startswith("Missing sampling-support probabilities: kept_tokens[1] holds 4 ids")
    assert "request at least 4 top logprobs per token" in error.reason


def test_kept_rows_still_checked(impl):
    for rows, token in (([[5, 9], [], [9], []], 2), ([[5, 5], [], [7], []], 0), ([[], [6, 6], [], []], 1)):
        error = fails(impl, body(prime_rl_kept_tokens(rows, 4)))
        assert (error.field, error.token) == ("kept_tokens", token)
        assert error.reason.startswith("Invalid recorded sampling support: row ")
    counts = base64.b64encode(np.array([2, 0, 1], np.int32).tobytes()).decode()
    ids = base64.b64encode(np.array([5, 9, 7], np.int32).tobytes()).decode()
    error = fails(impl, body({"ids": ids, "counts": counts}))
    assert (error.field, error.reason) == ("kept_tokens", "Sampling mask token count mismatch")
    negative = base64.b64encode(np.array([2, 0, 1, -1], np.int32).tobytes()).decode()
    error = fails(impl, body({"ids": ids, "counts": negative}))
    assert (error.field, error.token) == ("kept_tokens.counts", 3)


def prime_rl_sampling_mask(rows: list[list[int]], num_tokens: int) -> dict[str, Any]:
    """vLLM's packed ``sampling_mask`` as prime-rl's server sends it (prime-rl PR #3431): the
    rows cut or padded with empty rows to the completion's tokens, ``counts`` int32 per token
    (0: no replay for that position), ``ids`` their int32 concatenation, each as
    ``{"data": base64, "shape": [len], "dtype": "int32"}``."""
    rows = [list(r) for r in rows[:num_tokens]] + [[]] * max(num_tokens - len(rows), 0)
    arrays = {"ids": np.array([i for r in rows for i in r], "<i4"), "counts": np.array([len(r) for r in rows], "<i4")}
    return {name: {"data": base64.b64encode(a.tobytes()).decode("ascii"), "shape": [len(a)], "dtype": "int32"}
            for name, a in arrays.items()}


@pytest.mark.parametrize("form", ["packed", "lists"])
def test_sampling_mask_zero_counts_are_absent_rows(impl, form):
    """A zero count (an empty row) in vLLM's sampling_mask is a position without replay, in the
    middle or at the end, as prime-rl sends it: no row, and the head falls back to the top-k
    rule there."""
    rows = [[5, 9], [], [7], []]
    mask = prime_rl_sampling_mask(rows, 4) if form == "packed" else rows
    choice = impl.parse_generate_response(body(extra={"sampling_mask": mask})).choices[0]
    assert choice.sampling_mask.to_lists() == rows
    assert choice.sampling_mask_present.tolist() == [True, False, True, False]
    choice = impl.parse_generate_response(body(extra={"sampling_mask": mask}), top_k=1).choices[0]
    assert choice.completion_top_ids.to_lists() == [[5, 9], [6], [7], [8]]
    assert choice.completion_top_logprobs.to_lists() == [[L(0.5), L(0.5)], [L(0.6)], [0.0], [L(0.5)]]
    # prime-rl's own test: counts [1, 3, 0] for three tokens.
    three = prime_rl_sampling_mask([[5], [6, 2, 3]], 3) if form == "packed" else [[5], [6, 2, 3], []]
    doc = json.loads(body(content=CONTENT[:3], extra={"sampling_mask": three}))
    doc["choices"][0]["token_ids"] = TOKENS[:3]
    choice = impl.parse_generate_response(json.dumps(doc).encode()).choices[0]
    assert choice.sampling_mask_present.tolist() == [True, True, False]
    # A row that is present still follows every rule.
    for bad, token in (([[5, 9], [], [9], []], 2), ([[5, 5], [], [7], []], 0), ([[], [6, 6], [], []], 1)):
        mask = prime_rl_sampling_mask(bad, 4) if form == "packed" else bad
        error = fails(impl, body(extra={"sampling_mask": mask}))
        assert (error.field, error.token) == ("sampling_mask", token)
        assert error.reason.startswith("Invalid recorded sampling support: row ")
    # Every row present, and no mask at all.
    choice = impl.parse_generate_response(body(extra={"sampling_mask": [[5, 9], [6], [7], [8]]})).choices[0]
    assert choice.sampling_mask_present.tolist() == [True] * 4
    assert impl.parse_generate_response(body()).choices[0].sampling_mask_present is None


def test_sampling_mask_of_zero_counts_only(impl):
    """Every count zero: no row present, every head by the top-k rule, as without the field."""
    mask = prime_rl_sampling_mask([], 4)
    choice = impl.parse_generate_response(body(extra={"sampling_mask": mask})).choices[0]
    assert choice.sampling_mask.to_lists() == [[], [], [], []]
    assert not choice.sampling_mask_present.any()
    for k in (1, 2, 3):
        masked, without = fails(impl, body(extra={"sampling_mask": mask}), top_k=k), fails(impl, body(), top_k=k)
        assert (masked.field, masked.token, masked.reason) == (without.field, without.token, without.reason)


@pytest.mark.parametrize("mask", ["absent", "null", "kept_tokens", "sampling_mask"])
def test_require_sampling_mask(impl, mask):
    """require_sampling_mask=True: a choice without a mask (absent or null) fails at
    sampling_mask, naming the server settings; kept_tokens or sampling_mask satisfy it."""
    extra = {"absent": {}, "null": {"sampling_mask": None},
             "kept_tokens": {"kept_tokens": prime_rl_kept_tokens([[5, 9], [], [7], []], 4)},
             "sampling_mask": {"sampling_mask": prime_rl_sampling_mask([[5, 9], [], [7], []], 4)}}[mask]
    raw = body(extra=extra) if mask != "kept_tokens" else body(extra["kept_tokens"])
    assert impl.parse_generate_response(raw).choices[0] is not None  # optional by default
    if mask in ("absent", "null"):
        for top_k in (None, 1):
            with pytest.raises(MalformedResponseError) as info:
                impl.parse_generate_response(raw, top_k=top_k, require_sampling_mask=True)
            error = info.value
            assert (error.choice, error.field, error.token) == (0, "sampling_mask", None)
            assert "--return-sampling-mask" in error.reason and "PR #53826" in error.reason
    else:
        choice = impl.parse_generate_response(raw, require_sampling_mask=True).choices[0]
        assert choice.sampling_mask_present.tolist() == [True, False, True, False]


def test_require_sampling_mask_on_a_plain_response():
    """The compiled core's plain path takes responses without a mask: with the flag, they go
    to the rules, which refuse them as the reference does."""
    ev = samples.evidence(6, 0, seed=4)
    raw = samples.dumps(samples.response([samples.build_choice(ev, transport="packed", index=0)], prompt_tokens=2))
    for impl in _implementations():
        assert impl.parse_generate_response(raw).choices[0].sampling_mask is None
        with pytest.raises(MalformedResponseError, match="require_sampling_mask"):
            impl.parse_generate_response(raw, require_sampling_mask=True)


def test_kept_tokens_with_compact_rows(impl):
    # The engine's flat rows: the sampled token, then the candidates of the records above.
    rows = [[(t, e["logprob"])] + [(int(c["token"][9:]), c["logprob"]) for c in e["top_logprobs"]]
            for t, e in zip(TOKENS, CONTENT)]
    flat = [item for row in rows for item in row]
    offsets = np.cumsum([0] + [len(r) for r in rows]).tolist()
    data = np.asarray([i for i, _ in flat], "<u4").tobytes() + np.asarray([p for _, p in flat], "<f4").tobytes()
    compact_field = {"data": base64.b64encode(data).decode(), "format": "u32-f32-le-v1",
                     "offsets": offsets, "num_top_logprobs": 3}
    kept = prime_rl_kept_tokens([[5, 9], [], [7], []], 4)
    raw = body(kept, content=None, extra={"logprobs": None, "compact_logprobs": compact_field})
    choice = impl.parse_generate_response(raw, top_k=1).choices[0]
    assert choice.completion_top_ids.to_lists() == [[5, 9], [6], [7], [8]]
    assert choice.sampling_mask_present.tolist() == [True, False, True, False]
    wide = prime_rl_kept_tokens([[5, 9, 13], [], [7], []], 4)
    error = fails(impl, body(wide, content=None, extra={"logprobs": None, "compact_logprobs": compact_field}), top_k=1)
    assert (error.field, error.token) == ("kept_tokens", 0)


def _drop_in_head(choice: dict[str, Any], k: int) -> Any:
    try:
        return compat._parse_completion_top_logprobs(choice, TOKENS, k)
    except MalformedResponseError as exc:
        return exc.reason


def test_drop_in_ignores_kept_tokens():
    # renderers reads no kept_tokens: the drop-in decides as it does without the field.
    choice = json.loads(body(prime_rl_kept_tokens([[5, 9, 11], [], [7], []], 4)))["choices"][0]
    plain = {key: value for key, value in choice.items() if key != "kept_tokens"}
    assert compat._parse_sampling_mask(choice, TOKENS) is None
    for k in (1, 2):
        assert _drop_in_head(choice, k) == _drop_in_head(plain, k)
    broken = dict(choice, kept_tokens={"ids": "!", "counts": 3})
    assert compat._parse_sampling_mask(broken, TOKENS) is None
    assert np.array_equal(compat._parse_completion_logprobs(broken, TOKENS), compat._parse_completion_logprobs(plain, TOKENS))


# --- the writer --------------------------------------------------------------------------------


def test_encode_kept_tokens_is_prime_rls_layout():
    rows = [[5, 9], [], [7], []]
    field = tokenwire.encode_kept_tokens([5, 9, 7], [2, 0, 1, 0], completion_ids=TOKENS)
    expected = prime_rl_kept_tokens(rows, 4)
    assert {name: str(value) for name, value in field.items()} == expected
    raw = tokenwire.dumps_generate_response({"choices": [json.loads(body())["choices"][0] | {"kept_tokens": field}]}, check=False)
    assert tokenwire.parse_generate_response(raw).choices[0].sampling_mask.to_lists() == rows
    with pytest.raises(MalformedResponseError, match="Invalid recorded sampling support"):
        tokenwire.encode_kept_tokens([5, 9, 7], [2, 0, 1, 0], completion_ids=[5, 6, 8, 8])
    with pytest.raises(ValueError, match="counts add up to 3 but there are 2 ids"):
        tokenwire.encode_kept_tokens([5, 9], [2, 0, 1])


@st.composite
def kept_rows(draw) -> tuple[list[int], list[list[int]]]:
    n = draw(st.integers(0, 8))
    tokens = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    rows = []
    for t in tokens:
        if draw(st.booleans()):
            rows.append([])
        else:
            others = draw(st.lists(st.integers(0, 2**31 - 1), max_size=5, unique=True))
            row = list(dict.fromkeys([t, *others]))
            rows.append(draw(st.permutations(row)))
    return tokens, rows


@settings(max_examples=200, deadline=None)
@given(kept_rows())
def test_kept_tokens_round_trip(case):
    tokens, rows = case
    ids = [i for r in rows for i in r]
    field = tokenwire.encode_kept_tokens(np.array(ids, np.int32), np.array([len(r) for r in rows], np.int32),
                                         completion_ids=tokens)
    choice = {"token_ids": tokens, "logprobs": {"content": None, "sampled": [-0.5] * len(tokens)}, "kept_tokens": field}
    raw = tokenwire.dumps_generate_response({"choices": [choice]}, check=False)
    for impl in _implementations():
        parsed = impl.parse_generate_response(raw).choices[0]
        assert parsed.sampling_mask.to_lists() == rows
        assert parsed.sampling_mask_present.tolist() == [bool(r) for r in rows]
        assert parsed.completion_logprobs.tolist() == [-0.5] * len(tokens)


@settings(max_examples=200, deadline=None)
@given(kept_rows())
def test_sampling_mask_round_trip(case):
    """The writer's encode_sampling_mask with zero counts anywhere, read back by both
    implementations as the same rows."""
    tokens, rows = case
    ids = [i for r in rows for i in r]
    field = tokenwire.encode_sampling_mask(np.array(ids, np.int32), np.array([len(r) for r in rows], np.int32),
                                           completion_ids=tokens)
    choice = {"token_ids": tokens, "logprobs": {"content": None, "sampled": [-0.5] * len(tokens)},
              "sampling_mask": field}
    raw = tokenwire.dumps_generate_response({"choices": [choice]}, check=False)
    for impl in _implementations():
        parsed = impl.parse_generate_response(raw).choices[0]
        assert parsed.sampling_mask.to_lists() == rows
        assert parsed.sampling_mask_present.tolist() == [bool(r) for r in rows]


def _implementations() -> list[Any]:
    from .conftest import PYTHON, _core

    return [PYTHON] if _core is None else [PYTHON, _core]


# --- logprobs.sampled --------------------------------------------------------------------------


def test_sampled_alone(impl):
    sampled = [-0.25, -1.5, 0.0, -3]
    choice = impl.parse_generate_response(body(content=None, sampled=sampled)).choices[0]
    assert choice.completion_logprobs.dtype == np.float64
    assert choice.completion_logprobs.tolist() == [-0.25, -1.5, 0.0, -3.0]
    assert "logprobs" not in choice.raw
    # A head needs the records: the sampled list alone has no candidates.
    error = fails(impl, body(content=None, sampled=sampled), top_k=1)
    assert (error.field, error.reason) == ("logprobs.content", "Missing requested top logprobs")


def test_sampled_beside_content(impl):
    choice = impl.parse_generate_response(body(sampled=SAMPLED)).choices[0]
    assert choice.completion_logprobs.tolist() == SAMPLED
    assert choice.raw == {}  # logprobs is consumed
    shifted = SAMPLED[:2] + [SAMPLED[2] - 0.01] + SAMPLED[3:]
    error = fails(impl, body(sampled=shifted))
    assert (error.choice, error.field, error.token) == (0, "logprobs.sampled", 2)
    assert error.reason.endswith("and logprobs.content[2].logprob (0.0) disagree.")
    # Within the head rule's tolerance they agree.
    close = [v * (1 + 1e-7) for v in SAMPLED]
    assert impl.parse_generate_response(body(sampled=close)).choices[0].completion_logprobs.tolist() == SAMPLED


@pytest.mark.parametrize(
    ("sampled", "token", "reason"),
    [
        ([-0.5, None, 0.0, 0.0], 1, "Engine response choice.logprobs.sampled[1] must be a number."),
        ([-0.5, True, 0.0, 0.0], 1, "Engine response choice.logprobs.sampled[1] must be a number."),
        ([-0.5, "-1", 0.0, 0.0], 1, "Engine response choice.logprobs.sampled[1] must be a number."),
        ([-0.5, -1.0, 0.0, -9999.0], 3, "Engine response choice.logprobs.sampled[3] does not contain sampling evidence."),
    ],
)
def test_sampled_values(impl, sampled, token, reason):
    error = fails(impl, body(content=None, sampled=sampled))
    assert (error.field, error.token, error.reason) == ("logprobs.sampled", token, reason)


def test_sampled_numbers_beyond_json():
    # JSON holds no infinity or NaN (a parser refuses 1e400); values handed over as Python
    # objects are held to the rule all the same.
    from tokenwire.extract.python import LazyEvidence
    from tokenwire.rules.generate import _first_bad_number

    def first_bad(values: list[Any]) -> tuple[int, str] | None:
        return _first_bad_number(LazyEvidence(0, {"logprobs": {"sampled": values}}))

    assert first_bad([-0.5, 10**400]) == (1, "finite")
    assert first_bad([math.nan]) == (0, "finite")
    assert first_bad([-math.inf]) == (0, "finite")
    assert first_bad([0, -1, 2**64, -0.0]) is None
    assert first_bad([-1.0, math.nan, "x"]) == (1, "finite")  # in order, whatever the kind
    assert first_bad([-1.0, "x", math.nan]) == (1, "number")


def test_sampled_shape(impl):
    error = fails(impl, body(content=None, sampled=[-0.5, -1.0]))
    assert (error.field, error.token) == ("logprobs.sampled", None)
    assert error.reason == ("Engine response completion token count (4) does not match "
                            "logprobs.sampled count (2).")
    error = fails(impl, body(content=None, sampled={"0": -0.5}))
    assert error.reason == "Engine response choice.logprobs.sampled must be a list."
    # The content's own errors come first.
    error = fails(impl, body(content=CONTENT[:3], sampled=[-0.5, -1.0]))
    assert error.field == "logprobs.content"
    # Neither: as before.
    error = fails(impl, body(content=None))
    assert error.reason == "Engine response choice.logprobs.content must be a list."


def test_audit_classes_sampled_defects():
    cases = [
        (body(content=None, sampled=[-0.5, -1.0]), "length_mismatch", "logprobs.sampled", -2),
        (body(content=None, sampled=[-0.5, None, 0.0, 0.0]), "bad_logprob", None, None),
        (body(sampled=[0.0] * 4), "bad_logprob", None, None),
        (body(prime_rl_kept_tokens([[5, 9, 11], [], [7], []], 4)), None, None, None),
    ]
    for raw, cls, histogram, difference in cases:
        verdict = tokenwire.audit(raw)
        assert verdict.defect == cls, (verdict.message, cls)
        assert (verdict.length_field, verdict.length_difference) == (histogram, difference)
    verdict = tokenwire.audit(body(prime_rl_kept_tokens([[5, 9, 11], [], [7], []], 4)), top_k=1)
    assert (verdict.defect, verdict.location) == ("head", "choices[0].kept_tokens[0]")


def test_select_heads_empty_support_row_is_none(simd_or_python):
    # Token 0 has the support {5, 9}; token 1 none (an empty row): its head is the top k.
    ids = [5, 9, 1, 6, 2, 3, 4]
    lps = [L(0.5), L(0.5), -9999.0, L(0.6), L(0.3), L(0.1), -20.0]
    top_ids, _ = tokenwire.select_heads(ids, lps, [0, 3, 7], [5, 6], [L(0.5), L(0.6)], 1,
                                        support_ids=[5, 9], support_offsets=[0, 2, 2])
    assert top_ids.to_lists() == [[5, 9], [6]]
    with pytest.raises(MalformedResponseError) as info:
        tokenwire.select_heads(ids[3:], lps[3:], [0, 4], [6], [L(0.6)], 3, support_ids=[], support_offsets=[0, 0])
    assert info.value.reason == "Engine returned fewer top logprobs than requested"


@pytest.fixture(params=["python", "scalar", "avx2", "avx512"])
def simd_or_python(request, monkeypatch):
    """select_heads on the reference's kernels, and on the core's on each path."""
    from tokenwire.read import _select
    from tokenwire.kernels import python as python_kernels

    from .conftest import _core

    if request.param == "python":
        monkeypatch.setattr(_select, "kernels", python_kernels)
        yield request.param
        return
    if _core is None or request.param not in _core.simd_paths():
        pytest.skip(f"no compiled {request.param} path here")
    monkeypatch.setattr(_select, "kernels", _core)
    with _core.simd_path_forced(request.param):
        yield request.param
