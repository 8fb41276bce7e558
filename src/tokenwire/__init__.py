"""tokenwire: fast, strict decoding of the per-token evidence LLM inference servers return.

``implementation`` is ``"c"`` when the compiled core is in use and ``"python"`` when the
pure-Python reference is (no compiled core, a non-CPython interpreter, or
``TOKENWIRE_NO_EXTENSIONS=1``).
"""

from __future__ import annotations

from .batch._batch import aparse_many, collate, parse_batch, parse_many
from ._docs import document
from .base._errors import MalformedResponseError
from .read._heads import select_heads
from .batch._rollout import Trajectory, rollout_batch
from .read._facade import (
    parse_chat_completions_response,
    parse_completions_response,
    parse_generate_response,
    parse_sglang_generate_response,
)
from .read._select import impl as _impl
from .read._select import implementation
from .read._select import kernels as _kernels
from .base._types import Batch, BatchTensors, GenerateChoice, GenerateResponse, PayloadSegment, Ragged, RoutedExperts
from .read._stream import (
    StreamReader,
    parse_chat_completions_stream,
    parse_completions_stream,
    parse_generate_stream,
    parse_sglang_generate_stream,
)
from .read._validate import validate, validate_sglang_meta_info, validate_vllm_output
from .write._writer import (
    Blob,
    dumps_chat_completions_response,
    dumps_completions_response,
    dumps_generate_response,
    encode_compact_logprobs,
    encode_kept_tokens,
    encode_packed,
    encode_routed_experts,
    encode_sampling_mask,
    encode_sampling_mask_logprobs,
    encode_teacher_scores,
    encode_top_k,
    json_default,
)
from .rules.openai import (
    chat_completions_request_params,
    completions_request_params,
    generate_request_params,
    sglang_generate_request_params,
)

__all__ = [
    "Batch",
    "BatchTensors",
    "Blob",
    "GenerateChoice",
    "GenerateResponse",
    "MalformedResponseError",
    "PayloadSegment",
    "Ragged",
    "RoutedExperts",
    "StreamReader",
    "Trajectory",
    "Verdict",
    "__version__",
    "aparse_many",
    "audit",
    "b64decode",
    "b64encode",
    "chat_completions_request_params",
    "collate",
    "completions_request_params",
    "dumps_chat_completions_response",
    "dumps_completions_response",
    "dumps_generate_response",
    "encode_compact_logprobs",
    "encode_kept_tokens",
    "encode_packed",
    "encode_routed_experts",
    "encode_sampling_mask",
    "encode_sampling_mask_logprobs",
    "encode_teacher_scores",
    "encode_top_k",
    "generate_request_params",
    "implementation",
    "json_default",
    "parse_chat_completions_response",
    "parse_chat_completions_stream",
    "parse_completions_response",
    "parse_completions_stream",
    "parse_generate_response",
    "parse_generate_stream",
    "parse_batch",
    "parse_many",
    "parse_sglang_generate_response",
    "parse_sglang_generate_stream",
    "rollout_batch",
    "select_heads",
    "sglang_generate_request_params",
    "simd_path",
    "simd_paths",
    "validate",
    "validate_sglang_meta_info",
    "validate_vllm_output",
]

__version__ = "0.1.0"


b64decode = _kernels.b64decode
b64encode = _kernels.b64encode
document(
    globals(),
    [
        "b64decode",
        "b64encode",
        "parse_chat_completions_response",
        "parse_completions_response",
        "parse_generate_response",
        "parse_sglang_generate_response",
    ],
)


def __getattr__(name: str) -> object:
    """The audit (``audit``, ``Verdict``), loaded when first asked for: ``import tokenwire``
    loads no module of the audit."""
    if name in ("audit", "Verdict"):
        from .auditing._audit import Verdict, audit

        globals().update(audit=audit, Verdict=Verdict)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "audit", "Verdict"})


def simd_paths() -> list[str]:
    """The code paths of the C kernels this CPU and build can run, best last."""
    if implementation != "c":
        return []
    return _impl.simd_paths()


def simd_path() -> str | None:
    """The code path every C kernel takes (``TOKENWIRE_SIMD`` forces one), or None without the
    core."""
    if implementation != "c":
        return None
    return _impl.simd_path()
