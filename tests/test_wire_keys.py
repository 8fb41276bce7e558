"""The wire keys come from the wire table: code names a per-token field's key as
``KEY.<key>`` (src/tokenwire/base/_table.py), so that renaming or adding a field is its row.

Outside the table and the files generated from it, a field's key is spelled only by the rules
that read it (their error locations), in messages and docstrings, and where the same word is
the library's own name for something else (a result attribute, an Arrow column, a record's
member); those are listed below, each with its reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import tokenwire
from tokenwire.base import _table
from tokenwire.base._table import KEY

ROOT = Path(tokenwire.__file__).parent

# Path keys that are common words (a blob's "data", a record's "content", ...): a string
# spelling one is as often something else, so they are not searched for.
# "top_k" is also the parsers' head-size option and "sampled" a transport's name; "payload" is
# also GenerateResponse's attribute for the other top-level fields.
_WORDS = {"data", "ids", "counts", "offsets", "content", "tokens", "logprobs", "choices", "top_k", "sampled",
          "payload"}
KEYS = sorted({key for f in _table.FIELDS for key in f.path} - _WORDS)

# Files that spell keys by design: the table, what is generated from it, and the rules (each
# rule reads its field and reports where it failed by its path).
SPELLED = ("base/_table.py", "_fields.pxi", "rules/")

# (file, key) -> why that file spells that key.
ALLOWED: dict[tuple[str, str], str] = {
    **{("arrow.py", key): "an Arrow column name (a result attribute)"
       for key in ("prompt_token_ids", "completion_logprobs", "sampling_mask", "routed_experts")},
    **{("cli/inspect.py", key): "the result attribute a field is decoded to"
       for key in ("completion_logprobs", "sampling_mask", "routed_experts")},
    **{("_core_plain.pxi", key): "a result dataclass field the plain path sets"
       for key in ("completion_logprobs", "prompt_token_ids")},
    **{("_core_direct.pxi", key): "a key tw_plain_walk (csrc/json/tw_plain.c) spells itself, checked at import "
       "against the table's KEY.<key>"
       for key in ("compact_logprobs", "completion_logprobs", "prompt_token_ids")},
    **{(name, key): "a Batch attribute (the padded array of a result attribute)"
       for name in ("batch/_batch.py", "base/_types.py")
       for key in ("completion_logprobs", "sampling_mask", "routed_experts", "prompt_token_ids")},
    ("auditing/_formats.py", "top_logprobs"): "a fragment of the rules' messages",
    ("base/_types.py", "sampling_mask_logprobs"): "a payload segment's field name (prime-rl's own names for its fields)",
    ("write/_writer.py", "token_ids"): "encode_top_k's argument and the OpenAI writers' choice member, named in their messages",
    ("write/_writer.py", "prompt_token_ids"): "the OpenAI writers' argument, named in its messages",
    ("write/_writer.py", "top_logprobs"): "the OpenAI writers' choice member, read from the caller's dict",
    **{("batch/_rollout.py", key): "a Trajectory argument or the result attribute a refusal names"
       for key in ("prompt_token_ids", "routed_experts", "token_ids")},
    **{("read/_validate.py", key): "validate's keywords and the vLLM adapter's attributes, named in refusals and "
       "mapped from the rules' field names to the caller's"
       for key in ("compact_logprobs", "completion_logprobs", "kept_tokens", "prompt_token_ids", "routed_experts",
                   "sampling_mask", "token_ids")},
    **{("compat/eval_protocol.py", key): "eval-protocol's own result keys (its dict, not the wire)"
       for key in ("completion_logprobs", "prompt_token_ids", "raw_output")},
    **{("compat/nemo_gym.py", key): "NeMo-Gym's message members (its token bundle), not the wire table's rows"
       for key in ("prompt_token_ids", "routed_experts", "token_ids")},
    **{("compat/trl.py", key): "TRL's request and result keys, as TRL's client indexes them"
       for key in ("prompt_token_ids", "token_ids", "top_logprobs")},
    **{("compat/areal.py", key): "the field a refusal names (its error location)"
       for key in ("output_ids", "token_ids")},
    ("compat/skyrl.py", "prompt_token_ids"): "SkyRL's generate() keyword (the request's prompt)",
    **{("compat/verifiers.py", key): "renderers' result keys as verifiers reads them, and the fields refusals name"
       for key in ("completion_logprobs", "routed_experts", "sampling_mask")},
    ("compat/renderers.py", "top_logprobs"): "a member of a logprobs.content record",
    ("compat/_renderers_json.py", "top_logprobs"): "a member of a logprobs.content record",
    ("kernels/python.py", "top_logprobs"): "a member of a logprobs.content record",
    ("samples.py", "top_logprobs"): "a member of a logprobs.content record",
}

# A string literal in Cython text (outside comments).
_CYTHON_STRING = re.compile(r'"([A-Za-z_]+)"')


def _spelled(path: Path) -> set[str]:
    """The wire keys a source file spells as a whole string literal."""
    text = path.read_text("utf-8")
    if path.suffix in (".pyx", ".pxi"):
        found = {m[1] for line in text.splitlines() for m in _CYTHON_STRING.finditer(line.split("#")[0])}
    else:
        found = {node.value for node in ast.walk(ast.parse(text, str(path)))
                 if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    return found & set(KEYS)


def test_key_names_every_key_of_the_table():
    for f in _table.FIELDS:
        assert [getattr(KEY, key) for key in f.path] == list(f.path)
        assert f.key == f.path[0]
    with pytest.raises(AttributeError):
        KEY.no_such_field  # noqa: B018


def test_wire_keys_are_spelled_only_by_the_table():
    """No module spells a per-token field's key outside the table, the generated files and the
    rules, save the allowed places."""
    sources = [p for p in ROOT.rglob("*") if p.suffix in (".py", ".pyi", ".pyx", ".pxi")]
    assert any(p.name == "_writer.py" for p in sources)  # the package's sources are read
    found = set()
    for path in sources:
        name = path.relative_to(ROOT).as_posix()
        if not name.startswith(SPELLED):
            found |= {(name, key) for key in _spelled(path)}
    extra = sorted(found - set(ALLOWED))
    assert extra == [], f"wire keys spelled outside the table (name them as KEY.<key>): {extra}"
    read = {p.relative_to(ROOT).as_posix() for p in sources}
    stale = sorted(place for place in set(ALLOWED) - found if place[0] in read)
    assert stale == [], f"allowed places that no longer spell their key: drop them from ALLOWED: {stale}"
