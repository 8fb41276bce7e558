"""The embedded sample workload: deterministic, realistic responses for every transport.

Each sample is generated on first use from a fixed seed and serialized the way vLLM's
endpoint serializes (``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``).
The builders below are also what tests and benchmarks use to make responses of any size.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

import numpy as np

from .base._table import KEY

__all__ = [
    "SAMPLES",
    "WORKLOADS",
    "Sample",
    "TokenEvidence",
    "Workload",
    "build_choice",
    "dumps",
    "evidence",
    "npy_bytes",
    "response",
    "sample",
    "sglang_replay",
    "vllm_output",
    "vllm_rows",
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
    n: int,
    m: int = 0,
    *,
    seed: int = 0,
    support: bool = False,
    width: int = 256,
    scale: tuple[float, float] = (1.0, 7.0),
    filtered: float = 0.0,
    ties: float = 0.0,
) -> TokenEvidence:
    """Realistic per-token distributions: peaked or flat log-softmaxes over ``width`` candidates.

    With ``support``, a top-s filter is recorded per token (s in 1..m): the logprobs are
    renormalized over the support and every other candidate is at the sentinel, as an engine
    with top-k/top-p sampling reports them. ``scale`` bounds the logit spread (small: flat,
    large: peaked); a ``filtered`` share of rows ends in candidates a sampler filter left at
    the sentinel, and a ``ties`` share repeats a logprob exactly across two neighbouring
    places, as float32 logprobs of a flat distribution do.
    """
    rng = np.random.default_rng(seed)
    spread = rng.uniform(scale[0], scale[1], size=(n, 1))
    logits = rng.standard_normal((n, width)) * spread
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
    if m > 1 and ties:
        # An exact tie between two neighbouring places (the sampled token keeps its value).
        rows = np.flatnonzero(rng.uniform(size=n) < ties)
        place = rng.integers(1, m, size=len(rows))
        if kept is not None:  # outside the support, whose probabilities sum to 1 as recorded
            rows, place = rows[place - 1 >= sizes[rows]], place[place - 1 >= sizes[rows]]
        cand_lps[rows, place - 1] = cand_lps[rows, place]
    if m > 1 and filtered:
        # A top-p/min-p filter cut the row: its last places are at the sentinel.
        rows = np.flatnonzero(rng.uniform(size=n) < filtered)
        cut = rng.integers(1, m, size=len(rows))
        if kept is not None:  # the filter keeps the recorded support: its ids have their logprobs
            cut = np.maximum(cut, sizes[rows])
        cols = np.arange(m)[None, :] >= cut[:, None]
        block = cand_lps[rows]
        block[cols] = SENTINEL
        cand_lps[rows] = block
        # The sampled token lies inside what the filter kept.
        first_cut = np.where(cols.any(axis=1), cut, m)
        for r, c in zip(rows.tolist(), first_cut.tolist()):
            if ids[r] not in cand_ids[r, :c]:
                ids[r] = cand_ids[r, 0]
    if m and (ties or filtered):
        # The sampled token's logprob is the one its candidate entry reports.
        match = cand_ids == ids[:, None]
        listed = match.any(axis=1)
        lps[listed] = cand_lps[listed, match[listed].argmax(axis=1)]
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

    ``transport``: ``"native"`` (``logprobs.content``), ``"packed"`` (``completion_logprobs``),
    ``"compact"`` (``compact_logprobs``), ``"sampled"`` (vLLM's ``logprobs.sampled`` alone)
    or ``"native_sampled"`` (both), ``"top_k"`` (``logprobs.sampled`` and vLLM's packed
    ``logprobs.top_k`` candidates); ``mask``: None, ``"list"`` or ``"csr"`` (``sampling_mask``)
    or ``"kept"`` (prime-rl's ``kept_tokens``: an empty support row is a zero count);
    ``routed_form``: ``"dict"`` (prime-rl) or ``"npy"`` (upstream vLLM).
    """
    n, m = ev.cand_ids.shape if ev.cand_ids.ndim == 2 else (len(ev.ids), 0)
    choice: dict[str, Any] = {"index": index, "text": "", KEY.logprobs: None}
    if transport in ("sampled", "top_k"):
        choice[KEY.logprobs] = {"content": None, KEY.sampled: [float(x) for x in ev.logprobs]}
    if transport == "top_k":
        # vLLM's packed top-k: the candidates unclamped (a filtered one is -inf, not -9999).
        lps = np.where(ev.cand_logprobs == SENTINEL, -np.inf, ev.cand_logprobs).astype("<f4")
        choice[KEY.logprobs][KEY.top_k] = {
            "num_positions": n, "k": m,
            KEY.token_ids: b64(ev.cand_ids.astype("<i4").tobytes()), KEY.logprobs: b64(lps.tobytes()),
        }
    if transport in ("native", "native_sampled"):
        content = []
        for t in range(n):
            top = [
                _native_entry(int(i), float(p), [])
                for i, p in zip(ev.cand_ids[t].tolist(), ev.cand_logprobs[t].tolist())
            ]
            for entry in top:
                del entry["top_logprobs"]
            content.append(_native_entry(int(ev.ids[t]), float(ev.logprobs[t]), top))
        choice[KEY.logprobs] = {"content": content}
        if transport == "native_sampled":
            choice[KEY.logprobs][KEY.sampled] = [float(x) for x in ev.logprobs]
    choice["finish_reason"] = finish_reason
    choice["stop_reason"] = None
    choice[KEY.token_ids] = ev.ids.tolist()
    if transport == "packed":
        choice[KEY.completion_logprobs] = {
            "data": b64(ev.logprobs.astype("<f4").tobytes()),
            "shape": [n],
            "dtype": "float32",
        }
    elif transport == "compact":
        # Flat engine storage: the sampled token first, then the top-m candidates.
        row_ids = np.concatenate([ev.ids[:, None], ev.cand_ids], axis=1).astype("<u4")
        row_lps = np.concatenate([ev.logprobs[:, None], ev.cand_logprobs], axis=1).astype("<f4")
        choice[KEY.compact_logprobs] = {
            "data": b64(row_ids.tobytes() + row_lps.tobytes()),
            "format": "u32-f32-le-v1",
            "offsets": list(range(0, n * (m + 1) + 1, m + 1)),
            "num_top_logprobs": m if num_top is None else num_top,
        }
    elif transport not in ("native", "sampled", "native_sampled", "top_k"):
        raise ValueError(f"unknown transport {transport!r}")
    if mask is not None:
        if ev.support is None:
            raise ValueError("a mask needs evidence built with support=True")
        ids = np.array([i for row in ev.support for i in row], dtype="<i4")
        counts = np.array([len(row) for row in ev.support], dtype="<i4")
        if mask == "list":
            choice[KEY.sampling_mask] = ev.support
        elif mask == "kept":
            choice[KEY.kept_tokens] = {"ids": b64(ids.tobytes()), "counts": b64(counts.tobytes())}
        else:
            choice[KEY.sampling_mask] = {
                name: {"data": b64(values.tobytes()), "shape": [len(values)], "dtype": "int32"}
                for name, values in (("ids", ids), ("counts", counts))
            }
    if routed is not None:
        if routed_form == "npy":
            choice[KEY.routed_experts] = b64(npy_bytes(routed))
        else:
            choice[KEY.routed_experts] = {
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
    completion = sum(len(c[KEY.token_ids]) for c in choices)
    return {
        "request_id": request_id,
        KEY.choices: choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
        KEY.prompt_token_ids: rng.integers(0, VOCAB, size=prompt_tokens).tolist(),
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


def _varied(seed: int, tokens: int, m: int, *, support: bool = False) -> TokenEvidence:
    """One response's evidence with the variety of real traffic: length within +-12% of
    ``tokens``, a flat or a peaked distribution, and (without a recorded support) about 10%
    of rows cut by a sampler filter and 5% with an exact tie between neighbouring places."""
    rng = np.random.default_rng(10_000 + seed)
    n = int(tokens * rng.uniform(0.88, 1.12))
    scale = (0.3, 2.0) if seed % 2 else (2.0, 8.0)
    extra: dict[str, Any] = {} if support else {"filtered": 0.1, "ties": 0.05}
    return evidence(n, m, seed=seed, support=support, scale=scale, **extra)


def _one_choice(seed: int, tokens: int, m: int, transport: str, prompt: int, *, mask: str | None = None) -> bytes:
    """One response of one varied choice (see :func:`_varied`)."""
    choice = build_choice(_varied(seed, tokens, m, support=mask is not None), transport=transport, mask=mask)
    return dumps(response([choice], prompt_tokens=prompt, seed=seed))


def _plain_compact_mask(seed: int) -> bytes:
    mask = ("csr", "list")[seed % 4 == 3]  # mostly packed, now and then the list form
    return _one_choice(seed, 4096, 22, "compact", 1024, mask=mask)


def _plain_moe(seed: int) -> bytes:
    return moe_response(16384, 8192, seed=seed)


def sglang_replay(tokens: int, prompt: int, *, width: int = 20, layers: int = 48, topk: int = 8,
                  seed: int = 0) -> bytes:
    """An SGLang ``/generate`` item with what a replaying trainer asks for (``return_logprob``,
    ``return_sampling_mask``, ``return_routed_experts``), laid out as SGLang's TokenizerManager
    writes it: ``[logprob, id, text]`` triples, a sampling mask of ``width`` kept ids per token
    (ascending, the sampled id among them), each token's renormalized sampling logprob (at or
    above its raw logprob: the kept mass is at most 1), and routing of ``layers`` x ``topk``
    per position but the last, bare little-endian int32 in base64."""
    rng = np.random.default_rng(20_000 + seed)
    first = rng.integers(0, VOCAB - 4 * width, size=(tokens, 1))
    kept = first + np.cumsum(rng.integers(1, 4, size=(tokens, width)), axis=1)  # distinct, ascending
    ids = kept[np.arange(tokens), rng.integers(0, width, size=tokens)]
    raw = -rng.exponential(1.0, size=tokens)
    renormalized = np.minimum(raw + rng.exponential(0.3, size=tokens), 0.0)
    routed = routing(prompt + tokens - 1, layers, topk, seed=seed).astype("<i4")
    meta = {
        "id": f"sgl-{seed}", "finish_reason": {"type": "length", "length": tokens}, "prompt_tokens": prompt,
        "completion_tokens": tokens, "cached_tokens": 0,
        KEY.output_token_logprobs: [[v, i, None] for v, i in zip(raw.tolist(), ids.tolist())],
        KEY.output_token_sampling_mask: kept.tolist(),
        KEY.output_token_sampling_logprobs: renormalized.tolist(),
        "output_token_sampling_mask_length": tokens,
        KEY.routed_experts: b64(routed),
    }
    return dumps({"text": "x" * (4 * tokens), KEY.output_ids: ids.tolist(), KEY.meta_info: meta})


def _plain_sglang_replay(seed: int) -> bytes:
    return sglang_replay(16384, 512 + 256 * (seed % 7), seed=seed)


def _small_native(seed: int) -> bytes:
    """About 64 tokens of native records with 7 candidates each (vLLM's ``logprobs=5`` plus
    room for the sampled id and a tie), for a top-5 head; every fourth response has two choices."""
    choices = [build_choice(_varied(4 * seed + i, 64, 7), transport="native", index=i,
                            finish_reason=("stop", "length")[(seed + i) % 2])
               for i in range(1 + (seed % 4 == 3))]
    return dumps(response(choices, prompt_tokens=48 + 16 * (seed % 5), seed=seed))


def _plain_multi_choice(seed: int) -> bytes:
    choices = [
        build_choice(_varied(8 * seed + i, 512, 0), transport="compact", index=i,
                     finish_reason=("stop", "length")[i % 2])
        for i in range(8)
    ]
    return dumps(response(choices, prompt_tokens=512, seed=seed))


@dataclass(frozen=True)
class Workload:
    """A family of distinct responses (one per seed) for the plain-loop benchmark."""

    name: str
    description: str
    top_k: int | None
    build: Any
    parser: str = "parse_generate_response"  # the parser the responses are for
    options: tuple[tuple[str, Any], ...] = ()  # its other arguments

    def responses(self, count: int, first_seed: int = 0) -> list[bytes]:
        return [self.build(first_seed + i) for i in range(count)]

    def parse(self, module: Any, raw: Any) -> Any:
        """One response parsed by ``module``'s parser for it (the facade, the reference)."""
        return getattr(module, self.parser)(raw, top_k=self.top_k, **dict(self.options))


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("compact_top20_8k", "8k tokens, compact rows (filtered tails, ties), top-20 head", 20, partial(_one_choice, tokens=8192, m=22, transport="compact", prompt=2048)),
        Workload("compact_top20_4k_mask", "4k tokens, compact rows, CSR/list sampling mask, top-20 head", 20, _plain_compact_mask),
        Workload("top_k_16k", "16k tokens, vLLM packed top-k (22 candidates, -inf tails, ties) and logprobs.sampled, "
                 "top-20 head", 20, partial(_one_choice, tokens=16384, m=22, transport="top_k", prompt=2048)),
        Workload("compact_sampled_8k", "8k tokens, compact rows, sampled logprobs only", None, partial(_one_choice, tokens=8192, m=0, transport="compact", prompt=2048)),
        Workload("native_top20_2k", "2k tokens, native JSON records with 22 candidates, top-20 head", 20, partial(_one_choice, tokens=2048, m=22, transport="native", prompt=1024)),
        Workload("native_sampled_8k", "8k tokens, native JSON records, sampled logprobs only", None, partial(_one_choice, tokens=8192, m=0, transport="native", prompt=2048)),
        Workload("moe_16k", "16k-token MoE routing (48 layers x top-8 uint8), packed logprobs", None, _plain_moe),
        Workload("choices_8x512", "8 choices x 512 tokens, compact rows, no head", None, _plain_multi_choice),
        Workload("packed_128", "128 tokens, packed float32 logprobs", None, partial(_one_choice, tokens=128, m=0, transport="packed", prompt=64)),
        Workload("native_top5_64", "64 tokens, native JSON records with 7 candidates (filtered tails, ties), top-5 head; "
                 "now and then two choices", 5, _small_native),
        Workload("sglang_replay_16k", "SGLang /generate: 16k tokens, triples, a 20-id sampling mask and its logprobs, "
                 "routing 48 layers x top-8 (int32, base64)", None, _plain_sglang_replay,
                 "parse_sglang_generate_response", (("routed_experts_shape", (48, 8)), ("num_experts", 128))),
    )
}


@cache
def sample(name: str) -> bytes:
    """The serialized bytes of one embedded sample (built once per process)."""
    try:
        return SAMPLES[name].build()
    except KeyError:
        raise KeyError(f"no sample named {name!r}; choose from {sorted(SAMPLES)}") from None


# --- vLLM's in-process output objects -------------------------------------------------------------
# Shaped as vllm/outputs.py and vllm/logprobs.py declare them (their fields, in their order), for
# tokenwire.validate_vllm_output's tests and benchmark: vLLM itself is never imported.


@dataclass
class VllmLogprob:
    """``vllm.logprobs.Logprob``."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class VllmFlatLogprobs:
    """``vllm.logprobs.FlatLogprobs``'s fields (position ``i``'s entries are
    ``[start_indices[i], end_indices[i])`` of the flat lists)."""

    start_indices: list[int] = field(default_factory=list)
    end_indices: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    ranks: list[int | None] = field(default_factory=list)
    decoded_tokens: list[str | None] = field(default_factory=list)


@dataclass
class VllmCompletionOutput:
    """``vllm.outputs.CompletionOutput``."""

    index: int
    text: str
    token_ids: Any
    cumulative_logprob: float | None
    logprobs: Any
    routed_experts: np.ndarray | None = None  # [seq_len, layers, topk]
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    lora_request: Any = None
    kv_transfer_params: dict[str, Any] | None = None


class VllmRequestOutput:
    """``vllm.outputs.RequestOutput``'s constructor and attributes."""

    def __init__(self, request_id: str, prompt: str | None, prompt_token_ids: list[int] | None,
                 prompt_logprobs: Any, outputs: list[VllmCompletionOutput], finished: bool, metrics: Any = None,
                 lora_request: Any = None, encoder_prompt: str | None = None,
                 encoder_prompt_token_ids: list[int] | None = None, num_cached_tokens: int | None = None) -> None:
        self.request_id, self.prompt, self.prompt_token_ids = request_id, prompt, prompt_token_ids
        self.prompt_logprobs, self.outputs, self.finished = prompt_logprobs, outputs, finished
        self.metrics, self.lora_request, self.num_cached_tokens = metrics, lora_request, num_cached_tokens
        self.encoder_prompt, self.encoder_prompt_token_ids = encoder_prompt, encoder_prompt_token_ids


def vllm_rows(tokens: int, num_logprobs: int, *, seed: int = 0) -> tuple[list[int], list[list[tuple[int, float, int]]]]:
    """What vLLM's logprobs processor records for ``tokens`` positions: the sampled ids, and per
    position ``(token_id, logprob, rank)`` entries, the sampled token first (its own rank), then
    the top ``num_logprobs`` (ranks 1..N, none the sampled id), float32 values."""
    rng = np.random.default_rng(seed)
    values = np.log(rng.dirichlet(np.ones(num_logprobs + 2), tokens)).astype(np.float32)
    values = -np.sort(-values, axis=1)
    pick = rng.integers(0, num_logprobs + 2, tokens)  # the sampled token's rank - 1
    ids = rng.integers(0, VOCAB, tokens)
    rows = []
    for t in range(tokens):
        others = [int((ids[t] + 1 + 7919 * r) % VOCAB) for r in range(num_logprobs + 1)]  # distinct, not ids[t]
        ranked = others[: pick[t]] + [int(ids[t])] + others[pick[t] :]
        row_values = values[t].tolist()
        rows.append([(int(ids[t]), row_values[pick[t]], int(pick[t]) + 1)]
                    + [(ranked[r], row_values[r], r + 1) for r in range(num_logprobs)])
    return ids.tolist(), rows


def vllm_output(tokens: int, num_logprobs: int = 0, *, flat: bool = False, seed: int = 0,
                routing: np.ndarray | None = None, rows: Any = None) -> VllmCompletionOutput:
    """A ``CompletionOutput`` of ``tokens`` sampled tokens with their logprobs (``vllm_rows``, or
    ``rows`` given as ``(ids, rows)``): ``logprobs`` a list of ``{token_id: Logprob}`` dicts, or
    with ``flat`` a ``FlatLogprobs``; ``cumulative_logprob`` their sum."""
    ids, entries = vllm_rows(tokens, num_logprobs, seed=seed) if rows is None else rows
    if flat:
        logprobs: Any = VllmFlatLogprobs()
        for row in entries:
            logprobs.start_indices.append(len(logprobs.token_ids))
            for token_id, value, rank in row:
                logprobs.token_ids.append(token_id)
                logprobs.logprobs.append(value)
                logprobs.ranks.append(rank)
                logprobs.decoded_tokens.append(None)
            logprobs.end_indices.append(len(logprobs.token_ids))
    else:
        logprobs = [{token_id: VllmLogprob(value, rank) for token_id, value, rank in row} for row in entries]
    cumulative = float(sum(row[0][1] for row in entries)) if entries else 0.0
    return VllmCompletionOutput(0, "", list(ids), cumulative, logprobs, routed_experts=routing, finish_reason="length")

