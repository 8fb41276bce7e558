"""The wire table: every per-token field tokenwire reads, described once.

One row a field: where it is (the scope and the JSON path under it), what it holds, what the
scanner does with it as it passes (blank it out of the copy the JSON parser reads, decode its
base64, read its integers), and under which name the evidence of a choice holds what was read
there. Everything else is derived from these rows:

- ``csrc/gen_fields.py`` writes from them the C field enum and the scanner's path rules
  (``csrc/json/tw_fields.def``), the Cython field ids (``src/tokenwire/_fields.pxi``) and the
  ctypes mirror the C checks use (``tests/c/tw_fields.py``); the written files are checked in
  and ``tests/test_generated_tables.py`` writes them again and compares;
- both extractors (the compiled core and :mod:`tokenwire.extract.python`) fill one evidence
  attribute a row, and the plain path of the compiled core takes only choices whose keys are
  all on the allow-list derived here;
- code that looks up, writes or lists a wire key names it as ``KEY.<key>``
  (``KEY.kept_tokens``), and the keys the rules consume are derived from the rows
  (``top_keys``): outside the row and the generated files, a field's name is spelled only by
  the rule that reads it and in messages, error locations and docstrings.

This module imports nothing but the standard library: the generator loads it by path.

Adding a field: a row here (then ``python3 csrc/gen_fields.py``), the rule that reads
``ev.<attr>`` in :mod:`tokenwire.rules`, and the result attribute it fills
(docs/architecture.md, "Adding a field", walks through one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Where a path starts: the root object, one element of root "choices" (generate and
# OpenAI-compatible documents), or one SGLang item (the root object, or an element of a root
# array).
ROOT, CHOICE, ITEM = "root", "choice", "item"

# What a field holds (what its evidence attribute is, see ``Evidence``):
IDS = "ids"  # a list of unsigned integers below ``high``: int_list's (values, count, bad)
BLOB = "blob"  # a base64 string: its decoded bytes (uint8), None when it is not base64
MASK = "mask"  # a list of id lists (sampling_mask's list form): nested_ints' result
RECORDS = "records"  # a list of per-token records (logprobs.content and its kin)
NUMBERS = "numbers"  # a list of JSON numbers
TOKENS = "tokens"  # a list of token strings, "token_id:N" or text
ROWS = "rows"  # a list of per-token candidate rows
VALUE = "value"  # any JSON value: the scanner records where it is, the rules read it parsed

# The integer limits of IDS fields.
TOKEN_ID, OFFSET = "token_id", "offset"

GENERATE, OPENAI, SGLANG = "generate", "openai", "sglang"


@dataclass(frozen=True)
class Field:
    """One row of the wire table."""

    name: str  # the C enum name: TW_F_<name> (root fields: TWS_T_<name>)
    scope: str  # ROOT, CHOICE or ITEM
    path: tuple[str, ...]  # the keys from the scope's object
    kind: str  # IDS, BLOB, MASK, RECORDS, NUMBERS, TOKENS, ROWS or VALUE
    formats: tuple[str, ...]  # the formats whose rules read it
    attr: str  # the evidence attribute that holds what was read
    high: str | None = None  # IDS: TOKEN_ID or OFFSET, the largest value allowed
    # How a scan blanks it: a "string"'s content, an "array"'s interior. The generate scan
    # blanks the rows generate's rules read; the OpenAI-compatible and SGLang scans the strings
    # with blank_openai (and the arrays of the OpenAI-compatible scan).
    blank: str | None = None
    blank_openai: bool = False  # the OpenAI-compatible (and SGLang) scan blanks it too
    base64: bool = False  # a scan that blanks it decodes it as base64 as it passes
    read: str | None = None  # read during the scan: "ints", "mask" or "records"
    result: str | None = None  # the result attribute it ends in, where it has one of its own

    @property
    def key(self) -> str:
        """The key of the scope's object the field lies under: ``compact_logprobs``."""
        return self.path[0]

    @property
    def dotted(self) -> str:
        """The path as the rules and messages name it: ``compact_logprobs.offsets``."""
        return ".".join(self.path)


_G, _O, _S = (GENERATE,), (OPENAI,), (SGLANG,)

FIELDS: tuple[Field, ...] = (
    # Choices of /inference/v1/generate (the OpenAI-compatible rules read some of them too).
    Field("TOKEN_IDS", CHOICE, ("token_ids",), IDS, (GENERATE, OPENAI), "token_ids", high=TOKEN_ID,
          blank="array", blank_openai=True, read="ints", result="token_ids"),
    Field("LOGPROBS", CHOICE, ("logprobs",), VALUE, (GENERATE, OPENAI), "logprobs"),
    Field("LOGPROBS_CONTENT", CHOICE, ("logprobs", "content"), RECORDS, (GENERATE, OPENAI),
          "logprobs_content", read="records", result="logprobs"),
    Field("LP_SAMPLED", CHOICE, ("logprobs", "sampled"), NUMBERS, _G, "logprobs_sampled",
          blank="array", result="logprobs"),
    # vLLM's packed top-k (``return_top_k_logprobs``): on the generate endpoint, and beside
    # /v1/completions' token_logprobs (the same block, read by the same rule).
    Field("TK_IDS", CHOICE, ("logprobs", "top_k", "token_ids"), BLOB, (GENERATE, OPENAI), "top_k_ids",
          blank="string", blank_openai=True, base64=True, result="top_logprobs"),
    Field("TK_LOGPROBS", CHOICE, ("logprobs", "top_k", "logprobs"), BLOB, (GENERATE, OPENAI), "top_k_logprobs",
          blank="string", blank_openai=True, base64=True, result="top_logprobs"),
    Field("CL_DATA", CHOICE, ("completion_logprobs", "data"), BLOB, _G, "completion_data",
          blank="string", base64=True, result="logprobs"),
    Field("CP_DATA", CHOICE, ("compact_logprobs", "data"), BLOB, _G, "compact_data",
          blank="string", base64=True, result="top_logprobs"),
    Field("CP_OFFSETS", CHOICE, ("compact_logprobs", "offsets"), IDS, _G, "compact_offsets",
          high=OFFSET, blank="array", read="ints", result="top_logprobs"),
    Field("SAMPLING_MASK", CHOICE, ("sampling_mask",), MASK, _G, "sampling_mask",
          blank="array", read="mask", result="sampling_mask"),
    Field("SM_IDS_DATA", CHOICE, ("sampling_mask", "ids", "data"), BLOB, _G, "sampling_mask_ids",
          blank="string", base64=True, result="sampling_mask"),
    Field("SM_COUNTS_DATA", CHOICE, ("sampling_mask", "counts", "data"), BLOB, _G,
          "sampling_mask_counts", blank="string", base64=True, result="sampling_mask"),
    Field("KT_IDS", CHOICE, ("kept_tokens", "ids"), BLOB, _G, "kept_ids", blank="string",
          base64=True, result="sampling_mask"),
    Field("KT_COUNTS", CHOICE, ("kept_tokens", "counts"), BLOB, _G, "kept_counts",
          blank="string", base64=True, result="sampling_mask"),
    Field("ROUTED", CHOICE, ("routed_experts",), BLOB, (GENERATE, OPENAI), "routed_experts",
          blank="string", blank_openai=True, base64=True, result="routed_experts"),
    Field("RE_DATA", CHOICE, ("routed_experts", "data"), BLOB, _G, "routed_experts_data",
          blank="string", base64=True, result="routed_experts"),
    # prime-rl's by-handle segments (rows in files under payload_root): the rules read the value.
    Field("PAYLOAD", CHOICE, ("payload",), VALUE, _G, "payload", result="payload"),
    # prime-rl's sampler logprobs of the kept ids, rows aligned with sampling_mask.
    Field("SM_LOGPROBS", CHOICE, ("sampling_mask_logprobs",), VALUE, _G, "sampling_mask_logprobs",
          result="sampling_mask_logprobs"),
    Field("WEIGHT_VERSIONS", CHOICE, ("weight_versions",), VALUE, _G, "weight_versions",
          result="weight_versions"),
    # Choices of the OpenAI-compatible endpoints (/v1/completions, /v1/chat/completions).
    Field("PROMPT_IDS", CHOICE, ("prompt_token_ids",), IDS, _O, "prompt_token_ids", high=TOKEN_ID,
          read="ints", result="prompt_token_ids"),
    Field("RAW_OUTPUT", CHOICE, ("raw_output",), VALUE, _O, "raw_output"),
    Field("LP_TOKEN_LOGPROBS", CHOICE, ("logprobs", "token_logprobs"), NUMBERS, _O,
          "token_logprobs", result="logprobs"),
    Field("LP_TOKENS", CHOICE, ("logprobs", "tokens"), TOKENS, _O, "tokens", result="token_ids"),
    Field("LP_TOKEN_IDS", CHOICE, ("logprobs", "token_ids"), IDS, _O, "logprob_token_ids",
          high=TOKEN_ID, read="ints", result="token_ids"),
    Field("LP_TEXT_OFFSET", CHOICE, ("logprobs", "text_offset"), VALUE, _O, "text_offset"),
    Field("LP_TOP", CHOICE, ("logprobs", "top_logprobs"), ROWS, _O, "top_logprobs",
          result="top_logprobs"),
    Field("RO_TOKEN_IDS", CHOICE, ("raw_output", "completion_token_ids"), IDS, _O,
          "raw_token_ids", high=TOKEN_ID, read="ints", result="token_ids"),
    Field("RO_CONTENT", CHOICE, ("raw_output", "completion_logprobs", "content"), RECORDS, _O,
          "raw_content", result="logprobs"),
    # SGLang /generate items.
    Field("SGL_IDS", ITEM, ("output_ids",), IDS, _S, "output_ids", high=TOKEN_ID, read="ints",
          result="token_ids"),
    Field("SGL_TRIPLES", ITEM, ("meta_info", "output_token_logprobs"), RECORDS, _S,
          "output_token_logprobs", result="logprobs"),
    Field("SGL_TOP", ITEM, ("meta_info", "output_top_logprobs"), ROWS, _S, "output_top_logprobs",
          result="top_logprobs"),
    # SGLang's sampling mask (``return_sampling_mask``): each output token's kept ids, read in C
    # as the scan passes, and the sampled token's logprob renormalized over them (one number a
    # token; a list aligned with the row under ``sampling_logprobs_mode: "support"``).
    Field("SGL_MASK", ITEM, ("meta_info", "output_token_sampling_mask"), MASK, _S,
          "output_token_sampling_mask", read="mask", result="sampling_mask"),
    Field("SGL_SAMPLING", ITEM, ("meta_info", "output_token_sampling_logprobs"), NUMBERS, _S,
          "output_token_sampling_logprobs", result="sampling_logprobs"),
    # SGLang's flat prompt top-k (``return_flat_raw_top_logprobs``, ``_b64``): rows x k values
    # and ids, plain JSON lists or base64 float32 / int32.
    Field("SGL_PTOP_VAL", ITEM, ("meta_info", "input_top_logprobs_val_flat"), NUMBERS, _S,
          "input_top_logprobs_val_flat", result="prompt_top_logprobs"),
    Field("SGL_PTOP_IDX", ITEM, ("meta_info", "input_top_logprobs_idx_flat"), IDS, _S,
          "input_top_logprobs_idx_flat", high=TOKEN_ID, read="ints", result="prompt_top_ids"),
    Field("SGL_PTOP_VAL_B64", ITEM, ("meta_info", "input_top_logprobs_val_flat_b64"), BLOB, _S,
          "input_top_logprobs_val_flat_b64", result="prompt_top_logprobs"),
    Field("SGL_PTOP_IDX_B64", ITEM, ("meta_info", "input_top_logprobs_idx_flat_b64"), BLOB, _S,
          "input_top_logprobs_idx_flat_b64", result="prompt_top_ids"),
    Field("SGL_WEIGHT_VERSIONS", ITEM, ("meta_info", "weight_versions"), VALUE, _S, "weight_versions",
          result="weight_versions"),
    # Older SGLang sends the single version alone; newer sends it beside the spans.
    Field("SGL_WEIGHT_VERSION", ITEM, ("meta_info", "weight_version"), VALUE, _S, "weight_version"),
    Field("SGL_ROUTED", ITEM, ("meta_info", "routed_experts"), BLOB, _S, "routed_experts",
          blank="string", blank_openai=True, base64=True, result="routed_experts"),
    Field("SGL_INDEXER", ITEM, ("meta_info", "indexer_topk"), BLOB, _S, "indexer_topk",
          blank="string", blank_openai=True, base64=True, result="indexer_topk"),
    # The root object of generate and OpenAI-compatible documents.
    Field("PROMPT", ROOT, ("prompt_token_ids",), IDS, (GENERATE, OPENAI), "prompt_token_ids",
          high=TOKEN_ID, blank="array", blank_openai=True, read="ints", result="prompt_token_ids"),
    Field("CHOICES", ROOT, ("choices",), VALUE, (GENERATE, OPENAI), "choices"),
    Field("PROMPT_ROUTED", ROOT, ("prompt_routed_experts",), BLOB, _O, "prompt_routed_experts",
          blank="string", blank_openai=True, base64=True, result="prompt_routed_experts"),
    # NVIDIA Dynamo's engine channel (the request's `nvext.extra_fields: ["engine_data"]`): one
    # object beside "choices", the engine's own ids, logprobs and routing of its one choice.
    Field("DYN_TOKEN_IDS", ROOT, ("nvext", "engine_data", "completion_token_ids"), IDS, _O,
          "engine_token_ids", high=TOKEN_ID, blank="array", blank_openai=True, read="ints", result="token_ids"),
    Field("DYN_LOGPROBS", ROOT, ("nvext", "engine_data", "completion_logprobs"), NUMBERS, _O,
          "engine_logprobs", blank="array", blank_openai=True, result="logprobs"),
    Field("DYN_PROMPT_IDS", ROOT, ("nvext", "engine_data", "prompt_token_ids"), IDS, _O,
          "engine_prompt_ids", high=TOKEN_ID, blank="array", blank_openai=True, read="ints",
          result="prompt_token_ids"),
    Field("DYN_ROUTED_DATA", ROOT, ("nvext", "engine_data", "routed_experts", "data"), BLOB, _O,
          "engine_routed_data", blank="string", blank_openai=True, base64=True, result="routed_experts"),
    # Dynamo's SGLang worker puts SGLang's own routing there: a bare base64 int32 string.
    Field("DYN_ROUTED", ROOT, ("nvext", "engine_data", "routed_experts"), BLOB, _O, "engine_routed",
          blank="string", blank_openai=True, base64=True, result="routed_experts"),
    # The frontend's copy of the engine's routing at nvext's top (`extra_fields: ["routed_experts"]`),
    # whichever form the worker sent.
    Field("DYN_NV_ROUTED", ROOT, ("nvext", "routed_experts"), BLOB, _O, "nvext_routed",
          blank="string", blank_openai=True, base64=True, result="routed_experts"),
    Field("DYN_NV_ROUTED_DATA", ROOT, ("nvext", "routed_experts", "data"), BLOB, _O, "nvext_routed_data",
          blank="string", blank_openai=True, base64=True, result="routed_experts"),
    # Dynamo's other channel of the same ids (`nvext.extra_fields: ["completion_token_ids"]`): the
    # engine's output ids at nvext's top, concatenated from the chunks' deltas.
    Field("DYN_NV_TOKEN_IDS", ROOT, ("nvext", "completion_token_ids"), IDS, _O, "nvext_token_ids",
          high=TOKEN_ID, blank="array", blank_openai=True, read="ints", result="token_ids"),
    # SGLang's OpenAI-compatible extension object (``SglExt``): one per response, beside
    # "choices"; its routing is the first choice's, a bare base64 int32 array as on /generate.
    Field("SGLEXT_ROUTED", ROOT, ("sglext", "routed_experts"), BLOB, _O, "sglext_routed_experts",
          blank="string", blank_openai=True, base64=True, result="routed_experts"),
    # vLLM's teacher scores: a base64 .npy matrix.
    Field("TEACHER", ROOT, ("prompt_token_id_logprobs",), BLOB, _G, "prompt_token_id_logprobs",
          blank="string", base64=True, result="prompt_token_id_logprobs"),
)

# The fields of a choice or an item: TW_F_* in this order (the scanner's tw_choice.f[]).
CHOICE_FIELDS: tuple[Field, ...] = tuple(f for f in FIELDS if f.scope != ROOT)
ROOT_FIELDS: tuple[Field, ...] = tuple(f for f in FIELDS if f.scope == ROOT)
FIELD_ID: dict[str, int] = {f.name: i for i, f in enumerate(CHOICE_FIELDS)}
BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
# The evidence attribute of a path: ATTR_AT[scope, "compact_logprobs.data"] == "compact_data".
ATTR_AT: dict[tuple[str, str], str] = {(f.scope, f.dotted): f.attr for f in FIELDS}


class _Keys:
    """KEY's type: one attribute a key. A plain instance, its attributes set one by one, so
    that a read of one is specialized by the interpreter and costs about what a constant does."""

    def __init__(self, keys: Iterable[str]) -> None:
        for key in keys:
            setattr(self, key, key)


# Every key the rows' paths spell, under its own name: KEY.kept_tokens == "kept_tokens". Code
# outside the table names a wire key through it, so a key renamed or dropped here fails where
# it is named (AttributeError) instead of never matching.
KEY: Any = _Keys(dict.fromkeys(key for f in FIELDS for key in f.path))


def fields(scope: str, fmt: str | None = None) -> tuple[Field, ...]:
    """The rows of one scope (and read by one format's rules)."""
    return tuple(f for f in FIELDS if f.scope == scope and (fmt is None or fmt in f.formats))


def top_keys(scope: str, fmt: str) -> frozenset[str]:
    """The keys of a scope's object under which a format's fields lie."""
    return frozenset(f.key for f in fields(scope, fmt))


def _check() -> None:
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for f in FIELDS:
        assert (f.scope, f.path) not in seen, f"two rows for {f.scope} {f.dotted}"
        seen.add((f.scope, f.path))
        assert (f.kind == IDS) == (f.high is not None), f"{f.name}: high is for IDS fields only"
        assert not f.base64 or f.blank == "string", f"{f.name}: base64 is decoded where blanked"
        assert all(key.isidentifier() for key in f.path), f"{f.name}: a key KEY cannot name"
        assert not f.blank_openai or f.blank, f"{f.name}: blank says how the OpenAI-compatible scan blanks it"
    for scope in (ROOT, CHOICE, ITEM):
        attrs = [f.attr for f in fields(scope)]
        assert len(set(attrs)) == len(attrs), f"two {scope} fields share an evidence attribute"


_check()
