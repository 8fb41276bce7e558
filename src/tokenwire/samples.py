"""The embedded sample workload: deterministic, realistic responses for every transport.

Each sample is generated on first use from a fixed seed and serialized the way vLLM's
endpoint serializes (``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``).
The builders below are also what tests and benchmarks use to make responses of any size.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

__all__ = [
    "SAMPLES",
    "Sample",
    "TokenEvidence",
    "build_choice",
    "dumps",
    "evidence",
    "npy_bytes",
    "response",
    "sample",
]

VOCAB = 151_936  # a Qwen-sized vocabulary
SENTINEL = -9999.0


def dumps(document: Any) -> bytes:
    """Serialize exactly as vLLM's endpoint does (Starlette ``JSONResponse``)."""
    return json.dumps(
        document, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


def b64(data: bytes | np.ndarray) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


@dataclass
class TokenEvidence:
    """What an engine knows per completion token: the sampled id and its logprob, the top
    candidates ranked by logprob (``cand_ids``/``cand_logprobs``: n x m), and optionally the
    sampler's kept support per token (``support``)."""

    ids: np.ndarray  # int64 (n,)
    logprobs: np.ndarray  # float32 (n,)
    cand_ids: np.ndarray  # int64 (n, m)
    cand_logprobs: np.ndarray  # float32 (n, m)
    support: list[list[int]] | None = None


def evidence(
    n: int, m: int = 0, *, seed: int = 0, support: bool = False, width: int = 256
) -> TokenEvidence:
    """Realistic per-token distributions: peaked or flat log-softmaxes over ``width`` candidates.

    With ``support``, a top-s filter is recorded per token (s in 1..m): the logprobs are
    renormalized over the support and every other candidate is at the sentinel, as an engine
    with top-k/top-p sampling reports them.
    """
    rng = np.random.default_rng(seed)
    scale = rng.uniform(1.0, 7.0, size=(n, 1))
    logits = rng.standard_normal((n, width)) * scale
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    order = np.argsort(-logp, axis=1, kind="stable")
    kept: np.ndarray | None = None
    if support:
        sizes = rng.integers(1, max(m, 1) + 1, size=n)
        kept = np.arange(width)[None, :] < sizes[:, None]  # in rank order
        ranked = np.take_along_axis(logp, order, axis=1)
        ranked = np.where(kept, ranked, -np.inf)
        ranked -= np.log(np.exp(ranked).sum(axis=1, keepdims=True))
        np.put_along_axis(logp, order, ranked, axis=1)
    # Inverse-CDF sampling of one virtual index per token.
    cdf = np.cumsum(np.exp(logp), axis=1)
    u = rng.uniform(0, 1, size=(n, 1)) * cdf[:, -1:]
    sampled = np.minimum((cdf < u).sum(axis=1), width - 1)
    if kept is not None:  # sample inside the support only
        rank_of = np.argsort(order, axis=1)
        inside = np.take_along_axis(rank_of, sampled[:, None], axis=1)[:, 0] < sizes
        sampled = np.where(inside, sampled, order[:, 0])
    # Distinct vocabulary ids per token: an affine map of the virtual index.
    base = rng.integers(0, VOCAB, size=(n, 1))
    stride = 7919  # prime, so the map is one-to-one for width < VOCAB
    vocab_of = (base + np.arange(width)[None, :] * stride) % VOCAB
    lp32 = np.maximum(logp, SENTINEL).astype(np.float32)
    ids = np.take_along_axis(vocab_of, sampled[:, None], axis=1)[:, 0].astype(np.int64)
    lps = np.take_along_axis(lp32, sampled[:, None], axis=1)[:, 0]
    top = order[:, :m]
    cand_ids = np.take_along_axis(vocab_of, top, axis=1).astype(np.int64)
    cand_lps = np.take_along_axis(lp32, top, axis=1)
    supports = None
    if kept is not None:
        supports = [cand_ids[t, : sizes[t]].tolist() for t in range(n)]
    return TokenEvidence(ids, lps, cand_ids, cand_lps, supports)


def _token_bytes(token_id: int) -> list[int]:
    # Stand-in for the token's UTF-8 bytes, which vLLM sends alongside each logprob.
    return list(f"t{token_id % 977}".encode())


def _native_entry(token_id: int, logprob: float, top: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "token": f"token_id:{token_id}",
        "logprob": logprob,
        "bytes": _token_bytes(token_id),
        "top_logprobs": top,
    }


def npy_bytes(array: np.ndarray) -> bytes:
    """A whole ``.npy`` file, as upstream vLLM sends routed experts."""
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def build_choice(
    ev: TokenEvidence,
    *,
    transport: str = "packed",
    index: int = 0,
    num_top: int | None = None,
    mask: str | None = None,
    routed: np.ndarray | None = None,
    routed_start: int = 0,
    routed_form: str = "dict",
    finish_reason: str = "stop",
) -> dict[str, Any]:
    """One ``choices[i]`` object of ``/inference/v1/generate``.

    ``transport``: ``"native"`` (``logprobs.content``), ``"packed"`` (``completion_logprobs``)
    or ``"compact"`` (``compact_logprobs``); ``mask``: None, ``"list"`` or ``"csr"``;
    ``routed_form``: ``"dict"`` (prime-rl) or ``"npy"`` (upstream vLLM).
    """
    n, m = ev.cand_ids.shape if ev.cand_ids.ndim == 2 else (len(ev.ids), 0)
    choice: dict[str, Any] = {"index": index, "text": "", "logprobs": None}
    if transport == "native":
        content = []
        for t in range(n):
            top = [
                _native_entry(int(i), float(p), [])
                for i, p in zip(ev.cand_ids[t].tolist(), ev.cand_logprobs[t].tolist())
            ]
            for entry in top:
                del entry["top_logprobs"]
            content.append(_native_entry(int(ev.ids[t]), float(ev.logprobs[t]), top))
        choice["logprobs"] = {"content": content}
    choice["finish_reason"] = finish_reason
    choice["stop_reason"] = None
    choice["token_ids"] = ev.ids.tolist()
    if transport == "packed":
        choice["completion_logprobs"] = {
            "data": b64(ev.logprobs.astype("<f4").tobytes()),
            "shape": [n],
            "dtype": "float32",
        }
    elif transport == "compact":
        # Flat engine storage: the sampled token first, then the top-m candidates.
        row_ids = np.concatenate([ev.ids[:, None], ev.cand_ids], axis=1).astype("<u4")
        row_lps = np.concatenate([ev.logprobs[:, None], ev.cand_logprobs], axis=1).astype("<f4")
        choice["compact_logprobs"] = {
            "data": b64(row_ids.tobytes() + row_lps.tobytes()),
            "format": "u32-f32-le-v1",
            "offsets": list(range(0, n * (m + 1) + 1, m + 1)),
            "num_top_logprobs": m if num_top is None else num_top,
        }
    elif transport != "native":
        raise ValueError(f"unknown transport {transport!r}")
    if mask is not None:
        if ev.support is None:
            raise ValueError("a mask needs evidence built with support=True")
        if mask == "list":
            choice["sampling_mask"] = ev.support
        else:
            ids = np.array([i for row in ev.support for i in row], dtype="<i4")
            counts = np.array([len(row) for row in ev.support], dtype="<i4")
            choice["sampling_mask"] = {
                name: {"data": b64(values.tobytes()), "shape": [len(values)], "dtype": "int32"}
                for name, values in (("ids", ids), ("counts", counts))
            }
    if routed is not None:
        if routed_form == "npy":
            choice["routed_experts"] = b64(npy_bytes(routed))
        else:
            choice["routed_experts"] = {
                "data": b64(np.ascontiguousarray(routed).tobytes()),
                "shape": list(routed.shape),
                "start": routed_start,
                "dtype": str(routed.dtype),
            }
    return choice


def response(
    choices: list[dict[str, Any]], *, prompt_tokens: int = 512, seed: int = 0, request_id: str = "gen-0"
) -> dict[str, Any]:
    """A whole response document around ``choices``."""
    rng = np.random.default_rng(seed + 1)
    completion = sum(len(c["token_ids"]) for c in choices)
    return {
        "request_id": request_id,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
        "prompt_token_ids": rng.integers(0, VOCAB, size=prompt_tokens).tolist(),
        "kv_transfer_params": None,
    }


def routing(rows: int, layers: int = 48, topk: int = 8, experts: int = 128, seed: int = 0) -> np.ndarray:
    """MoE routing replay: ``topk`` distinct expert ids per (row, layer)."""
    rng = np.random.default_rng(seed)
    first = rng.integers(0, experts, size=(rows, layers, 1))
    stride = 2 * rng.integers(0, experts // 2, size=(rows, layers, 1)) + 1  # odd: distinct ids
    dtype = np.uint8 if experts <= 256 else np.uint16
    return ((first + np.arange(topk) * stride) % experts).astype(dtype)


@dataclass(frozen=True)
class Sample:
    name: str
    description: str
    top_k: int | None
    build: Any

    @property
    def raw(self) -> bytes:
        return sample(self.name)


def _compact_8k() -> bytes:
    ev = evidence(8192, 22, seed=1)
    return dumps(response([build_choice(ev, transport="compact")], prompt_tokens=2048, seed=1))


def _native_8k() -> bytes:
    ev = evidence(8192, 0, seed=2)
    return dumps(response([build_choice(ev, transport="native")], prompt_tokens=2048, seed=2))


def _native_2k_top20() -> bytes:
    ev = evidence(2048, 22, seed=3)
    return dumps(response([build_choice(ev, transport="native")], prompt_tokens=1024, seed=3))


def moe_response(tokens: int, completion: int, *, seed: int = 0) -> bytes:
    """A response with packed logprobs for ``completion`` sampled tokens and MoE routing
    (48 layers x top-8, uint8) for all ``tokens`` positions but the last, the prompt first."""
    ev = evidence(completion, 0, seed=seed)
    choice = build_choice(ev, transport="packed", routed=routing(tokens - 1, seed=seed))
    return dumps(response([choice], prompt_tokens=tokens - completion, seed=seed))


def _moe_16k() -> bytes:
    return moe_response(16384, 8192, seed=4)


def _multi_choice() -> bytes:
    choices = []
    for i in range(4):
        ev = evidence(1024, 6, seed=10 + i, support=True)
        choices.append(
            build_choice(ev, transport="compact", index=i, mask="csr", finish_reason=("stop", "length")[i % 2])
        )
    return dumps(response(choices, prompt_tokens=1024, seed=5))


SAMPLES: dict[str, Sample] = {
    s.name: s
    for s in (
        Sample("compact_8k_top20", "8k tokens, compact u32/f32 rows, top-20 head", 20, _compact_8k),
        Sample("native_8k", "8k tokens, native JSON logprobs, sampled only", None, _native_8k),
        Sample("native_2k_top20", "2k tokens, native JSON with 22 top_logprobs, top-20 head", 20, _native_2k_top20),
        Sample("moe_16k", "16k-token MoE: 48 layers x top-8 uint8 routing, packed logprobs", None, _moe_16k),
        Sample("multi_choice", "n=4 choices, compact rows with CSR sampling masks, top-4 head", 4, _multi_choice),
    )
}


@cache
def sample(name: str) -> bytes:
    """The serialized bytes of one embedded sample (built once per process)."""
    try:
        return SAMPLES[name].build()
    except KeyError:
        raise KeyError(f"no sample named {name!r}; choose from {sorted(SAMPLES)}") from None
