"""vLLM's teacher scores (``prompt_token_id_logprobs``: ``prompt_logprob_token_ids`` and
``prompt_logprob_start`` on /inference/v1/generate), on both implementations and every path."""

from __future__ import annotations

import base64
import io
import json
import math
from typing import Any

import numpy as np
import pytest

from tokenwire import MalformedResponseError

PROMPT = list(range(100, 110))  # ten prompt tokens


def npy(array: np.ndarray) -> str:
    """The matrix as the server sends it: ``np.save`` into memory, then base64."""
    buffer = io.BytesIO()
    np.save(buffer, array)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def scores(rows: int, k: int = 4) -> np.ndarray:
    """Log probabilities of ``k`` candidates per row, the last row padded (a -1 candidate
    scores -inf)."""
    matrix = np.log(np.linspace(0.05, 0.4, rows * k, dtype=np.float32)).reshape(rows, k)
    if rows:
        matrix[-1, -1] = -np.inf
    return matrix


def body(teacher: Any, prompt: Any = PROMPT) -> bytes:
    document: dict[str, Any] = {
        "request_id": "r",
        "choices": [{"index": 0, "token_ids": [7], "logprobs": None, "finish_reason": "length"}],
        "prompt_token_id_logprobs": teacher,
    }
    if prompt is not None:
        document["prompt_token_ids"] = prompt
    return json.dumps(document).encode()


def parse(impl, raw: bytes, **options: Any):
    return impl.parse_generate_response(raw, require_logprobs=False, **options)


def fails(impl, raw: bytes, **options: Any) -> MalformedResponseError:
    with pytest.raises(MalformedResponseError) as info:
        parse(impl, raw, **options)
    assert info.value.field == "prompt_token_id_logprobs"
    return info.value


def test_the_matrix_as_sent(impl):
    # Scored from the prompt's last token: len(prompt) - 1 - start rows (response positions).
    matrix = scores(6)
    response = parse(impl, body(npy(matrix)), prompt_logprob_start=3)
    assert response.prompt_token_id_logprobs.dtype == np.float32
    assert np.array_equal(response.prompt_token_id_logprobs, matrix)
    assert "prompt_token_id_logprobs" not in response.payload
    # Without the request's start, at most len(prompt) - 1 rows; zero rows, a (0, K) matrix.
    assert parse(impl, body(npy(matrix))).prompt_token_id_logprobs.shape == (6, 4)
    assert parse(impl, body(npy(scores(0))), prompt_logprob_start=9).prompt_token_id_logprobs.shape == (0, 4)
    # Without the prompt ids the rows are not checked; absent or null: None.
    assert parse(impl, body(npy(scores(40)), prompt=None)).prompt_token_id_logprobs.shape == (40, 4)
    assert parse(impl, body(None)).prompt_token_id_logprobs is None


@pytest.mark.parametrize(
    "teacher, options, token, reason",
    [
        (npy(np.full((3, 4), np.nan, np.float32)), {}, 0, "NaN"),
        (npy(np.where(np.arange(12).reshape(3, 4) == 9, np.inf, -1.0).astype(np.float32)), {}, 2, "NaN, +inf"),
        (npy(np.full((3, 4), 0.5, np.float32)), {}, 0, "positive log probability"),
        (npy(np.full((3, 4), np.inf, np.float32)), {"teacher_logits": True}, 0, "NaN, +inf"),
        (npy(scores(6)), {"prompt_logprob_start": 2}, None, "expected 7"),
        (npy(scores(10)), {}, None, "at most 9"),
        (npy(scores(6).astype(np.float64)), {}, None, ".npy header is invalid"),
        (npy(scores(6).reshape(6, 2, 2)), {}, None, "(rows, K) float32 matrix"),
        (npy(scores(6))[:-8], {}, None, "(rows, K) float32 matrix"),
        (base64.b64encode(b"not an npy file").decode(), {}, None, ".npy magic missing"),
        ("!!!!", {}, None, "must be a base64 .npy string"),
        ([[-1.0]], {}, None, "must be a base64 .npy string"),
    ],
)
def test_malformed_matrices(impl, teacher, options, token, reason):
    error = fails(impl, body(teacher), **options)
    assert error.token == token
    assert reason in error.reason


def test_logits_may_be_positive(impl):
    logits = np.array([[3.5, -1.0, -math.inf, 0.25]], dtype=np.float32)
    response = parse(impl, body(npy(logits)), prompt_logprob_start=8, teacher_logits=True)
    assert np.array_equal(response.prompt_token_id_logprobs, logits)


@pytest.mark.parametrize("start, error", [(-1, ValueError), (True, TypeError), ("3", TypeError)])
def test_the_start_is_checked_first(impl, start, error):
    with pytest.raises(error, match="prompt_logprob_start"):
        parse(impl, body(npy(scores(6))), prompt_logprob_start=start)
